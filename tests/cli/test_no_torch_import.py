"""eval / check must never import torch (it costs seconds and is an optional extra)."""
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.common import ROOT

PROBE = """
import sys
from costspec.cli import main
try:
    main({args!r})
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
assert "torch" not in sys.modules, sorted(m for m in sys.modules if m.startswith("torch"))[:5]
print("no torch")
"""


@pytest.mark.parametrize("args", [
    ["eval", "specs/vit_b.yaml", "--batch", "8"],
    ["eval", "specs/toy_mlp.yaml", "--pass", "train", "--format", "json"],
    ["check", "specs/vit_b.yaml", "specs/toy_mlp.yaml"],
    ["formula", "specs/vit_b.yaml", "--keep", "B,S,C,L", "--per-layer", "--format", "json"],
    ["latex", "specs/vit_b.yaml", "--pass", "train", "--standalone"],
    ["sweep", "specs/vit_b.yaml", "--vary", "B=1..64:x2"],
    ["gpus"],
    ["eval", "specs/vit_b.yaml", "--gpu", "h100-sxm"],
    ["eval", "specs/gpt2_small.yaml", "--lengths", "3,5,2"],
    ["eval", "specs/gpt2_small.yaml", "--gpu", "h100-sxm", "--alignment", "strict"],
    ["eval", "specs/vit_b.yaml", "--gpu", "b200", "--ladder"],
    ["sweep", "specs/llama_1b.yaml", "--vary", "L=1,2", "--lengths", "32,512,128"],
    ["eval", "vit_b", "--dtype", "fp32"],  # a zoo name, --dtype
    ["sweep", "specs/vit_b.yaml", "--vary", "B=1..8:x2", "--gpu", "h100-sxm", "--format", "json"],
    ["zoo"],
    ["import", "hf", "tests/data/hf_configs/vit_b.json"],  # reads config.json as JSON
    ["import", "hf", "tests/data/hf_configs/llama_1b.json", "-o",
     str(Path(tempfile.gettempdir()) / "costspec-no-torch-import.yaml")],
    ["report", "specs/vit_b.yaml", "--gpu", "h100-sxm", "--vary", "B=1..4:x2", "-o",
     str(Path(tempfile.gettempdir()) / "costspec-no-torch-report.html")],
])
def test_command_does_not_import_torch(args):
    result = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "no torch" in result.stdout
