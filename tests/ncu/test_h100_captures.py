"""The first captures on a real GPU (an H100 SXM, ncu 2025.3.1, torch 2.11 + CUDA 13), read offline.

tests/data/ncu/h100/ holds what tools/gpu_truth.py measured (versions.json: the machine and the
costspec commit that ran). Each test pins one answer of docs/ncu.md section 9 to the raw counters,
so a parser or attribution change that moves a measured number shows here.
"""
from __future__ import annotations

import json
from fractions import Fraction

import pytest

from costspec.ncu.parse import parse_csv
from tests.common import ROOT, invoke

H100 = ROOT / "tests" / "data" / "ncu" / "h100"
TIMING = ROOT / "tests" / "data" / "timing" / "h100"
CAPTURES = ["toy_mlp.fp32.forward", "toy_mlp.fp32.train", "vit_b.bf16.b8.L1.train", "vit_b.bf16.b8.L2.train",
            "vit_b.bf16.b8.forward", "vit_b.bf16.b8.train", "llama_1b.bf16.L2.forward", "sparse24.bf16.forward"]
BF16_HGMMA = "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum"
BF16_AGGREGATE = "sm__ops_path_tensor_src_bf16_dst_fp32.sum"


def _summary() -> dict:
    return json.loads((H100 / "summary.json").read_text(encoding="utf-8"))


def _phase(stack) -> str:
    return "backward" if "costspec:backward" in stack else "forward" if (
        "costspec:forward" in stack or "costspec:loss" in stack) else "none"


@pytest.mark.parametrize("name", CAPTURES)
def test_every_capture_parses_with_the_kernels_the_run_recorded(name):
    records = parse_csv(H100 / f"{name}.csv")
    steps = _summary()["steps"]
    data = steps[f"ncu.{name}"]["data"]
    by_phase: dict[str, int] = {}
    for record in records:
        by_phase[_phase(record.nvtx_stack)] = by_phase.get(_phase(record.nvtx_stack), 0) + 1
    assert len(records) == data["kernels"] and by_phase == data["kernels_by_phase"]
    assert "none" not in by_phase  # --profile-from-start off: only the marked step was captured
    sidecar = json.loads((H100 / f"{name}.json").read_text(encoding="utf-8"))
    assert sidecar["gpu"] == "NVIDIA H100 80GB HBM3" and sidecar["compute_capability"] == "9.0"


def test_a_backward_kernel_carries_the_main_and_the_autograd_thread_stacks():
    # "1889 "...costspec:backward..." 1917 "...toy_mlp..." "...layers.9..." "...layers.9.act..."": autograd
    # pushes the layer ranges on its own thread; both stacks are read, outermost first
    records = parse_csv(H100 / "toy_mlp.fp32.train.csv")
    sigmoid = next(r for r in records if "sigmoid" in r.kernel_name and "costspec:backward" in r.nvtx_stack)
    assert sigmoid.nvtx_stack == ("costspec:backward", "toy_mlp", "layers.9", "layers.9.act")


def _compare(spec: str, csv: str, *args: str) -> dict:
    result = invoke("ncu", "compare", spec, str(H100 / csv), "--format", "json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _rows(data: dict, phase: str) -> dict[str, dict]:
    return {row["name"]: row for row in data["tables"][phase]["rows"]}


def test_vit_b_gemms_execute_the_tile_padded_matmuls():
    # cuBLAS (nvjet wgmma) tiles: 8*197 = 1576 rows are computed as 1584 (11 tiles of 144): +0.51% on
    # every linear layer's forward GEMM; the backward's dX/dW GEMMs pad other dims (+1.02%, qkv +6.66%)
    data = _compare("specs/vit_b.yaml", "vit_b.bf16.b8.train.csv", "--batch", "8")
    forward, backward = _rows(data, "forward"), _rows(data, "backward")
    for name in ("blocks.attn.qkv", "blocks.attn.proj", "blocks.mlp.fc1", "blocks.mlp.fc2"):
        assert Fraction(forward[name]["tc_measured"], forward[name]["tc_analytic"]) == Fraction(1584, 1576)
        assert forward[name]["kernels"] == 12 and forward[name]["no_term"] == 0
    assert Fraction(backward["blocks.mlp.fc1"]["tc_measured"], backward["blocks.mlp.fc1"]["tc_analytic"]) \
        == Fraction(1592, 1576)
    assert backward["blocks.attn.qkv"]["tc_measured"] == 142_765_719_552


def test_flash_attention_pads_both_sequence_axes_to_its_tiles():
    # cuDNN's flash fprop (64x128 tiles) computes Q.K^T and P.V over 256 x 256 for S = 197: measured =
    # 4*B*H*256^2*D per layer, (256/197)^2 = 1.6887 x analytic; its backward 2.5 x the forward (costspec's
    # flash backward has the same 2.5)
    data = _compare("specs/vit_b.yaml", "vit_b.bf16.b8.train.csv", "--batch", "8")
    fwd, bwd = _rows(data, "forward")["blocks.attn.sdpa"], _rows(data, "backward")["blocks.attn.sdpa"]
    layers, batch, heads, head_dim = 12, 8, 12, 64
    assert fwd["tc_measured"] == layers * 4 * batch * heads * 256 * 256 * head_dim
    assert Fraction(fwd["tc_measured"], fwd["tc_analytic"]) == Fraction(256 * 256, 197 * 197)
    assert Fraction(bwd["tc_measured"], fwd["tc_measured"]) == Fraction(5, 2)
    assert Fraction(bwd["tc_analytic"], fwd["tc_analytic"]) == Fraction(5, 2)


def test_the_patchify_conv_runs_a_cudnn_kernel_with_eleven_times_the_work():
    # Conv2d(3, 768, 16, stride 16) in bf16: cuDNN transposes NCHW->NHWC (2 kernels, no model term) and runs
    # an Ampere-style mma.sync implicit GEMM whose ops counter reads 20,937,965,568 for 1,849,688,064
    # analytic (3 channels padded for the NHWC align-8 kernel; recorded, not explained further)
    data = _compare("specs/vit_b.yaml", "vit_b.bf16.b8.forward.csv", "--batch", "8")
    proj = _rows(data, "forward")["patch_embed.proj"]
    assert (proj["tc_analytic"], proj["tc_measured"], proj["kernels"], proj["no_term"]) == (
        1_849_688_064, 20_937_965_568, 5, 3)


def test_the_l1_calibration_predicts_the_full_depth_vit_b_within_one_percent():
    # coefficients fitted on one block (L=1) carry over to twelve (each block is the same repeat body)
    data = _compare("specs/vit_b.yaml", "vit_b.bf16.b8.train.csv", "--batch", "8", "--calibration",
                    str(H100 / "calib" / "vit_b.bf16.b8.L1.train.yaml"))
    for phase in ("forward", "backward"):
        total = data["tables"][phase]["total"]
        predicted, residual = total["executed"], total["residual"]
        measured = predicted + residual
        assert abs(residual) / measured < 0.01, (phase, residual, measured)


def test_the_toy_calibration_is_the_fp32_gemms_padding():
    calib = (H100 / "calib" / "toy_mlp.fp32.train.yaml").read_text(encoding="utf-8")
    assert "exact: 1537/262144" in calib and "exact: 121/19456" in calib


def _probe_case(name: str) -> dict:
    return json.loads((H100 / "probe" / "gemm.summary.json").read_text(encoding="utf-8"))["cases"][name]


def test_hopper_bf16_gemms_count_2mnk_of_the_tiles_they_run_in_the_wgmma_counter():
    square = _probe_case("mm_bf16_4096x4096x4096")["counters"]
    assert square[BF16_HGMMA] == 2 * 4096 ** 3 == square[BF16_AGGREGATE]  # wgmma work is in both
    assert square["sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32_sparsity_off.sum"] == 0  # none in mma.sync's
    big = _probe_case("mm_bf16_8192x8192x8192")["counters"]
    assert big[BF16_HGMMA] == 2 * 8320 * 8192 * 8192  # 320-row tiles: 26 x 320 = 8320
    odd = _probe_case("mm_bf16_1576x2304x768")["counters"]
    assert odd[BF16_HGMMA] == 2 * 1584 * 2304 * 768  # 144-wide tiles: 11 x 144 = 1584


def test_a_2_4_sparse_gemm_is_invisible_to_the_op_counters_but_not_to_the_aggregate():
    case = _probe_case("sparse24_bf16_4096x4096x4096")
    counters = case["counters"]
    assert counters[BF16_HGMMA] == 0 and case["costspec_tc"] == 0
    assert counters[BF16_AGGREGATE] == 2 * 4096 ** 3  # the dense-equivalent count
    # a quarter of the dense GEMM's tensor-pipe instructions (half the work, twice the K per instruction)
    dense = _probe_case("mm_bf16_4096x4096x4096")["counters"]
    assert counters["sm__inst_executed_pipe_tensor.sum"] * 4 == dense["sm__inst_executed_pipe_tensor.sum"]


def test_fp8_and_fp32_gemms_land_where_costspec_reads_them():
    fp8 = _probe_case("mm_fp8_4096x4096x4096")
    assert fp8["counters"]["sm__ops_path_tensor_src_fp8_sparsity_off.sum"] == 2 * 4096 ** 3 == fp8["costspec_tc"]
    fp32 = _probe_case("mm_fp32_1024x1024x1024")  # CUDA cores (FFMA), not TF32
    assert fp32["costspec_tc"] == 0
    assert fp32["counters"]["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"] == 1024 ** 3 + 1024 * 1024


def test_flash_softmax_shows_as_fp32_adds_and_multiplies():
    case = _probe_case("sdpa_bf16_8x12x197x64")
    c = case["counters"]
    fadd, fmul = (c[f"smsp__sass_thread_inst_executed_op_{k}_pred_on.sum"] for k in ("fadd", "fmul"))
    assert (fadd, fmul, case["cuda"]) == (12_976_128, 11_240_448, 24_609_792)
    padded_scores = 8 * 12 * 256 * 256
    assert 1.5 < fadd / padded_scores < 2.5 and 1.5 < fmul / padded_scores < 2.5


def test_the_sparse_spec_runs_dense_kernels_in_the_generated_module():
    data = _compare(str(H100 / "sparse24.yaml"), "sparse24.bf16.forward.csv")
    total = data["tables"]["forward"]["total"]
    assert total["tc_measured"] == 2 * total["tc_analytic"]


def test_timings_record_the_machine_and_the_roofline():
    files = sorted(TIMING.glob("*.json"))
    assert len(files) == 17
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        assert data["device"] == "cuda" and data["gpu"] == "NVIDIA H100 SXM5 80GB" and data["dtype"] == "bf16"
        assert data["step_s"] > data["estimate_total_s"] > 0  # never faster than the roofline at peak


def test_efficiency_fit_reproduces_from_the_committed_timings():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(ROOT / "tools" / "fit_efficiency.py"), "--min-batch", "256",
                          "--format", "json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    fit = json.loads(out.stdout)
    assert fit["efficiency"] == {"tc": 0.4, "cuda": 1.0, "memory": 1.0}
    errors = {row["file"]: round(row["error"], 3) for row in fit["rows"] if row["role"] != "outside"}
    assert errors == {"vit_b.bf16.b256.forward.json": 0.11, "vit_b.bf16.b256.train.json": -0.067,
                      "vit_l.bf16.b256.forward.json": 0.304, "vit_l.bf16.b256.train.json": 0.176}


def test_causal_flash_skips_the_tiles_above_the_diagonal():
    # llama_1b prefill, S = 2048: cuDNN's causal flash runs (n+1)/(2n) of the full product, n = 2048/128
    data = _compare("specs/llama_1b.yaml", "llama_1b.bf16.L2.forward.csv", "--set", "L=2")
    sdpa = _rows(data, "forward")["layers.attn.sdpa"]
    n = 2048 // 128
    assert Fraction(sdpa["tc_measured"], sdpa["tc_analytic"]) == Fraction(n + 1, 2 * n)
    for name in ("attn.q", "attn.k", "attn.v", "attn.proj", "mlp.gate", "mlp.up", "mlp.down"):
        row = _rows(data, "forward")[f"layers.{name}"]
        assert row["tc_measured"] == row["tc_analytic"]  # 2048-row GEMMs fill their tiles
