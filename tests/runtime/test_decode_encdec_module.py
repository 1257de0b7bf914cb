"""The generated module serves an encoder-decoder's decode step: the decoder on one new token per sequence, its
self-attention over N cached tokens and its cross-attention over the S cached encoder keys and values (buffers;
only q and the output projection run). validate proves the decode costs equal FlopCounterMode and the aten ops on
that module (against transformers: tests/analysis/test_decode_encdec.py)."""
from __future__ import annotations

import pytest

from costspec.importer import import_hf
from costspec.model import loads, serve
from costspec.runtime.torch_build import build_module
from tests.analysis.test_decode_encdec import FAMILIES
from tests.common import invoke
from tests.importer.check import write_config


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_decode_step_counts_equal_the_generated_module(family, tmp_path):
    _, config = FAMILIES[family]()
    path = write_config(config, tmp_path)
    spec = tmp_path / f"{family}.yaml"
    spec.write_text(import_hf(path).text)
    result = invoke("validate", str(spec), "--phase", "decode", "--context", "9", "--batch", "2", "--set", "S=12")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "result: PASS" in result.stdout


def test_the_cross_attention_holds_the_encoder_cache(tmp_path):
    _, config = FAMILIES["bart"]()
    path = write_config(config, tmp_path)
    step = serve(loads(import_hf(path).text), "decode", 9)
    module, make_input = build_module(step, step.bind(2, {"S": 12}))
    cross = [m for m in module.modules() if hasattr(m, "k_memory")]
    assert len(cross) == 2 and all(not hasattr(m, "k") and not hasattr(m, "v") for m in cross)
    assert tuple(cross[0].k_memory.shape) == (2, 4, 12, 16) and cross[0].v_memory.abs().sum() > 0
    assert tuple(make_input("cpu").shape) == (2, 1)
    assert module(make_input("cpu")).shape[:2] == (2, 1)
