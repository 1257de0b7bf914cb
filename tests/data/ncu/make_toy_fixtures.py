"""Rebuild toy_forward.details.csv and toy_backward.details.csv (reconstructed, not raw captures).

The per-launch counts are derived in README.md from the totals in
``shared/reference/ncu-vs-analytic-toy-network.md``. Run from the repository root:

    python tests/data/ncu/make_toy_fixtures.py
"""
from __future__ import annotations

import csv
from pathlib import Path

HERE = Path(__file__).resolve().parent
OPS = ("dadd", "dfma", "dmul", "fadd", "ffma", "fmul", "hadd", "hfma", "hmul")  # ncu sorts metrics by name
PUSH_POP = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
START_END = "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
HEADER = ["ID", "Process ID", "Process Name", "Host Name", PUSH_POP, START_END, "Kernel Name", "Context",
          "Stream", "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit",
          "Metric Value", "Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type",
          "Estimated Speedup"]
PID = "4242"

SGEMM_FWD = "ampere_sgemm_64x32_sliced1x4_nn"
SPLITK = ("void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>"
          "(cublasSplitKParams<float>, const float *, const float *, float *, const float *, const float *)")
ACT_FWD = ("void at::native::vectorized_elementwise_kernel<4, at::native::toy_act_functor<float>, "
           "at::detail::Array<char *, 2>>(int, T2, T3)")
ACT_BWD_VEC = ("void at::native::vectorized_elementwise_kernel<4, at::native::toy_act_backward_functor<float>, "
               "at::detail::Array<char *, 3>>(int, T2, T3)")
ACT_BWD = "void at::native::elementwise_kernel<128, 2, at::native::toy_act_backward_functor<float>>(int, T3)"
DGRAD = "void cutlass::Kernel<cutlass_80_simt_sgemm_64x64_8x5_nt_align1>(T1::Params)"
WGRAD = "ampere_sgemm_32x128_tn"
LOSS_SUM = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
            "at::native::sum_functor<float, float, float>::operator ()(at::TensorIterator &)::[lambda(float, float) "
            "(instance 1)]>, unsigned int, float, 4>>(T3)")

N_LAYERS = 10
# Forward activation: layer 9 has the per-launch values printed at the end of the notes' forward
# listing (fadd 262,144). Layers 0-8 share the deficits that the grouped sums imply
# (fadd 2,621,070 = 10*262,144 - 370; ffma 9,174,358 = 10*917,504 - 682).
ACT_FADD_DEFICIT = [41] * 8 + [42] + [0]  # sums to 370
ACT_FFMA_DEFICIT = [76] * 7 + [75] * 2 + [0]  # sums to 682


def nvtx(*names: str) -> str:
    entries = "  ".join(f'"<default domain>:{n}:none:none:none:none:none:none"' for n in names)
    return f"{PID}  {entries} "


def launch(kernel: str, stack: tuple[str, ...], block: str, grid: str, counts: dict[str, int]) -> dict:
    return {"kernel": kernel, "stack": stack, "block": block, "grid": grid, "counts": counts}


def forward() -> list[dict]:
    launches = []
    for i in range(N_LAYERS):
        fc, act = ("toy", f"layers.{i}.fc"), ("toy", f"layers.{i}.act")
        launches.append(launch(SGEMM_FWD, fc, "(128, 1, 1)", "(32, 2, 3)",
                               {"fadd": 786_432, "ffma": 134_217_728, "fmul": 1_048_576}))
        launches.append(launch(SPLITK, fc, "(32, 16, 1)", "(32, 8, 1)", {"fadd": 262_144, "fmul": 131_072}))
        launches.append(launch(ACT_FWD, act, "(128, 1, 1)", "(256, 1, 1)",
                               {"fadd": 262_144 - ACT_FADD_DEFICIT[i], "ffma": 917_504 - ACT_FFMA_DEFICIT[i]}))
    return launches


def backward() -> list[dict]:
    launches = [launch(LOSS_SUM, ("toy", "loss"), "(32, 16, 1)", "(32, 1, 1)", {"fadd": 207_344})]
    for i in reversed(range(N_LAYERS)):
        fc, act = ("toy", f"layers.{i}.fc"), ("toy", f"layers.{i}.act")
        # The gradient of out.sum() is an expanded (non-contiguous) tensor: no vectorized kernel.
        kernel, grid = (ACT_BWD, "(512, 1, 1)") if i == N_LAYERS - 1 else (ACT_BWD_VEC, "(256, 1, 1)")
        launches.append(launch(kernel, act, "(128, 1, 1)", grid, {"fadd": 131_072, "fmul": 262_144}))
        if i > 0:  # layer 0's input needs no gradient: no dgrad GEMM, no split-K reduce
            launches.append(launch(DGRAD, fc, "(128, 1, 1)", "(16, 2, 9)", {"ffma": 134_217_728, "fmul": 1_048_576}))
            launches.append(launch(SPLITK, fc, "(32, 16, 1)", "(32, 8, 1)", {"fadd": 1_048_576, "fmul": 131_072}))
        launches.append(launch(WGRAD, fc, "(256, 1, 1)", "(8, 32, 1)", {"ffma": 134_217_728, "fmul": 1_048_576}))
    return launches


def write(path: Path, launches: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, quoting=csv.QUOTE_ALL, lineterminator="\n")
        writer.writerow(HEADER)
        for launch_id, item in enumerate(launches):
            for op in OPS:
                value = item["counts"].get(op, 0)
                writer.writerow([
                    launch_id, PID, "python3", "127.0.0.1", nvtx(*item["stack"]), "", item["kernel"], "1", "7",
                    item["block"], item["grid"], "0", "8.0", "Command line profiler metrics",
                    f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum", "inst", f"{value:,}",
                    "", "", "", "", "",
                ])


if __name__ == "__main__":
    write(HERE / "toy_forward.details.csv", forward())
    write(HERE / "toy_backward.details.csv", backward())
