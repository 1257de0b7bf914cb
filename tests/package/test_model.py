"""The Python API (costspec.load / loads and the Model facade, costspec/model.py): argument types, bad
paths and texts, and the precision override `load(dtype=)` / `with_precision`."""
from __future__ import annotations

import numpy as np
import pytest

import costspec
from costspec.core.errors import UsageError
from tests.common import ROOT


def test_dtype_overrides_the_default_precision_but_not_layer_precisions(write_spec):
    bf16 = costspec.load(ROOT / "specs/vit_b.yaml").evaluate("forward", B=2)
    fp32 = costspec.load(ROOT / "specs/vit_b.yaml", dtype="fp32").evaluate("forward", B=2)
    assert (fp32.tc, fp32.cuda) == (0, bf16.tc + bf16.cuda) and fp32.precision == "fp32"
    path = write_spec("""costspec: 1
name: mixed
dims: {M: 8, D: 16}
precision: {dtype: bf16}
input: [M, D]
layers:
  - linear: {out: D}
  - linear: {out: D}
    precision: fp32
""")
    model = costspec.load(path, dtype="fp16")
    rows = {r.name: r for r in model.evaluate().rows}
    # 2*M*D*D = 4096 matmul FLOPs each: the first follows --dtype (TC), the second keeps its fp32 (CUDA)
    assert rows["linear1"].values["tc_flops"] == 4096 and rows["linear1"].values["matmul_engine"] == "TC(fp16)"
    assert rows["linear2"].values["tc_flops"] == 0 and rows["linear2"].values["matmul_engine"] == "CUDA(fp32)"
    assert model.with_precision("fp32").evaluate().tc == 0
    with pytest.raises(UsageError):
        costspec.load(path, dtype="fp64")


# -- argument types --------------------------------------------------------------------------------
def test_api_accepts_python_and_numpy_integers():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    expected = model.evaluate(B=8).tc
    assert model.evaluate(B=np.int64(8)).tc == expected
    assert model.evaluate(B=np.uint16(8)).tc == expected
    assert model.bind(batch=np.int32(8)) == model.bind(batch=8)


@pytest.mark.parametrize("value", ["8", 8.0, True, np.float64(8), None, [8]])
def test_api_refuses_floats_strings_and_bools_as_dims(value):
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    with pytest.raises(UsageError, match="a dim value is an integer"):
        model.evaluate(B=value)


def test_api_refuses_bad_paths_texts_and_keeps():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    with pytest.raises(UsageError, match="needs a file path"):
        costspec.load(None)
    with pytest.raises(UsageError, match="needs the spec text"):
        costspec.loads(None)
    with pytest.raises(UsageError, match="dim names are strings, got int 1"):
        model.latex(keep=[1])
    assert model.latex(keep="B,C") == model.latex(keep=["B", "C"])
