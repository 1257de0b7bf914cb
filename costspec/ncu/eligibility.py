"""DLProf's "eligible for Tensor Cores but not using them", read from ncu counters: the analytic
eligibility of every GEMM (`costspec.analysis.alignment`) beside what the kernels measured."""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from costspec.analysis.alignment import check
from costspec.tree.nodes import OpNode
from costspec.tree.walk import slot_of

if TYPE_CHECKING:
    from costspec.ncu.attribute import Attribution
    from costspec.tree.network import Network


def tensor_core_misses(attribution: "Attribution", model: "Network", values: Mapping | None = None) -> list[str]:
    """DLProf's "eligible for Tensor Cores but not using them", from ncu counters: every layer slot whose
    analytic matmul work is Tensor-Core eligible (a Tensor-Core precision) and whose attributed matmul
    kernels measured no ``sm__ops_path_tensor`` FLOPs, per phase, with the alignment flag that may
    explain it. Lines for `ncu compare`'s notes; one line saying why when the CSV has no tensor counters."""
    title = "eligible for Tensor Cores but ran without them (DLProf-style)"
    if not attribution.has_tensor_counters:
        return [f"{title}: unknown, the CSV has no sm__ops_path_tensor counters"]
    eligible: dict[str, str] = {}
    for node in model.op_nodes():
        if not isinstance(node, OpNode) or not node.precision.tensor_cores:
            continue
        for leaf in node.children or [node]:
            if leaf.forward().matmul:
                eligible.setdefault(slot_of(leaf), node.precision.dtype)
    reasons = {f.layer: f.text() for f in check(model, values)} if values is not None else {}
    lines = []
    for phase in attribution.phases:
        kernels: dict[str, list] = {}
        for k in attribution.of(phase):
            if k.slot in eligible and k.role == "matmul":
                kernels.setdefault(k.slot, []).append(k)
        for slot, ks in kernels.items():
            if sum(k.tensor for k in ks) == 0:
                names = ", ".join(sorted({k.short for k in ks}))
                why = reasons.get(slot)
                lines.append(f"  {phase}: {slot} ({eligible[slot]}): {len(ks)} matmul kernel(s) ({names}), "
                             f"{sum(k.cuda for k in ks):,} CUDA-core FLOPs, 0 Tensor-Core FLOPs"
                             + (f" -- {why}" if why else ""))
    return [f"{title}:" if lines else f"{title}: none"] + lines
