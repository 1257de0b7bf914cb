"""The precision ladder: dtypes past fp8 (element sizes with block scales, routing, peaks) and `eval --ladder`."""
from __future__ import annotations

import pytest
import sympy

from costspec.analysis.gpus import get_gpu
from costspec.analysis.ladder import ladder
from costspec.core.conventions import Precision
from costspec.model import load
from tests.common import ROOT
from tests.common import invoke as cli

SPECS = ROOT / "specs"




def test_element_sizes_are_exact():
    assert Precision("fp8_e4m3").bytes_per_element == Precision("fp8_e5m2").bytes_per_element == 1
    assert Precision("int8").bytes_per_element == 1 and Precision("fp8").bytes_per_element == 1
    assert Precision("nvfp4").bytes_per_element == sympy.Rational(9, 16)  # 4 bits + an fp8 scale per 16
    assert Precision("mxfp4").bytes_per_element == sympy.Rational(17, 32)  # 4 bits + an e8m0 scale per 32
    assert Precision("fp4").bytes_per_element == Precision("nvfp4").bytes_per_element
    assert all(Precision(d).tensor_cores for d in ("fp8_e4m3", "fp8_e5m2", "int8", "nvfp4", "mxfp4"))


def test_peaks_by_format():
    b200, h100, a100, v100 = (get_gpu(k) for k in ("b200", "h100-sxm", "a100-80gb", "v100-sxm2"))
    assert b200.tensor_peak("nvfp4") == b200.tensor_peak("mxfp4") == 9000e12  # HGX B200: 18 PFLOPS sparse
    assert h100.tensor_peak("fp8_e5m2") == h100.tensor_peak("fp8") == 1978.9e12
    assert h100.tensor_peak("int8") == 1978.9e12 and a100.tensor_peak("int8") == 624e12
    assert not h100.supports("nvfp4") and not a100.supports("fp8_e4m3") and not v100.supports("int8")


def test_with_dtype_changes_bytes_not_flops():
    model = load(SPECS / "vit_b.yaml")
    values = model.bind(8)
    base = model.report("forward", values)
    fp4 = model.with_precision("nvfp4")
    assert str(fp4.precision) == "nvfp4" and fp4.report("forward", values).total == base.total


@pytest.mark.parametrize("gpu, rungs", [
    ("b200", ["fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "nvfp4", "mxfp4"]),
    ("h100-sxm", ["fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8"]),
    ("a100-80gb", ["fp32", "tf32", "fp16", "bf16", "int8"]),
])
def test_ladder_rows(gpu, rungs):
    model = load(SPECS / "vit_b.yaml")
    result = ladder(model, model.bind(64), get_gpu(gpu))
    table = result.table
    assert [r.name for r in table.rows] == rungs
    fp32, bf16 = table.row("fp32"), table.row("bf16")
    # AI boost: same FLOPs, half / quarter the bytes -> 2x / 4x the intensity of fp32
    assert bf16.get("intensity") == 2 * fp32.get("intensity")
    if "fp8_e4m3" in rungs:
        assert table.row("fp8_e4m3").get("intensity") == 4 * fp32.get("intensity")
    assert fp32.get("vs_fp32") == 1 and bf16.get("vs_bf16") == 1 and bf16.get("vs_fp32") > 1
    assert fp32.get("engine") == "CUDA" and bf16.get("engine") == "TC"


def test_cli_ladder():
    out = cli("eval", str(SPECS / "vit_b.yaml"), "--batch", "64", "--gpu", "b200", "--ladder")
    assert out.returncode == 0, out.stderr
    assert "nvfp4" in out.stdout and "9/16" in out.stdout and "vs bf16" in out.stdout
    bad = cli("eval", str(SPECS / "vit_b.yaml"), "--ladder")
    assert bad.returncode == 2 and "needs --gpu" in bad.stderr
