"""Weight quantisation as precision (`precision: {weights, group, compute}`): the weight matrices of GEMMs and
convs read at their stored width plus the groups' scales (exact bytes), GEMMs at the compute dtype, layer
overrides, `--dtype` replacing the compute dtype, and the refusals (unknown formats, a compute dtype the
weights cannot run with, 2:4 together with quantisation, a backward pass through a native fp8 GEMM).
The dequantisation work and training through frozen quantised weights: tests/tree/test_frozen_weights.py."""
from __future__ import annotations

import json
import re

import pytest
import sympy

import costspec
from costspec.analysis.gpus import get_gpu
from costspec.analysis.roofline import estimate
from costspec.core.conventions import Precision
from costspec.core.errors import SpecError

H100 = get_gpu("h100-sxm")
SPEC = """\
costspec: 1
name: q
dims: {B: 1, S: 8, C: 4096, F: 300}
precision: PRECISION
input: [B, S, C]
layers:
  - linear: {out: C, bias: false}
    name: proj
  - linear: {out: F}
    name: head
"""


def rows(text: str, pass_: str = "forward", dtype: str | None = None, **sets: int):
    model = costspec.loads(text, "q.yaml")
    if dtype is not None:
        model = model.with_precision(dtype)
    values = model.bind(sets=sets)
    report = model.report(pass_, values)
    estimate(model, report, values, H100)
    return {r.name: r for r in report.rows}, report


def spec(precision: str) -> str:
    return SPEC.replace("PRECISION", precision)


# activations in and out of a linear layer at bf16: B*S*(in + out) * 2 bytes
def activations(n_in: int, n_out: int) -> int:
    return 8 * (n_in + n_out) * 2


@pytest.mark.parametrize("weights, expected", [
    # 4096 x 4096 values, 32 groups of 128 per row: values + per group (scale, zero point)
    ("int4", 4096 * 4096 // 2 + 4096 * 32 * 5 // 2),   # 1/2 B + (fp16 scale + 4-bit zero) / 128
    ("int8", 4096 * 4096 + 4096 * 32 * 2),             # 1 B + fp16 scale / 128
    ("fp8", 4096 * 4096 + 4096 * 32 * 4),              # 1 B + fp32 scale / 128
    ("nf4", 4096 * 4096 // 2 + 4096 * 32 * 4),         # 1/2 B + fp32 absmax / 128
])
def test_weight_bytes_at_the_stored_width_plus_scales(weights, expected):
    quant, _ = rows(spec(f"{{weights: {weights}, group: 128, compute: bf16}}"))
    dense, _ = rows(spec("{dtype: bf16}"))
    assert quant["proj"].bytes == expected + activations(4096, 4096)
    assert dense["proj"].bytes == 4096 * 4096 * 2 + activations(4096, 4096)
    # the GEMM is the same work at the compute dtype
    assert quant["proj"].tc_flops == dense["proj"].tc_flops == 2 * 8 * 4096 * 4096
    assert quant["proj"].matmul_engine == "TC(bf16)"


def test_groups_round_up_and_biases_stay_at_the_compute_dtype():
    # head: 300 x 4096 int4 with group 96 -> ceil(4096 / 96) = 43 groups per row; its bias (300) stays bf16
    quant, _ = rows(spec("{weights: int4, group: 96}"))
    assert quant["head"].bytes == 300 * 4096 // 2 + 300 * 43 * 5 // 2 + 300 * 2 + activations(4096, 300)
    assert Precision("bf16", None, "int4", 96).quantised_weight_bytes(
        sympy.Integer(300), sympy.Integer(4096)) == 614400 + 32250


def test_a_layer_keeps_its_weights_unquantised_and_group_is_inherited():
    text = spec("{weights: int8, group: 64}").replace(
        "    name: head\n", "    name: head\n    precision: {weights: none}\n").replace(
        "    name: proj\n", "    name: proj\n    precision: {weights: fp8, compute: bf16}\n")
    quant, _ = rows(text)
    assert quant["head"].bytes == 300 * 4096 * 2 + 300 * 2 + activations(4096, 300)
    assert quant["proj"].bytes == 4096 * 4096 + 4096 * 64 * 4 + activations(4096, 4096)  # group 64 inherited


def test_fp8_weights_with_fp8_compute_run_the_fp8_tensor_core_path():
    quant, report = rows(spec("{weights: fp8, group: 128, compute: fp8}"))
    assert quant["proj"].matmul_engine == "TC(fp8)"
    # fp8 activations (1 B) and fp8 weights with their scales
    assert quant["proj"].bytes == 4096 * 4096 + 4096 * 32 * 4 + 8 * 2 * 4096
    assert report.precision == "fp8, fp8 weights (group 128)"


def test_dtype_option_replaces_the_compute_dtype():
    quant, _ = rows(spec("{weights: int4, compute: bf16}"), dtype="fp16")
    assert quant["proj"].matmul_engine == "TC(fp16)"
    assert quant["proj"].bytes == 4096 * 4096 // 2 + 4096 * 32 * 5 // 2 + activations(4096, 4096)


def test_eval_json_and_exit_codes(write_spec, cli):
    path = write_spec(spec("{weights: nf4, group: 64, compute: bf16}"))
    out = cli("eval", path, "--format", "json", "--gpu", "h100-sxm")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    proj = next(r for r in data["rows"] if r["name"] == "proj")
    assert proj["bytes"] == 4096 * 4096 // 2 + 4096 * 64 * 4 + activations(4096, 4096)
    assert proj["cuda_flops"] == 4096 * 4096  # nf4: one multiply by the absmax per weight value
    native = write_spec(spec("{weights: fp8, group: 128, compute: fp8}"))
    train = cli("eval", native, "--pass", "train")
    assert train.returncode == 2 and "Traceback" not in train.stderr
    # proj (frozen, no bias, its input needs no gradient) runs no backward: head (its bias trains) is refused
    assert f"{native}:9:5" in train.stderr and "linear 'head' runs its fp8 weights on the fp8 Tensor-Core" in train.stderr


@pytest.mark.parametrize("precision, message", [
    ("{weights: int3}", "weights: bad value 'int3' (expected one of int8, int4, fp8, nf4, none)"),
    ("{weights: int4, compute: fp8}", "int4 weights do not run with compute fp8"),
    ("{weights: int8, compute: int8, dtype: bf16}", "compute int8 and dtype bf16 disagree"),
    ('{weights: int8, sparsity: "2:4"}', "2:4 sparse quantised weights are not modelled"),
])
def test_bad_precisions_are_spec_errors(precision, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        costspec.loads(spec(precision), "q.yaml")


def test_schema_refuses_a_group_below_one(write_spec, cli):
    out = cli("check", write_spec(spec("{weights: int4, group: 0}")))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "$.precision.group: 0 is too small (expected at least 1)" in out.stdout


def test_backward_through_a_native_fp8_gemm_is_refused():
    model = costspec.loads(spec("{weights: fp8, compute: fp8}"), "q.yaml")
    with pytest.raises(SpecError, match="runs its fp8 weights on the fp8 Tensor-Core path: a backward pass"):
        model.report("train", model.bind())
    assert costspec.loads(spec("{weights: int4}"), "q.yaml").trains is True  # dequantised: QLoRA's base


def test_html_report_of_a_native_fp8_model_shows_forward_forms_only(write_spec, cli, tmp_path):
    out_file = tmp_path / "q.html"
    out = cli("report", write_spec(spec("{weights: fp8, compute: fp8}")), "-o", out_file, "--gpu", "h100-sxm")
    assert out.returncode == 0, out.stderr
    page = out_file.read_text(encoding="utf-8")
    assert "no train forms: the model runs quantised weights on a native int8 / fp8 GEMM" in page
    assert "train FLOPs" not in page
    assert costspec.loads(spec("{weights: fp8, compute: fp8}"), "q.yaml").trains is False
    assert costspec.loads(spec("{weights: fp8, compute: fp8}").replace("- linear: {out: C, bias: false}",
                                                                       "- layernorm: {}")
                          .replace("  - linear: {out: F}\n", "  - linear: {out: F}\n    precision: {weights: none}\n"),
                          "q.yaml").trains is True  # a layernorm's weight is not quantised
