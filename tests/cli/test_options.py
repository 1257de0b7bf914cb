"""The options the commands share (costspec.cli.options): --dtype, and --batch / --set / --keep binding dims."""
from __future__ import annotations

from tests.common import ROOT, invoke


def test_dtype_on_eval_formula_and_sweep(cli):
    assert "precision: fp32" in cli("eval", "specs/vit_b.yaml", "--dtype", "fp32").stdout
    assert "TC FLOPs    = 0" in cli("formula", "specs/vit_b.yaml", "--dtype", "fp32").stdout
    sweep = cli("sweep", "specs/vit_b.yaml", "--vary", "B=1,2", "--dtype", "fp32").stdout.splitlines()
    assert sweep[0].split(",")[2] == "tc_flops" and sweep[1].split(",")[2] == "0"


# -- binding dims ----------------------------------------------------------------------------------
def test_batch_and_set_of_B_together_are_a_usage_error():
    r = invoke("eval", ROOT / "specs/vit_b.yaml", "--batch", "4", "--set", "B=8")
    assert r.returncode == 2 and "--batch 4 and --set B=8 both bind B" in r.stderr


def test_formula_set_substitutes_the_value():
    r = invoke("formula", ROOT / "specs/vit_b.yaml", "--set", "img=384")
    assert r.returncode == 0 and "img    image side in pixels; substituted: 384" in r.stdout
    assert "S = floor(img/patch)**2 + 1 = 577" in r.stdout  # (384 // 16)**2 + 1
    tex = invoke("latex", ROOT / "specs/vit_b.yaml", "--set", "img=384").stdout
    assert "& $384$ (substituted)" in tex and "spec value 384" not in tex
    both = invoke("formula", ROOT / "specs/vit_b.yaml", "--set", "img=384", "--keep", "img")
    assert both.returncode == 2 and "--keep img and --set img=384" in both.stderr
