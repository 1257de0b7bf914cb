"""The Python API (costspec.load / loads and the Model facade, costspec/model.py): argument types, bad
paths and texts, and the precision override `load(dtype=)` / `with_precision`."""
from __future__ import annotations

import numpy as np
import pytest

import costspec
from costspec.core.errors import UsageError
from tests.common import ROOT, invoke


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


# -- errors name what the caller wrote: the API's arguments, the CLI's flags -----------------------------
API_ERRORS = [
    (lambda m: m.evaluate(nope=3), "dim nope: the spec has no dim 'nope'"),
    (lambda m: m.evaluate(B=0), "dim B=0: sizes must be positive"),
    (lambda m: m.evaluate(B=2.5), "dim B=2.5: a dim value is an integer"),
    (lambda m: m.evaluate(S=3), "dim S: 'S' is derived from img, patch; set those instead"),
    (lambda m: m.bind(batch=2, sets={"B": 3}), "batch=2 and dim B=3 both bind B; give one"),
    (lambda m: m.bind(batch=0), "batch=0: sizes must be positive"),
    (lambda m: m.bind(batch=2.5), "batch=2.5: a dim value is an integer"),
    (lambda m: m.bind(sets={3: 4}), "dim 3: dim names are strings, got int"),
    (lambda m: m.latex(keep=["nope"]), "keep nope: the spec has no dim 'nope'"),
    (lambda m: m.latex(keep=["S"], expand=True), "keep S with expand: 'S' is derived, and expand writes it out"),
    (lambda m: m.latex(keep=["img"], sets={"img": 384}), "keep img and dim img=384: a dim is either kept"),
    (lambda m: m.latex(pass_="sideways"), "pass"),
]


@pytest.mark.parametrize("call, message", API_ERRORS)
def test_api_errors_name_the_api_arguments_not_cli_flags(call, message):
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    with pytest.raises(UsageError) as info:
        call(model)
    assert message in str(info.value)
    assert "--" not in str(info.value)  # no --set, --batch, --keep, --expand, --pass


@pytest.mark.parametrize("spec, kwargs, message", [
    ("vit_b", {"phase": "decode"}, "phase decode serves a decoder: this spec has no causal attention layer"),
    ("llama_1b", {"phase": "decode", "context": 0}, "context must be a positive number of cached tokens"),
    ("llama_1b", {"backend": "cudnn"}, "backend must be one of flash, math, eager"),
])
def test_api_load_errors_name_the_api_arguments(spec, kwargs, message):
    with pytest.raises(UsageError) as info:
        costspec.load(ROOT / f"specs/{spec}.yaml", **kwargs)
    assert message in str(info.value) and "--" not in str(info.value)


@pytest.mark.parametrize("args, message", [
    (["eval", "vit_b", "--phase", "decode"], "--phase decode serves a decoder"),
    (["eval", "llama_1b", "--backend", "cudnn"], "--backend"),
    (["eval", "vit_b", "--set", "nope=3"], "--set nope: the spec has no dim 'nope'"),
    (["eval", "vit_b", "--set", "S=3"], "--set S: 'S' is derived from img, patch; set those instead"),
    (["eval", "vit_b", "--batch", "2", "--set", "B=3"], "--batch 2 and --set B=3 both bind B; give one"),
    (["sweep", "vit_b", "--vary", "B=1,2", "--set", "nope=3"], "--set nope: the spec has no dim 'nope'"),
    (["sweep", "vit_b", "--vary", "nope=1,2"], "--vary nope: the spec has no dim 'nope'"),
    (["formula", "vit_b", "--keep", "nope"], "--keep nope: the spec has no dim 'nope'"),
    (["formula", "vit_b", "--keep", "S", "--expand"], "--keep S with --expand: 'S' is derived"),
    (["latex", "vit_b", "--keep", "img", "--set", "img=384"], "--keep img and --set img=384: a dim is either"),
])
def test_cli_errors_name_the_flags(args, message):
    out = invoke(*args)
    assert out.returncode == 2 and message in out.stderr, out.stderr
