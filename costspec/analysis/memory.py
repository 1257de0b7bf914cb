"""Device memory of a model by kind: weights, gradients, master weights, optimizer state and the
key/value cache, each an exact symbolic byte count in the spec's dims, evaluated at bound dims, and
the fit against a GPU's capacity (with the largest batch that fits).

Conventions (docs/conventions.md, memory):
* weights at each layer's precision (its bytes per element, block scales included; quantised weight
  matrices at their stored width plus scales); a tied weight once;
* gradients (train): one per trainable parameter, in the parameter's dtype (what autograd's `.grad` holds):
  the weight matrices of quantised or LoRA-adapted layers are frozen (their adapters train);
* master weights (`master=True`, train): an fp32 copy of every trainable parameter not already stored in
  32 bits;
* optimizer state (train): sgd none (no momentum), adam / adamw two moments per trainable parameter, in the dtype
  of the weights they update (fp32 with master weights, else the parameter's: torch's `zeros_like`);
  their per-tensor `step` counters live on the host (torch's default) and are not device memory;
  adafactor and adam8bit by each parameter tensor's shape (`costspec.analysis.memory_optim`); adam / adamw's
  foreach step also holds one state-sized buffer (the "optimizer-step buffer", transient);
* the key/value cache (a serving phase): each attention layer's `kv_cache` elements (k and v of the cached
  and new tokens, grouped-query aware; mla's latent and rope key; a cross-attention's k and v of the encoder's
  tokens) at the layer's precision;
* activations saved for backward (train): every tensor autograd keeps between the forward and the
  backward, each counted once (`costspec.tree.saved`; each op's `OpDef.saved`), attention's by its kernel
  family (`backend:` / --backend);
* the train total is the peak of a training step after the first (`costspec.analysis.memory_peak`): the
  largest of its forward end (the state, every saved activation, the output and the loss), a checkpointed
  part's re-run in backward, a tied weight's gradients at its backward and the optimizer's step (the state
  and the optimizer's buffer).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import sympy

from costspec.analysis.memory_optim import HOW, SHAPED, ParamTensor
from costspec.analysis.memory_optim import state_bytes as shaped_state_bytes
from costspec.analysis.memory_peak import Category, Moment, peak, step_moments
from costspec.core.errors import UsageError
from costspec.core.results import Column, Result, Row, Table
from costspec.core.vocab import Pass, Word
from costspec.tree.network import Network
from costspec.tree.nodes import OpNode
from costspec.tree.saved import recomputed_bytes, saved_bytes, saved_total
from costspec.tree.weights import weight_elements

FP32_BYTES = 4


class Optimizer(Word):
    """The optimizers whose state `memory` counts (states per parameter: `STATES`)."""

    SGD = "sgd"
    ADAM = "adam"
    ADAMW = "adamw"
    ADAFACTOR = "adafactor"
    ADAM8BIT = "adam8bit"


STATES = {Optimizer.SGD: 0, Optimizer.ADAM: 2, Optimizer.ADAMW: 2}  # per parameter (momentum-free SGD: none)
# adafactor and adam8bit: per parameter tensor, by its shape (costspec.analysis.memory_optim)


@dataclass(frozen=True)
class Kind:
    """One kind of memory: its name, exact bytes as an expression of the dims, and how it is counted."""

    name: str
    bytes: sympy.Expr
    how: str
    transient: bool = False  # held during one moment of the step only (not part of the state held throughout)


def memory_kinds(model: Network, pass_: Pass | str, optimizer: Optimizer | str = Optimizer.ADAMW,
                 master: bool = False, cache: bool = False, tensors: list[ParamTensor] | None = None) -> list[Kind]:
    """The kinds of memory a forward or training step of `model` holds (see the module docstring);
    `cache`: the model is served (a phase), so its attention layers hold a key/value cache; `tensors`: the
    model's parameter tensors at the bound dims, which adafactor's and adam8bit's state need
    (`costspec.runtime.param_tensors`)."""
    pass_ = Pass.parse(pass_, "--pass", (Pass.FORWARD, Pass.TRAIN))
    optimizer = Optimizer.parse(optimizer, "--optimizer")
    shaped = pass_ is Pass.TRAIN and optimizer in SHAPED
    if shaped and tensors is None:
        raise UsageError(f"--optimizer {optimizer} sizes its state by each parameter tensor's shape: pass the "
                         "model's parameter tensors")
    if master and pass_ is not Pass.TRAIN:
        raise UsageError("--master-weights is the fp32 copy an optimizer updates: it needs --pass train")
    ops = [(step.node, step.instances) for step in model.walk() if isinstance(step.node, OpNode)]
    for node, _ in ops:
        if node.precision.sparse:
            raise UsageError(f"layer '{node.name}' stores 2:4 sparse weights, whose memory is not modelled")
    # (a served step's weights are those of the model it was served from: an encoder-decoder's decode step
    # runs neither the encoder nor the cross-attention's key/value projections, yet they stay loaded)
    loaded = ops if model.unserved is None else [(step.node, step.instances) for step in model.unserved.walk()
                                                 if isinstance(step.node, OpNode)]
    weights = _total(loaded, _weight_bytes)
    kinds = [Kind("weights", weights, "parameters x bytes per element of each layer's precision (quantised "
                  "weight matrices at their stored width plus scales)"
                  + ("; every layer of the model served, run in this step or not" if model.unserved else ""))]
    if pass_ is Pass.TRAIN:
        # frozen weight matrices (quantised, or under LoRA adapters) get no gradient and no optimizer state
        params = _total(ops, lambda n: n.trainable_params)
        trained = _total(ops, lambda n: n.trainable_params * n.precision.bytes_per_element)
        kinds.append(Kind("gradients", trained, "one gradient per trainable parameter, in the parameter's dtype"))
        narrow = _total(ops, lambda n: n.trainable_params if n.precision.bytes_per_element < FP32_BYTES else 0)
        if master:
            kinds.append(Kind("master weights", FP32_BYTES * narrow,
                              "an fp32 copy of every trainable parameter stored in fewer than 32 bits"))
        states = 0 if shaped else STATES[optimizer]
        state_bytes = FP32_BYTES * params if master else trained
        dtype = "fp32 (master weights)" if master else "the parameter's dtype"
        if shaped:
            assert tensors is not None
            kinds.append(Kind(f"optimizer state ({optimizer})", sympy.Integer(shaped_state_bytes(optimizer, tensors)),
                              HOW[optimizer] + "; its step's buffers not modelled"))
        else:
            kinds.append(Kind(f"optimizer state ({optimizer})", states * state_bytes,
                              f"{states} state(s) per trainable parameter in {dtype}; step counters on the host"))
        if states:
            kinds.append(Kind(OPT_BUFFER, state_bytes, "adam/adamw's _foreach_sqrt of the second moments during "
                              "the step: one state-sized copy of every trainable parameter", transient=True))
        if unmodelled_activations(model) is None:
            kinds.append(Kind(ACTIVATIONS, saved_total(saved_activations(model)),
                              "every tensor autograd keeps for backward, once (inputs, outputs, probabilities, "
                              "statistics), at its dtype"))
            recomputed = recomputed_bytes(model.root)
            if recomputed != 0:
                kinds.append(Kind(RECOMPUTED, recomputed, "the most one checkpointed part saves again while its "
                                  "forward re-runs in backward (its input already held), held at the checkpointed "
                                  "recompute moment", transient=True))
    if cache:
        kv = _total(ops, lambda n: n.op.kv_cache(n.call) * n.precision.bytes_per_element)
        kinds.append(Kind("kv cache", kv, "every cached and new token's k and v per attention layer (2 x B x "
                          "kv_heads x head_dim x tokens x bytes; mla: its latent and rope key, B x (r + d_r)); an "
                          "encoder-decoder's cross-attention: k and v of the encoder's S tokens"))
    return kinds


def _weight_bytes(node: OpNode) -> sympy.Expr:
    """Bytes of one instance's parameters: at the layer's precision, its quantised weight matrices at their
    stored width plus their groups' scales."""
    size = node.precision.bytes_per_element
    if not node.precision.quantised:
        return node.params * size
    gemms = [g for part in node.weight_gemms.values() for g in part]
    quantised = sum((node.precision.quantised_weight_bytes(g.n, g.k, g.count) for g in gemms), sympy.Integer(0))
    return (node.params - weight_elements(gemms)) * size + quantised


ACTIVATIONS = "activations saved for backward"
OPT_BUFFER = "optimizer-step buffer"
RECOMPUTED = "activations recomputed in backward (largest checkpointed part)"


def saved_activations(model: Network) -> dict[str, sympy.Expr]:
    """Bytes saved for backward per op row; a UsageError names a layer whose saved tensors are not modelled."""
    return saved_bytes(model.root)


def unmodelled_activations(model: Network) -> str | None:
    """Why the saved activations of `model` cannot be counted (a layer whose saved tensors are not
    modelled), or None when they can."""
    try:
        saved_activations(model)
    except UsageError as e:
        return str(e)
    return None


def saved_by_kind(model: Network) -> dict[str, sympy.Expr]:
    """Saved bytes summed per op kind (attention, mlp, layernorm, ...), in first-appearance order."""
    ops = {node.name: node.op.name for node in model.op_nodes()}
    out: dict[str, sympy.Expr] = {}
    for row, amount in saved_activations(model).items():
        out[ops[row]] = sympy.expand(out.get(ops[row], sympy.Integer(0)) + amount)
    return out


def training_moments(model: Network, kinds: list[Kind]) -> list[Moment]:
    """The moments of a training step (memory_peak) from `kinds` (memory_kinds of a train pass whose saved
    activations are modelled)."""
    by_name = {k.name: k.bytes for k in kinds}
    state = {_category(k.name): k.bytes for k in kinds if not k.transient and k.name != ACTIVATIONS}
    return step_moments(model, state, by_name[ACTIVATIONS], by_name.get(OPT_BUFFER, sympy.Integer(0)),
                        saved_activations(model), by_name.get(RECOMPUTED, sympy.Integer(0)))


def _category(name: str) -> Category:
    return Category.OPTIMIZER if name.startswith("optimizer state") else Category(name)


def _total(ops: list[tuple[OpNode, sympy.Expr]], per_instance: Callable[[OpNode], object]) -> sympy.Expr:
    total = sympy.Integer(0)
    for node, instances in ops:
        total += instances * node.canonical(sympy.sympify(per_instance(node)))
    return sympy.expand(total)


def exact_bytes(expr: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Integer]) -> int:
    """The byte count at bound dims (whole bytes: 4-bit formats round their last partial byte up)."""
    value = sympy.sympify(expr).xreplace(values)
    if not value.is_number:
        raise UsageError(f"bytes {expr} do not evaluate at the given dims")
    return int(sympy.ceiling(value))


def largest_fitting(total: sympy.Expr, values: Mapping[sympy.Symbol, sympy.Integer], dim: sympy.Symbol,
                    capacity: int, limit: int = 1 << 40) -> int | None:
    """The largest value of `dim` (>= 1) at which `total` bytes fit in `capacity`, the others as bound; None
    when even 1 does not fit. Memory grows with every dim, so a doubling then a bisection finds it."""
    def fits(n: int) -> bool:
        return exact_bytes(total, {**values, dim: sympy.Integer(n)}) <= capacity

    if not fits(1):
        return None
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    if high > limit:
        return low
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


COLUMNS = [Column("bytes", "bytes", "bytes"), Column("exact", "exact bytes", "count"),
           Column("share", "share", "percent"), Column("formula", "formula (bytes)", "text"),
           Column("how", "counted as", "text", hidden=True)]


def memory_result(model: Network, kinds: list[Kind], values: Mapping[sympy.Symbol, sympy.Integer],
                  pass_: Pass | str, gpu=None) -> Result:
    """One row per kind (bytes, exact, share, formula) and the total; with `gpu` (an analysis.gpus.Gpu),
    the capacity, whether the total fits and the largest batch B that does."""
    pass_ = Pass.parse(pass_, "--pass")
    unmodelled = unmodelled_activations(model) if pass_ is Pass.TRAIN else None
    train = pass_ is Pass.TRAIN and unmodelled is None
    moments = training_moments(model, kinds) if train else []
    total = peak(moments) if train else sympy.expand(sum((k.bytes for k in kinds if not k.transient),
                                                         sympy.Integer(0)))
    sizes = [exact_bytes(k.bytes, values) for k in kinds]
    whole = exact_bytes(total, values)
    rows = [Row(k.name, k.name, 0, {"bytes": n, "exact": n, "share": n / whole if whole else 0.0,
                                    "formula": str(k.bytes), "how": k.how}) for k, n in zip(kinds, sizes)]
    label = "total (training step peak)" if train else (
        "total (without saved activations)" if pass_ is Pass.TRAIN else "total")
    tables = [Table(COLUMNS, rows, Row("", label, 0, {"bytes": whole, "exact": whole, "share": 1.0,
                                                     "formula": str(total)}), label_title="kind")]
    dims = " ".join(f"{k}={values[d.symbol]}" for k, d in model.dims.dims.items() if d.symbol in values)
    phase = getattr(model, "phase", None)
    shown_phase = f" | phase: {phase}" if phase else ""
    header = f"{model.name} | memory | pass: {pass_}{shown_phase} | precision: {model.precision.label} | {dims}"
    meta: dict = {"spec": model.name, "pass": str(pass_), "phase": str(phase) if phase else None,
                  "dims": {k: int(values[d.symbol]) for k, d in model.dims.dims.items() if d.symbol in values},
                  "kinds": {k.name: {"bytes": n, "formula": str(k.bytes), "counted_as": k.how}
                            for k, n in zip(kinds, sizes)},
                  "total_bytes": whole, "activations_included": train}
    notes = [f"{k.name}: {k.how}" for k in kinds]
    if unmodelled is not None:
        meta["activations_not_counted"] = unmodelled
        notes.insert(0, f"activations saved for backward are not counted ({unmodelled}): the total is a lower "
                        "bound of a training step's peak")
    if train:
        by_kind = saved_by_kind(model)
        saved = sum(exact_bytes(b, values) for b in by_kind.values())
        tables.append(Table(COLUMNS, [
            Row(kind, kind, 0, {"bytes": n, "exact": n, "share": n / saved if saved else 0.0, "formula": str(b)})
            for kind, b in by_kind.items() for n in [exact_bytes(b, values)]],
            Row("", ACTIVATIONS, 0, {"bytes": saved, "exact": saved, "share": 1.0}), label_title="saved by layer kind"))
        meta["saved_by_kind"] = {kind: {"bytes": exact_bytes(b, values), "formula": str(b)}
                                 for kind, b in by_kind.items()}
        totals = [exact_bytes(m.total, values) for m in moments]
        highest = totals.index(max(totals))
        tables.append(Table(COLUMNS, [
            Row(m.name, m.name + (" (peak)" if i == highest else ""), 0,
                {"bytes": n, "exact": n, "share": n / whole if whole else 0.0, "formula": str(m.total),
                 "how": ", ".join(f"{c}: {exact_bytes(b, values):,}" for c, b in m.parts.items())})
            for i, (m, n) in enumerate(zip(moments, totals))], label_title="moment of the step"))
        meta["moments"] = {m.name: {"bytes": n, "parts": {str(c): exact_bytes(b, values) for c, b in m.parts.items()}}
                           for m, n in zip(moments, totals)}
        meta["peak_moment"] = moments[highest].name
        notes.insert(0, f"the total is the peak of a training step after the first, at its {moments[highest].name} "
                        "(the largest of the moments: docs/conventions.md, memory)")
    if gpu is not None:
        capacity = int(gpu.memory_gb * 10**9)
        fits = whole <= capacity
        meta["gpu"] = {"key": gpu.key, "capacity_bytes": capacity, "fits": fits}
        line = (f"{gpu.name}: {gpu.memory_gb:g} GB = {capacity:,} bytes (the catalog's decimal GB); "
                f"{'fits' if fits else 'does NOT fit'} ({100 * whole / capacity:.1f}% of it)")
        growing = [(name, key) for name, key in (("B", "largest_batch"), (getattr(model, "context_dim", None),
                                                                          "largest_context"))
                   if name in model.dims.dims and model.dims.dims[name].symbol in total.free_symbols]
        for name, key in growing:
            largest = largest_fitting(total, values, model.dims.dims[name].symbol, capacity)
            meta["gpu"][key] = largest
            line += f"; largest {name} that fits: " + (f"{largest:,}" if largest is not None else "none")
        notes.insert(0, line)
    return Result(header, tables, {}, notes, meta)


__all__ = ["ACTIVATIONS", "COLUMNS", "Kind", "OPT_BUFFER", "Optimizer", "RECOMPUTED", "STATES", "exact_bytes",
           "largest_fitting", "memory_kinds", "memory_result", "saved_activations", "saved_by_kind",
           "training_moments", "unmodelled_activations"]
