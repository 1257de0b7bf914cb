"""costspec.ncu.metrics: per-architecture metric lists and the ncu command line."""
from __future__ import annotations

import pytest

from costspec.core.errors import CostspecError
from costspec.ncu.metrics import (
    ARCHS,
    CUDA_CORE_METRICS,
    PACKED_FP32_METRICS,
    RECORDED_SETTINGS,
    UnknownArchError,
    build_command,
    build_export_command,
    metrics_for,
    normalize_cc,
    tensor_counters_by_dtype,
)

T = "sm__ops_path_tensor_"
BASE = [*CUDA_CORE_METRICS, "dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum",
        "sm__inst_executed_pipe_tensor.sum"]


def _tensor(cc: str) -> set[str]:
    return {m for m in metrics_for(cc) if m.startswith(T)}


def test_every_arch_has_the_base_metrics_once():
    assert list(ARCHS) == ["7.0", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1"]
    for cc in ARCHS:
        names = metrics_for(cc)
        assert len(names) == len(set(names))
        assert set(BASE) <= set(names)
        assert all(name.endswith(".sum") for name in names)


HOPPER_WGMMA = {f"{T}op_hgmma_src_fp16_sparsity_off.sum", f"{T}op_hgmma_src_bf16_dst_fp32_sparsity_off.sum",
                f"{T}op_hgmma_src_tf32_dst_fp32_sparsity_off.sum", f"{T}op_igmma_src_int8_sparsity_off.sum",
                f"{T}op_bgmma_src_int1.sum"}
HOPPER_MMA_SYNC = {f"{T}op_hmma_src_fp16_dst_fp16_sparsity_off.sum", f"{T}op_hmma_src_fp16_dst_fp32_sparsity_off.sum",
                   f"{T}op_hmma_src_bf16_dst_fp32_sparsity_off.sum", f"{T}op_hmma_src_tf32_dst_fp32_sparsity_off.sum",
                   f"{T}op_imma_src_int8_sparsity_off.sum", f"{T}op_bmma_src_int1.sum"}
HOPPER_AGGREGATES = {f"{T}src_fp16.sum", f"{T}src_bf16_dst_fp32.sum", f"{T}src_tf32_dst_fp32.sum",
                     f"{T}src_int8.sum", f"{T}src_int1.sum"}


def test_hopper_counters():
    # SpeedOfLight_HierarchicalTensorRooflineChart.section, GH100 block: wgmma and mma.sync families are
    # both collected and counted; the aggregates with no sparsity split are collected as a cross-check
    assert _tensor("9.0") == HOPPER_WGMMA | HOPPER_MMA_SYNC | HOPPER_AGGREGATES | {
        f"{T}src_fp8_sparsity_off.sum", f"{T}src_fp64.sum"}
    counted = {c for counters in tensor_counters_by_dtype("9.0").values() for c in counters}
    assert HOPPER_WGMMA | HOPPER_MMA_SYNC <= counted and not counted & HOPPER_AGGREGATES
    assert {c for cs in ARCHS["9.0"].tensor_aggregate.values() for c in cs} == HOPPER_AGGREGATES
    names = metrics_for("9.0")
    assert "sm__inst_executed_pipe_tensor_op_gmma.sum" in names
    assert "sm__inst_executed_pipe_tensor_op_dmma.sum" in names
    assert not set(PACKED_FP32_METRICS) & set(names)


def test_blackwell_packed_fp32_and_new_archs():
    packed = {"smsp__sass_thread_inst_executed_op_fadd2_pred_on.sum",
              "smsp__sass_thread_inst_executed_op_fmul2_pred_on.sum",
              "smsp__sass_thread_inst_executed_op_ffma2_pred_on.sum"}
    assert set(PACKED_FP32_METRICS) == packed
    for cc in ("10.0", "10.3"):  # NVIDIA's SpeedOfLight_Roofline.py: cc_major == 10 and cc_minor in (0, 3)
        assert packed <= set(metrics_for(cc)), cc
    for cc in ("8.0", "9.0", "11.0", "12.0", "12.1"):
        assert not packed & set(metrics_for(cc)), cc
    # 10.3 (GB11x): the FP8 aggregate is gone; FP6/FP4 via src_fp4_fp6_dst_*, FP8 via tcgen05 op_utcqmma
    assert tensor_counters_by_dtype("10.3")["fp4_fp6"] == [f"{T}src_fp4_fp6_dst_fp16.sum",
                                                           f"{T}src_fp4_fp6_dst_fp32.sum"]
    assert tensor_counters_by_dtype("10.3")["fp8"] == [f"{T}op_utcqmma_src_fp8_dst_fp16_sparsity_off.sum",
                                                       f"{T}op_utcqmma_src_fp8_dst_fp32_sparsity_off.sum"]
    assert not any("fp4_fp6_fp8" in m for m in _tensor("10.3"))
    assert _tensor("11.0") == _tensor("10.0")  # GB10b has the GB100 block
    assert _tensor("12.1") == _tensor("12.0")  # GB20b has the GB20x block
    assert "sm__inst_executed_pipe_tensor_subpipe_dmma.sum" in metrics_for("10.0")
    assert "sm__inst_executed_pipe_tensor_subpipe_dmma.sum" not in metrics_for("10.3")


def test_ampere_counters():
    assert _tensor("8.0") == {
        f"{T}src_fp16_dst_fp16_sparsity_off.sum", f"{T}src_fp16_dst_fp32_sparsity_off.sum",
        f"{T}src_bf16_dst_fp32_sparsity_off.sum", f"{T}src_tf32_dst_fp32_sparsity_off.sum",
        f"{T}src_int8_sparsity_off.sum", f"{T}src_int4_sparsity_off.sum", f"{T}src_int1.sum", f"{T}src_fp64.sum",
    }
    assert "sm__inst_executed_pipe_tensor_op_gmma.sum" not in metrics_for("8.0")


def test_no_counter_of_the_other_arch():
    hopper_only = _tensor("9.0") - _tensor("8.0")
    ampere_only = _tensor("8.0") - _tensor("9.0")
    assert hopper_only == HOPPER_WGMMA | HOPPER_MMA_SYNC | HOPPER_AGGREGATES - {f"{T}src_int1.sum"} | {
        f"{T}src_fp8_sparsity_off.sum"}
    assert ampere_only and all("sparsity_off" in name for name in ampere_only)


def test_dense_only_and_no_aggregate_with_its_split():
    for cc in ARCHS:
        names = _tensor(cc)
        assert not any(name.endswith("_sparsity_on.sum") for name in names), cc
        bases = {name[: -len(".sum")] for name in names}
        assert not any(base.endswith("_sparsity_off") and base[: -len("_sparsity_off")] in bases for base in bases)
        # an aggregate is never counted together with the per-instruction counters it covers
        counted = tensor_counters_by_dtype(cc)
        for dtype, aggregates in ARCHS[cc].tensor_aggregate.items():
            assert not set(aggregates) & set(counted[dtype]), (cc, dtype)


def test_arch_specific_instruction_metrics():
    assert "sm__inst_executed_pipe_tensor_op_hmma_v2.sum" in metrics_for("8.9")
    assert "sm__inst_executed_pipe_tensor_op_hmma.sum" not in metrics_for("8.9")
    assert "sm__inst_executed_pipe_tensor_subpipe_hmma.sum" in metrics_for("10.0")
    assert "sm__inst_executed_pipe_tensor_subpipe_hmma.sum" in metrics_for("12.1")
    assert "sm__inst_executed_pipe_tensor_op_dmma.sum" not in metrics_for("8.6")
    assert _tensor("7.0") == set()
    assert f"{T}src_fp8_sparsity_off.sum" in metrics_for("8.9")


def test_tensor_counters_by_dtype():
    assert tensor_counters_by_dtype("9.0")["fp16"] == [f"{T}op_hgmma_src_fp16_sparsity_off.sum",
                                                       f"{T}op_hmma_src_fp16_dst_fp16_sparsity_off.sum",
                                                       f"{T}op_hmma_src_fp16_dst_fp32_sparsity_off.sum"]
    assert tensor_counters_by_dtype("8.0")["fp16"] == [f"{T}src_fp16_dst_fp16_sparsity_off.sum",
                                                       f"{T}src_fp16_dst_fp32_sparsity_off.sum"]
    assert tensor_counters_by_dtype("10.0")["fp8"] == [f"{T}src_fp4_fp6_fp8_dst_fp16.sum",
                                                       f"{T}src_fp4_fp6_fp8_dst_fp32.sum"]
    assert tensor_counters_by_dtype("7.0") == {}
    for cc in ARCHS:
        listed = [c for counters in tensor_counters_by_dtype(cc).values() for c in counters]
        checks = [c for counters in ARCHS[cc].tensor_aggregate.values() for c in counters]
        assert set(listed) | set(checks) == _tensor(cc)


@pytest.mark.parametrize(("given", "cc"), [("9.0", "9.0"), ("90", "9.0"), ("sm_90", "9.0"), ("sm80", "8.0"),
                                          ("100", "10.0"), ("12.0", "12.0"), ("CC_89", "8.9"),
                                          ("103", "10.3"), ("sm_121", "12.1"), ("11.0", "11.0")])
def test_normalize_cc(given, cc):
    assert normalize_cc(given) == cc


@pytest.mark.parametrize("cc", ["6.1", "9", "11.1", "hopper"])
def test_unknown_cc_names_the_known_ones(cc):
    with pytest.raises(UnknownArchError) as info:
        metrics_for(cc)
    assert isinstance(info.value, CostspecError)
    assert "known: 7.0, 7.5, 8.0, 8.6, 8.7, 8.9, 9.0, 10.0, 10.3, 11.0, 12.0, 12.1" in str(info.value)


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_build_command_flags():
    argv = ["python", "-m", "costspec.ncu.target", "--batch", "8"]
    command = build_command(argv, "9.0", "out/vit.ncu-rep")
    assert command[0] == "ncu"
    assert command[-len(argv):] == argv
    options = command[: -len(argv)]
    assert _flag(options, "--target-processes") == "all"
    assert "--nvtx" in options and _flag(options, "--nvtx-push-pop-scope") == "process"
    assert _flag(options, "--print-units") == "base"
    # ncu 2025.3 on the H100 refuses --print-metric-name with --page raw (whose columns are names)
    assert "--print-metric-name" not in options
    assert "--csv" in options and _flag(options, "--page") == "raw"
    assert _flag(options, "--metrics").split(",") == metrics_for("9.0")
    assert _flag(options, "--clock-control") == "base"
    assert _flag(options, "--cache-control") == "all"
    assert _flag(options, "--replay-mode") == "kernel"
    assert dict(RECORDED_SETTINGS) == {"--clock-control": "base", "--cache-control": "all", "--replay-mode": "kernel"}
    assert _flag(options, "--export") == "out/vit.ncu-rep"
    assert _flag(options, "--log-file") == "out/vit.log"


def test_build_command_without_nvtx_and_with_log_file():
    command = build_command(["python", "x.py"], "8.0", "r", nvtx=False, log_file="r.csv", ncu="/opt/ncu")
    assert command[0] == "/opt/ncu"
    assert "--nvtx" not in command and "--nvtx-push-pop-scope" not in command
    assert _flag(command, "--log-file") == "r.csv"
    with pytest.raises(CostspecError):
        build_command([], "8.0", "r")


def test_build_export_command():
    command = build_export_command("r.ncu-rep", "r.details.csv", page="details")
    assert command[:3] == ["ncu", "--import", "r.ncu-rep"]
    assert _flag(command, "--page") == "details" and _flag(command, "--print-units") == "base"
    assert _flag(command, "--log-file") == "r.details.csv" and "--csv" in command
    with pytest.raises(CostspecError):
        build_export_command("r.ncu-rep", "x.csv", page="source")
