"""The measured side: each profiled kernel -> its phase, its layer slot, its role and its FLOPs.

* **FLOPs** (`kernels.flops_from_metrics`): Tensor-Core FLOPs = the ``sm__ops_path_tensor_*``
  counters as they are (1 op = 1 FLOP). CUDA-core FLOPs = 2*FMA + ADD + MUL per precision, FP16
  counted as packed half2 (2*hadd + 2*hmul + 4*hfma, ncu's half-precision roofline), summed over
  FP32, FP64 and FP16. A figure one of whose counters is n/a in the kernel (or, for the CUDA-core
  figure, absent from it) is unknown: the kernel lists those counters (`Kernel.tensor_unknown`,
  `Kernel.cuda_unknown`) and `compare` shows n/a, `calibrate` refuses to fit.
* **Layer**: the innermost range of the kernel's NVTX push/pop stack that is a layer of the spec
  (a torch module path such as ``layers.3.fc``), mapped to its slot (``layers.fc``). A kernel inside
  the model's root range but in no layer goes to ``(model)``; a kernel in no layer and not in
  the root range is *unattributed* (the loss, optimizer, anything outside the model). Nothing is
  dropped.
* **Phase**: ``costspec ncu run`` brackets the forward, the loss and the backward in the ranges
  ``costspec:forward`` / ``costspec:loss`` (counted with the forward, unattributed) /
  ``costspec:backward``. A CSV without them is taken to hold one phase, the one ``--pass
  forward|backward`` names; ``--pass train`` needs the ranges.
* **Role** (from the kernel class, `kernels.classify`): ``matmul`` (GEMM, conv, attention kernels),
  ``splitk`` (cuBLAS split-K reduce), ``pointwise`` (elementwise, reductions, norms, softmax), or
  ``no_term`` (kernels the model has no term for: RNG, data copies/casts, unknown kernels).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from costspec.analysis.slots import MODEL_SLOT, RangeResolver
from costspec.core.errors import CostspecError
from costspec.core.vocab import Pass
from costspec.ncu.kernels import base_name, classify, flops_from_metrics
from costspec.ncu.metrics import (
    CUDA_CORE_METRICS,
    TENSOR_OPS_PREFIX,
    TENSOR_PIPE_INST,
    UnknownArchError,
    arch,
    normalize_cc,
)
from costspec.ncu.parse import KernelRecord
from costspec.ops import OPS

if TYPE_CHECKING:
    from costspec.tree.network import Network

PHASE_RANGES = {"costspec:forward": "forward", "costspec:backward": "backward"}
LOSS_RANGE = "costspec:loss"
# kernel class -> the matmul class of the work it runs, as the ops state it (`OpDef.runtime.kernels`)
MATMUL_KERNEL_CLASSES = {kclass: mclass for op in OPS.values() for mclass, kclass in op.runtime.kernels.items()}
_COPY = re.compile(r"copy|memcpy|memset|CatArray|fill", re.IGNORECASE)
_WRAPPERS = ("cutlass::Kernel", "cutlass::Kernel2", "cutlass::device_kernel", "Kernel", "Kernel2", "device_kernel")
CONVENTIONS = ("Tensor-Core FLOPs = sum of the sm__ops_path_tensor_*.sum counters as ncu reports them "
               "(1 op = 1 FLOP, a multiply-add = 2); CUDA-core FLOPs = 2*FMA + ADD + MUL thread instructions "
               "per precision (fp32 fadd/fmul/ffma, fp64 dadd/dmul/dfma; fp16 packed half2 = 2 lanes: "
               "2*hadd + 2*hmul + 4*hfma, ncu's half-precision roofline); transcendentals (MUFU), conversions "
               "and integer ops are not counted by these counters.")


class AttributionError(CostspecError):
    """The kernels of a CSV cannot be attributed as asked (e.g. --pass train without phase ranges)."""


@dataclass
class Kernel:
    """One profiled kernel launch, attributed."""

    id: int
    name: str  # full (demangled) kernel name
    short: str  # a readable family name: ampere_sgemm_64x32_sliced1x4_nn, splitKreduce_kernel, ...
    kclass: str  # kernels.classify()
    role: str  # matmul | splitk | pointwise | no_term
    phase: str
    layer: str | None  # innermost layer range (torch module path), None outside every layer
    slot: str | None  # its slot, MODEL_SLOT inside the model but no layer, None = unattributed
    tensor: int
    cuda: int
    cuda_share: dict[str, int]  # precision (fp32, fp16, fp64) -> CUDA-core FLOPs
    line: int
    stack: tuple[str, ...] = ()
    source: str = ""
    tensor_unknown: tuple[str, ...] = ()  # counters of the Tensor-Core figure that were n/a: it is unknown
    cuda_unknown: tuple[str, ...] = ()  # CUDA-core counters n/a or absent in this kernel: its figure is unknown

    @property
    def flops(self) -> int:
        return self.tensor + self.cuda

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


@dataclass
class Attribution:
    """Every kernel of one or more CSVs, attributed to a phase and a slot."""

    kernels: list[Kernel]
    phases: tuple[str, ...]
    sources: list[str]
    has_tensor_counters: bool
    cc: str | None
    notes: list[str] = field(default_factory=list)
    device: str | None = None  # the device name the CSV's own columns give, where they give one

    def of(self, phase: str) -> list[Kernel]:
        return [k for k in self.kernels if k.phase == phase]

    def measured_total(self, phase: str) -> int:
        return sum(k.flops for k in self.of(phase))


def short_name(kernel_name: str) -> str:
    """A readable kernel family: no return type, namespaces, template arguments or parameters;
    for CUTLASS wrappers (``cutlass::Kernel<cutlass_80_simt_sgemm_...>``) the wrapped kernel."""
    base = base_name(kernel_name)
    if base in _WRAPPERS or base.endswith("::Kernel") or base.endswith("::Kernel2"):
        inner = re.search(r"<\s*([A-Za-z_][A-Za-z0-9_:]*)", kernel_name)
        if inner:
            base = inner.group(1)
    return base.rsplit("::", 1)[-1]


def role_of(kclass: str, name: str) -> str:
    """matmul | splitk | pointwise | no_term (see the module docstring)."""
    if kclass == "splitk_reduce":
        return "splitk"
    if kclass in MATMUL_KERNEL_CLASSES:
        return "matmul"
    if kclass == "other" or _COPY.search(short_name(name)) or _COPY.search(name.split("(")[0]):
        return "no_term"
    return "pointwise"


def _marked_phase(stack: Sequence[str], record: KernelRecord) -> str | None:
    marked = [PHASE_RANGES[n] for n in (*stack, *record.nvtx_start_end) if n in PHASE_RANGES]
    if marked:
        return marked[-1]
    return "forward" if LOSS_RANGE in stack else None  # the loss: after the forward, before the backward


def _phases(records: Sequence[KernelRecord], default: str | None, source: str) -> list[str]:
    """The phase of every record: its costspec phase range; in a CSV with phase ranges, a kernel in
    none of them belongs to the phase of the kernel launched before it; without any, `default`."""
    marked = [_marked_phase(r.nvtx_stack, r) for r in records]
    if not any(marked):
        if default is None and records:
            r = records[0]
            raise AttributionError(
                f"{source}:{r.line}: kernel ID {r.id} is in no costspec:forward / costspec:backward "
                "range (no kernel of this CSV is), so forward and backward kernels cannot be told apart; pass "
                "--pass forward or --pass backward for a CSV that holds one phase (or profile with "
                "`costspec ncu run`)")
        return [default or "forward"] * len(records)
    out, last = [], next(m for m in marked if m)
    for m in marked:
        last = m or last
        out.append(last)
    return out


def _cc(records: Sequence[KernelRecord]) -> str | None:
    for record in records:
        if record.cc:
            try:
                return normalize_cc(record.cc)
            except UnknownArchError:
                return None
    return None


def attribute(sources: Sequence[tuple[str, Sequence[KernelRecord], str]], model: "Network") -> Attribution:
    """Attribute the kernels of one or more parsed CSVs. `sources`: (file name, records, pass) with
    pass forward | backward | train (the phase of unmarked kernels: forward/backward; train needs
    the costspec phase ranges)."""
    resolver = RangeResolver(model)
    kernels: list[Kernel] = []
    phases: list[str] = []
    has_tensor = False
    notes: list[str] = []
    unseen: list[str] = []  # kernels that ran tensor-pipe instructions no collected ops counter saw
    all_records = [r for _, records, _ in sources for r in records]
    cc = _cc(all_records)
    for source, records, pass_ in sources:
        pass_ = Pass.parse(pass_, "--pass")
        default = None if pass_ == "train" else pass_
        for record, phase in zip(records, _phases(records, default, source)):
            stack = record.nvtx_stack
            if phase not in pass_.phases:
                continue  # e.g. a train CSV compared with --pass forward: backward kernels left out
            layer, slot = resolver.innermost(stack)
            if slot is None and model.name in stack and LOSS_RANGE not in stack:
                slot = MODEL_SLOT
            has_tensor = has_tensor or any(m.startswith(TENSOR_OPS_PREFIX) for m in record.metrics) or (
                cc == "7.0" and TENSOR_PIPE_INST in record.metrics)
            flops = flops_from_metrics(record.metrics, cc=cc, not_collected=record.missing)
            if cc != "7.0" and record.metrics.get(TENSOR_PIPE_INST, 0) > 0 and flops["tensor"] == 0:
                unseen.append(short_name(record.kernel_name))
            cuda_absent = tuple(m for m in (*CUDA_CORE_METRICS, *(arch(cc).packed_fp32 if cc else ()))
                                if m not in record.metrics and m not in record.missing)
            kclass = classify(record.kernel_name)
            share = {"fp32": round(flops["cuda_fp32"]), "fp16": round(flops["cuda_fp16"]),
                     "fp64": round(flops["cuda_fp64"])}
            kernels.append(Kernel(
                id=record.id, name=record.kernel_name, short=short_name(record.kernel_name), kclass=kclass,
                role=role_of(kclass, record.kernel_name), phase=phase, layer=layer, slot=slot,
                tensor=round(flops["tensor"]), cuda=sum(share.values()), cuda_share=share, line=record.line,
                stack=tuple(stack), source=source, tensor_unknown=flops["tensor_not_collected"],
                cuda_unknown=flops["cuda_not_collected"] + cuda_absent))
        for phase in pass_.phases:
            if phase in phases:
                raise AttributionError(f"{source}: the {phase} phase is given twice (by two CSVs)")
            phases.append(phase)
    if not has_tensor:
        notes.append("no sm__ops_path_tensor_* counter in the CSV: measured Tensor-Core FLOPs are shown as n/a")
    if unseen:
        notes.append(
            f"{len(unseen)} kernel(s) ran Tensor-Core instructions ({TENSOR_PIPE_INST} > 0) that no collected "
            f"ops counter costspec adds up counts (e.g. {unseen[0]}): their Tensor-Core FLOPs are missing from "
            "'measured'. On an H100 a 2:4-sparse cuSPARSELt GEMM reads 0 in every op_*_sparsity_off counter "
            "while the aggregate sm__ops_path_tensor_src_* counter holds its dense-equivalent 2*M*N*K")
    order = [p for p in ("forward", "backward") if p in phases]
    device = next((r.device_name for r in all_records if r.device_name), None)
    return Attribution(kernels, tuple(order), [s for s, _, _ in sources], has_tensor, cc, notes, device)
