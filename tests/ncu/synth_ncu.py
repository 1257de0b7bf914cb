"""Write small synthetic ncu raw-page CSVs (for tests): one row per kernel, NVTX push/pop stacks."""
from __future__ import annotations

PUSH_POP = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
FADD = "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"
FMUL = "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum"
FFMA = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"
HFMA = "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum"
TC_BF16_H100 = "sm__ops_path_tensor_src_bf16_dst_fp32.sum"


def _q(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def nvtx_cell(stack) -> str:
    if not stack:
        return ""
    return "4242  " + "  ".join(f'"<default domain>:{name}:none:none:none:none:none:none"' for name in stack) + " "


CUDA_CORE = tuple(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum"
                  for op in ("fadd", "fmul", "ffma", "hadd", "hmul", "hfma", "dadd", "dmul", "dfma"))


def _unit(metric: str) -> str:
    """The unit ncu prints for a counter (base units)."""
    if metric.startswith("dram__bytes"):
        return "byte"
    if metric.startswith("gpu__time_duration"):
        return "nsecond"
    return "" if metric.startswith("sm__ops_path_tensor_") else "inst"


def raw_csv(kernels: list[dict], cc: str = "9.0", cuda_columns: bool = True) -> str:
    """kernels: [{"kernel": name, "stack": (range, ...), "metrics": {metric: int}}]. With `cuda_columns`,
    every CUDA-core counter `ncu run` collects is a column (0 where a kernel names none), as in a capture."""
    metrics = sorted({m for k in kernels for m in k["metrics"]} | (set(CUDA_CORE) if cuda_columns else set()))
    head = ["ID", "Process ID", "Process Name", "Host Name", PUSH_POP, "Kernel Name", "Context", "Stream", "CC",
            *metrics]
    lines = [",".join(_q(h) for h in head), ",".join(_q(u) for u in [""] * 9 + [_unit(m) for m in metrics])]
    for i, k in enumerate(kernels):
        cells = [str(i), "4242", "python3", "host", nvtx_cell(k["stack"]), k["kernel"], "1", "7", cc]
        cells += [f"{k['metrics'].get(m, 0):,}" for m in metrics]
        lines.append(",".join(_q(c) for c in cells))
    return "\n".join(lines) + "\n"
