"""`costspec ncu calibrate`: fit epsilon, rho and kappa from attributed kernels, per phase.

How each kernel enters the fit (per phase; a kernel's *slot* is its innermost layer, see
`costspec.ncu.attribute`):

* **matmul kernels** (GEMM, conv, attention) go to a matmul class of their slot: the slot's only
  class, or the class matching the kernel (gemm, conv, attention -> sdpa) when the slot has
  several. ``epsilon[c] = measured FLOPs of c's kernels / analytic matmul FLOPs of c - 1``, over
  all slots. Epilogue work (alpha/beta, the bias add, activation epilogues) runs inside these
  kernels on CUDA cores; it is part of the measured numerator, so epsilon holds it.
* **split-K reduce kernels**: ``rho = their FLOPs / GEMM+conv output elements`` of the phase
  (`costspec.analysis.slots`: forward = the op's output; backward = weight parameters + input elements
  when dX is computed).
* **pointwise kernels** (elementwise, reductions, norms, softmax) of a slot are the executed work
  of the slot's cost-table kinds. With one kind, ``kappa[k] = measured / analytic - 1``; with several
  kinds in one slot, the slot's measured FLOPs are shared among them in proportion to their
  analytic FLOPs (an approximation, stated in the file). A slot with kinds but *no* pointwise
  kernel of its own ran them inside its matmul kernels (the bias add in a cuBLASLt epilogue,
  softmax inside a flash-attention kernel): those kinds are **fused** -- absorbed into epsilon,
  no kappa, nothing added on top. A slot with kinds and no kernel at all gets measured 0.
* **bias_add / bias_grad** follow these rules like any kind: the forward bias add runs in the
  GEMM epilogue (fused into epsilon[gemm], and into rho when split-K reduces apply it); a bias
  gradient that runs as its own reduction kernel gets kappa[bias_grad], otherwise it is fused.
* **kernels with no model term** inside layers (RNG, copies/casts, a matmul kernel in a layer
  without matmul work, a pointwise kernel in a layer without pointwise work) and **unattributed**
  kernels (outside every layer: the loss) are not fitted; they are listed, and the reconstruction
  adds them as measured so that it accounts for every kernel.

A fit needs a complete capture (`check_capture`): every kernel's FLOP counters collected (none n/a,
none of the CUDA-core counters absent), Tensor-Core counters when the phase has Tensor-Core work, and
at least one kernel for every matmul class with analytic work; otherwise `calibrate` refuses (exit
2) and names the counters or the class. The file it writes is read back by the calibration reader
first (`calibration_text`): a fit that reader would refuse is never written.

The reconstruction = the executed prediction of `costspec.analysis.calibration` at the profiled dims +
no-term + unattributed FLOPs. It equals the measured total exactly whenever no kind is both fused
and separate and no slot shares kappa among kinds.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Mapping, Sequence

from costspec.analysis.calibration import (
    FORMAT_KEY,
    FORMAT_VERSION,
    Calibration,
    CalibrationError,
    Executed,
    PhaseCoefficients,
    dump_calibration,
    exact,
    executed_slot,
    loads_calibration,
)
from costspec.analysis.slots import SlotTerms, analytic_slots
from costspec.core.errors import UsageError
from costspec.ncu.attribute import CONVENTIONS, MATMUL_KERNEL_CLASSES, Kernel
from costspec.ncu.inputs import Measured


@dataclass
class Bucket:
    """Measured and analytic FLOPs of one fitted term, with the kernels and slots behind it."""

    measured: Fraction = Fraction(0)
    analytic: Fraction = Fraction(0)
    tensor: int = 0
    cuda: int = 0
    kernels: Counter = field(default_factory=Counter)
    slots: set = field(default_factory=set)


@dataclass
class PhaseBuckets:
    """Every kernel of one phase, sorted into the terms of the fit."""

    phase: str
    slots: dict[str, SlotTerms]
    matmul: dict[str, Bucket]
    splitk: Bucket
    kinds: dict[str, Bucket]
    fused: dict[str, Bucket]
    no_term: list[tuple[Kernel, str]]
    outside: list[Kernel]
    measured_total: int
    shared_slots: list[str]  # slots whose measured pointwise FLOPs were shared among several kinds

    @property
    def analytic_total(self) -> int:
        return sum(t.total for t in self.slots.values())


def _matmul_class(kernel: Kernel, classes: Sequence[str], terms: SlotTerms) -> str:
    if len(classes) == 1:
        return classes[0]
    wanted = MATMUL_KERNEL_CLASSES.get(kernel.kclass)
    return wanted if wanted is not None and wanted in classes else max(classes, key=lambda c: terms.matmul[c])


def bucket_phase(measured: Measured, phase: str) -> PhaseBuckets:
    """Sort the kernels of `phase` into the fit's terms (module docstring)."""
    slots = analytic_slots(measured.model, measured.values, phase)
    kernels = measured.attribution.of(phase)
    matmul: dict[str, Bucket] = defaultdict(Bucket)
    for terms in slots.values():
        for cls, flops in terms.matmul.items():
            matmul[cls].analytic += flops
    splitk = Bucket(analytic=Fraction(sum(t.gemm_outputs for t in slots.values())))
    kinds: dict[str, Bucket] = defaultdict(Bucket)
    fused: dict[str, Bucket] = defaultdict(Bucket)
    no_term: list[tuple[Kernel, str]] = []
    outside: list[Kernel] = []
    by_slot: dict[str, list[Kernel]] = defaultdict(list)
    for k in kernels:
        if k.slot is None:
            outside.append(k)
        elif k.role == "splitk":
            splitk.measured += k.flops
            splitk.kernels[k.short] += 1
            splitk.slots.add(k.slot)
        elif k.role == "no_term":
            no_term.append((k, "no model term (RNG, copy/cast or unknown kernel)"))
        elif k.slot not in slots:
            no_term.append((k, f"in '{k.slot}', which has no analytic work of its own"))
        else:
            by_slot[k.slot].append(k)
    shared: list[str] = []
    for name, terms in slots.items():
        classes = [c for c, v in terms.matmul.items() if v]
        pointwise = [k for k in by_slot.get(name, []) if k.role == "pointwise"]
        for k in by_slot.get(name, []):
            if k.role != "matmul":
                continue
            if not classes:
                no_term.append((k, f"matmul kernel in '{name}', which has no matmul work"))
                continue
            b = matmul[_matmul_class(k, classes, terms)]
            b.measured += k.flops
            b.tensor += k.tensor
            b.cuda += k.cuda
            b.kernels[k.short] += 1
            b.slots.add(name)
        kind_flops = {kind: f for kind, f in terms.pointwise_flops.items() if f}
        if not kind_flops:
            no_term.extend((k, f"pointwise kernel in '{name}', which has no pointwise work") for k in pointwise)
            continue
        if not pointwise and classes:
            for kind, priced in kind_flops.items():
                fused[kind].analytic += priced
                fused[kind].slots.add(name)
            continue
        slot_measured = Fraction(sum(k.flops for k in pointwise))
        slot_analytic = sum(kind_flops.values(), Fraction(0))
        if len(kind_flops) > 1:
            shared.append(name)
        for kind, priced in kind_flops.items():
            b = kinds[kind]
            b.measured += slot_measured * priced / slot_analytic
            b.analytic += priced
            b.slots.add(name)
            for k in pointwise:
                b.kernels[k.short] += 1
    return PhaseBuckets(phase, slots, dict(matmul), splitk, dict(kinds), dict(fused), no_term, outside,
                        measured.attribution.measured_total(phase), shared)


def coefficients(b: PhaseBuckets) -> PhaseCoefficients:
    """The exact fitted coefficients of one phase."""
    eps = {c: m.measured / m.analytic - 1 for c, m in b.matmul.items() if m.analytic}
    share = {c: (Fraction(m.cuda, m.tensor + m.cuda) if m.tensor + m.cuda else Fraction(0))
             for c, m in b.matmul.items() if m.analytic}
    rho = b.splitk.measured / b.splitk.analytic if b.splitk.analytic else None
    kappa = {k: m.measured / m.analytic - 1 for k, m in b.kinds.items() if m.analytic}
    fused = frozenset(k for k in b.fused if k not in kappa)
    return PhaseCoefficients(eps, share, rho, kappa, fused)


def reconstruct(b: PhaseBuckets, coeffs: PhaseCoefficients) -> Fraction:
    """Executed prediction over the phase's slots + no-term + unattributed measured FLOPs."""
    done = Executed()
    for terms in b.slots.values():
        done += executed_slot(terms, coeffs)
    return done.total + sum(k.flops for k, _ in b.no_term) + sum(k.flops for k in b.outside)


# ----------------------------------------------------------------------------------------------
# The calibration file
# ----------------------------------------------------------------------------------------------
def _num(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def _coef(value: Fraction) -> dict:
    return {"value": float(value), "exact": exact(value)}


def _kernel_counts(counter: Counter) -> dict[str, int]:
    return dict(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def _phase_dict(b: PhaseBuckets, c: PhaseCoefficients, table: Mapping) -> dict:
    eps = {}
    for cls, m in sorted(b.matmul.items()):
        if not m.analytic:
            continue
        eps[cls] = {**_coef(c.epsilon[cls]), "measured_flops": _num(m.measured), "analytic_flops": _num(m.analytic),
                    "measured_tc_flops": m.tensor, "measured_cuda_flops": m.cuda,
                    "cuda_share": exact(c.cuda_share[cls]), "kernels": _kernel_counts(m.kernels),
                    "slots": sorted(m.slots)}
    rho = None
    if c.rho is not None:
        rho = {**_coef(c.rho), "measured_flops": _num(b.splitk.measured),
               "gemm_output_elements": _num(b.splitk.analytic), "kernels": _kernel_counts(b.splitk.kernels),
               "slots": sorted(b.splitk.slots)}
    kappa = {}
    for kind, m in sorted(b.kinds.items()):
        if not m.analytic:
            continue
        kappa[kind] = {**_coef(c.kappa[kind]), "measured_flops": _num(m.measured),
                       "analytic_flops": _num(m.analytic), "flops_per_element": _num(Fraction(str(table[kind]))),
                       "kernels": _kernel_counts(m.kernels), "slots": sorted(m.slots)}
    fused = {kind: {"analytic_flops": _num(m.analytic), "slots": sorted(m.slots),
                    "note": "no kernel of its own in these slots: its work ran inside their matmul kernels "
                            "(epilogue) or split-K reduces, so epsilon and rho hold it; nothing is added on top"}
             for kind, m in sorted(b.fused.items()) if kind in c.fused}
    no_term: Counter[str] = Counter()
    for k, _ in b.no_term:
        no_term[k.short] += k.flops
    outside: Counter[str] = Counter()
    for k in b.outside:
        outside[f"{k.short} [{' / '.join(k.stack) or 'no NVTX range'}]"] += k.flops
    recon = reconstruct(b, c)
    out: dict[str, object] = {
        "epsilon": eps,
        "rho": rho,
        "kappa": kappa,
        "fused": fused,
        "no_term_flops": sum(k.flops for k, _ in b.no_term),
        "no_term_kernels": dict(no_term),
        "outside_flops": sum(k.flops for k in b.outside),
        "outside_kernels": dict(outside),
        "measured_total": b.measured_total,
        "analytic_total": b.analytic_total,
        "reconstructed_total": _num(recon),
        "reconstruction_exact": recon == b.measured_total,
    }
    if b.shared_slots:
        out["kappa_shared_in"] = sorted(b.shared_slots)
    return out


@dataclass
class CalibrationResult:
    """What `calibrate()` returns: the file's content, the buckets and coefficients per phase."""

    data: dict
    buckets: dict[str, PhaseBuckets]
    coefficients: dict[str, PhaseCoefficients]

    def calibration(self, source: str = "") -> Calibration:
        return Calibration(self.data["spec"], self.data["dims"], self.data["precision"], self.coefficients, source,
                           self.data)


class IncompleteCapture(UsageError):
    """A capture that lacks counters (or kernels) a fit needs: `calibrate` refuses it."""


def check_capture(measured: Measured, buckets: Mapping[str, PhaseBuckets]) -> None:
    """IncompleteCapture naming what a fit of these phases lacks (module docstring)."""
    from costspec.ncu.metrics import tensor_counters_by_dtype

    attribution = measured.attribution
    sources = ", ".join(attribution.sources)
    unknown: dict[str, list[Kernel]] = {}
    for phase in buckets:
        for k in attribution.of(phase):
            for name in (*k.tensor_unknown, *k.cuda_unknown):
                unknown.setdefault(name, []).append(k)
    if unknown:
        lines = "; ".join(f"{name} (in {len(ks)} kernel(s), first {ks[0].short} at {ks[0].where})"
                          for name, ks in unknown.items())
        raise IncompleteCapture(f"cannot calibrate from {sources}: counters not collected (n/a or absent): {lines}; "
                                "a fit needs every FLOP counter of the kernels (profile with `costspec ncu run`, which "
                                "collects them)")
    for phase, b in buckets.items():
        tc_work = sum(t.tc for t in b.slots.values())
        if tc_work and not attribution.has_tensor_counters:
            dtype = measured.model.precision.dtype
            wanted = (tensor_counters_by_dtype(attribution.cc).get(dtype) if attribution.cc else None) or [
                "sm__ops_path_tensor_*.sum"]
            raise IncompleteCapture(f"cannot calibrate the {phase} phase from {sources}: it has {tc_work:,} analytic "
                                    f"Tensor-Core FLOPs and the capture has no Tensor-Core counter (expected "
                                    f"{', '.join(wanted)})")
        for cls, m in sorted(b.matmul.items()):
            if m.analytic and not m.kernels:
                slots = sorted(n for n, t in b.slots.items() if t.matmul.get(cls))
                raise IncompleteCapture(f"cannot calibrate epsilon[{cls}] of the {phase} phase from {sources}: no "
                                        f"kernel was attributed to its {_num(m.analytic):,} analytic FLOPs (slots "
                                        f"{', '.join(slots[:5])}{' ...' if len(slots) > 5 else ''}); the capture lacks "
                                        "the matmul kernels of these layers")


def calibration_text(result: CalibrationResult, name: str) -> str:
    """The calibration file's text, read back by the calibration reader first: a fit it would refuse
    (a coefficient out of its range, a number too long) is an error, never a file."""
    text = dump_calibration(result.data)
    try:
        loads_calibration(text, name)
    except CalibrationError as exc:
        raise IncompleteCapture(f"refusing to write {name}: the fit gives a calibration its reader refuses: "
                                f"{exc}") from None
    return text


def calibrate(measured: Measured, spec_file: str = "") -> CalibrationResult:
    """Fit every phase present in `measured` (refused for an incomplete capture: `check_capture`)."""
    model = measured.model
    buckets = {phase: bucket_phase(measured, phase) for phase in measured.attribution.phases}
    check_capture(measured, buckets)
    coeffs = {phase: coefficients(b) for phase, b in buckets.items()}
    data: dict = {
        FORMAT_KEY: FORMAT_VERSION,
        "spec": model.name,
        "spec_file": spec_file,
        "precision": str(model.precision),
        "dims": {str(k): int(v) for k, v in measured.values.items()},
        "sources": [{"csv": s, **_device(measured.sidecars, i)} for i, s in enumerate(measured.attribution.sources)],
        "conventions": CONVENTIONS,
        "model": ("executed = sum_c (1+epsilon_c) matmul_c + rho * gemm_output_elements + "
                  "sum_k (1+kappa_k) pointwise_k (fused kinds: 0 on top; kinds without kappa: analytic)"),
    }
    for phase, b in buckets.items():
        data[phase] = _phase_dict(b, coeffs[phase], model.table)
    return CalibrationResult(data, buckets, coeffs)


def _device(sidecars: list[dict], i: int) -> dict:
    if i >= len(sidecars):
        return {}
    s = sidecars[i]
    return {k: s[k] for k in ("gpu", "compute_capability", "ncu_version", "torch_version", "pass", "dtype",
                              "reconstructed") if k in s}


def render_summary(result: CalibrationResult) -> str:
    """The fitted numbers and the reconstruction, one block per phase."""
    d = result.data
    lines = [f"{d['spec']} | calibration from {', '.join(s['csv'] for s in d['sources'])} | "
             + " ".join(f"{k}={v}" for k, v in d["dims"].items())]
    for phase in ("forward", "backward"):
        if phase not in d:
            continue
        p = d[phase]
        lines.append(f"[{phase}]")
        for cls, e in p["epsilon"].items():
            lines.append(f"  epsilon[{cls}] = {e['value']:.6g} ({e['exact']}): {e['measured_flops']:,} measured / "
                         f"{e['analytic_flops']:,} analytic - 1; kernels {', '.join(e['kernels'])}")
        if p["rho"]:
            r = p["rho"]
            lines.append(f"  rho = {r['value']:.6g} ({r['exact']}): {r['measured_flops']:,} split-K FLOPs / "
                         f"{r['gemm_output_elements']:,} GEMM output elements")
        for kind, k in p["kappa"].items():
            lines.append(f"  kappa[{kind}] = {k['value']:.6g}: {k['measured_flops']:,} measured / "
                         f"{k['analytic_flops']:,} analytic ({k['flops_per_element']} FLOP/element) - 1")
        for kind, f in p["fused"].items():
            lines.append(f"  fused: {kind} ({f['analytic_flops']:,} analytic FLOPs) ran inside the matmul kernels "
                         f"of {', '.join(f['slots'])}: absorbed into epsilon")
        if p["no_term_flops"] or p["no_term_kernels"]:
            lines.append(f"  no model term (inside layers): {p['no_term_flops']:,} FLOPs in "
                         + ", ".join(p["no_term_kernels"]))
        if p["outside_kernels"]:
            lines.append(f"  unattributed (outside the model): {p['outside_flops']:,} FLOPs in "
                         + ", ".join(p["outside_kernels"]))
        same = "exact" if p["reconstruction_exact"] else "NOT exact"
        lines.append(f"  analytic {p['analytic_total']:,} | measured {p['measured_total']:,} | reconstructed "
                     f"{p['reconstructed_total']:,} ({same})")
    return "\n".join(lines)
