"""`OpDef`: what one op definition holds (attributes, shape rule, constraints, forward and backward
work, parameters, traffic, GEMMs, torch builder, runtime footprint, named reconciliation rules), and
the call it receives (`OpCall`: resolved attributes, input shape, precision, location, wiring).
An op subclasses `OpDef` and registers itself with `costspec.ops.registry.register_op`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

import sympy

from costspec.core.conventions import Precision
from costspec.core.errors import Location, SpecError
from costspec.core.vocab import Fusion, Phase
from costspec.ops.attrs import REQUIRED, Attr, Attrs
from costspec.ops.work import ZERO, Expr, Gemm, Part, Shape, Traffic, Work, numel

if TYPE_CHECKING:  # torch stays out of the import graph of eval/check
    import torch


@dataclass(frozen=True)
class Constraint:
    """A condition on dims that must hold once they are bound (checked with defaults at load time)."""

    condition: Any  # sympy Boolean
    message: str  # e.g. "dim {C} must be divisible by heads {heads}"; names are filled with values
    where: Location
    values: Mapping[str, Expr] = field(default_factory=dict)
    expected: str | None = None


GRAD_YES, GRAD_NO, GRAD_INPUT = "yes", "no", "input"  # Wiring.grads: does an input need a gradient?


@dataclass(frozen=True)
class Wiring:
    """Where a layer's other inputs come from, for ops reading more than the running value (joins,
    cross-attention) and for the gradient sums at a value read several times (the dataflow: docs/spec-language.md).

    extra: the shapes of the inputs after the first (branch outputs, saved values, an encoder's states).
    grads: per input, the first included, whether it needs a gradient in the backward: GRAD_YES (it
           comes from layers with parameters), GRAD_NO (a model input, or a value that needs none), or
           GRAD_INPUT (exactly when the layer's running input does: `input_grad` of `backward`).
    fanout: elements of the gradient sum this layer's backward runs where one value fed several
           consumers: (uses - 1) x the value's size, when that value needs a gradient.
    """

    extra: tuple[Shape, ...] = ()
    grads: tuple[str, ...] = ()
    fanout: Expr = ZERO

    def needs_grad(self, index: int, input_grad: bool) -> bool:
        """Whether input `index` (0 = the running value) needs a gradient, given the running input's."""
        state = self.grads[index] if index < len(self.grads) else GRAD_INPUT
        return state == GRAD_YES or (state == GRAD_INPUT and input_grad)


NO_WIRING = Wiring()


@dataclass(frozen=True)
class OpCall:
    """One use of an op in a spec: resolved attributes, input shape, precision, location; `wiring`
    for ops that read other values than the running one (see Wiring)."""

    attrs: Attrs
    in_shape: Shape
    precision: Precision
    loc: Location
    wiring: Wiring = NO_WIRING

    def fail(self, message: str, attr: str | None = None, expected: str | None = None) -> SpecError:
        return SpecError(message, self.attrs.where(attr), expected)


@dataclass(frozen=True)
class Reconcile:
    """A named, documented difference between an op's analytic work and what the runtime
    counters measure on the torch module its `build()` returns: measured = analytic + delta,
    for one part (name as in `forward()`) and one pass. `costspec validate` lists every one it
    applies, with its numbers; nothing is adjusted silently.
    """

    rule: str  # stable id, e.g. "sdpa-math-decomposition"
    part: str
    delta: Work
    text: str  # one line: what the counter sees, what costspec models, the formula of the difference
    measured_in: str | None = None  # an op name: the delta shows in that op's (single) layer's row instead



# ----------------------------------------------------------------------------------------------
# Runtime footprint: what an op's module emits when it runs
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Runtime:
    """What the module an op builds emits at run time, for the counters that check it.

    aten:       aten ops (overload packet names) this op's module runs that are not plain PyTorch
                pointwise ops, each with the cost-table kind one output element counts as (a causal
                mask built with tril + where: select).
    decomposed: (torch module class name, forward kind, backward kind): a module whose forward runs
                several aten ops the cost table prices as ONE kind per element (nn.RMSNorm's pow /
                mean / rsqrt / mul): all its ops become one record of the largest element count.
    fused:      fused-kernel key -> words of the aten op names that run it ("sdpa" -> scaled_dot_product,
                flash_attention, ...). A run reports each key's state (`vocab.FusedRun`) to `reconcile`.
    kernels:    matmul class -> the ncu kernel class its kernels have (gemm -> gemm, sdpa -> attention).
    """

    aten: Mapping[str, str] = field(default_factory=dict)
    decomposed: tuple[str, str, str] | None = None
    fused: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    kernels: Mapping[str, str] = field(default_factory=dict)


GEMM_RUNTIME = Runtime(kernels={"gemm": "gemm"})
CONV_RUNTIME = Runtime(kernels={"conv": "conv"})


# ----------------------------------------------------------------------------------------------
# Saved for backward: what autograd keeps of one forward call
# ----------------------------------------------------------------------------------------------
INPUT, OUTPUT = "input", "output"  # Saved.tensor of the running input and of the op's output
# Saved.tensor prefix of a tensor made by an earlier layer for several later ones (`OpDef.makes`), which each keep
# (DeBERTa's normalised relative-position table): one tensor, charged to the first layer that saves it
SHARED = "shared:"
INDEX_BYTES = 8  # int64 indices (token ids, max-pool argmax)
STAT_BYTES = 4  # fp32 statistics


def input_tensor(index: int) -> str:
    """Saved.tensor of input `index` (0: the running value, 1...: the values it reads, branch outputs)."""
    return INPUT if index == 0 else f"{INPUT}{index}"


@dataclass(frozen=True)
class Saved:
    """One tensor an op's module keeps for its backward (`OpDef.saved`): `tensor` says which -- INPUT
    (`input_tensor(i)`), OUTPUT, or the name of a tensor made inside the op (q, the probabilities, a mask) --,
    its elements and its bytes per element. An input or the output is one tensor with whoever else saves
    it (the layer before saving its output, the layer after its input): the walk counts it once, at the
    size of its storage (`costspec.tree.saved`)."""

    tensor: str
    elements: Expr
    bytes_per_element: Expr
    folded: bool = False  # the input folded to rows (a linear's): a strided view is saved as a copy of its elements
    # an input saved through a reshape of the op's own (windows of a token grid): the dims at which that is a
    # view of the input; elsewhere a copy of `elements` (its own tensor)
    view: Any = sympy.true
    # a folded input: the dims at which the fold is a view whatever its layout (a (B, t, C) with B = 1 or t = 1)
    folds: Any = sympy.false

    @property
    def bytes(self) -> Expr:
        return self.elements * self.bytes_per_element


# ----------------------------------------------------------------------------------------------
# Op definitions
# ----------------------------------------------------------------------------------------------
MAX_RANK = 6  # dims of any value a spec builds (the tree builder checks every op's input and output)


class OpDef:
    """Base class of op definitions. Subclasses set the class attributes and override methods."""

    name: ClassVar[str] = ""
    doc: ClassVar[str] = ""
    default_name: ClassVar[str] = ""
    attrs: ClassVar[tuple[Attr, ...]] = ()
    input_rank: ClassVar[tuple[int, ...] | None] = None  # allowed input ranks, None = any
    in_spec: ClassVar[bool] = True  # False: used by the engine (residual add), not written in specs
    fusable: ClassVar[bool] = False  # a pointwise op `--fusion aggressive` folds into its producer's epilogue
    # the running value passes through unchanged (a table made for later layers): its output needs a gradient
    # exactly when its input does, whatever the op's own parameters
    pass_through: ClassVar[bool] = False
    runtime: ClassVar[Runtime] = Runtime()  # what its module emits at run time (see Runtime)
    saves_nothing: ClassVar[bool] = False  # its module keeps no tensor for backward (else it defines saved())
    # why what its module keeps for backward is not modelled yet (`memory --pass train` then names the layer)
    saved_unmodelled: ClassVar[str] = ""
    output_view: ClassVar[bool] = False  # its module returns a view of its input (same storage): see aliases()

    def schema(self) -> dict:
        """JSON Schema of this op's attribute mapping (generated from `attrs`)."""
        return {
            "type": ["object", "null"],
            "description": self.doc,
            "properties": {a.name: a.schema() for a in self.attrs},
            "required": [a.name for a in self.attrs if a.default is REQUIRED],
            "additionalProperties": False,
        }

    def output_shape(self, call: OpCall) -> Shape:
        """Symbolic output shape; raise call.fail(...) on a mismatch."""
        return call.in_shape

    def constraints(self, call: OpCall) -> list[Constraint]:
        """Conditions on the dims (divisibility, ...) checked when the dims are bound."""
        return []

    def forward(self, call: OpCall) -> list[Part]:
        """Forward work and parameters, as named parts."""
        raise NotImplementedError

    def backward(self, call: OpCall, input_grad: bool) -> list[Part]:
        """Backward work, as parts with the forward's names. input_grad: dX is needed."""
        raise NotImplementedError

    def build(self, call: OpCall, ev: Callable[[Expr], int]) -> "torch.nn.Module":
        """A torch module computing this op (called only by torch_build); `ev` evaluates a size.
        Parts that are not `own` must be submodules named like the part."""
        raise NotImplementedError

    def reconcile(self, call: OpCall, pass_: Phase, input_grad: bool, runtime: Mapping[str, str],
                  ev: Callable[[Expr], int]) -> list[Reconcile]:
        """Named differences between this op's work and what FlopCounterMode and the pointwise
        counter measure for build()'s module in one phase, pass_. `runtime` says where
        and how it ran: runtime["device"] ("meta", "cpu"), runtime["sdpa"] (a `vocab.FusedRun`: decomposed,
        fused-uncounted or fused-counted). Default: none, the counters must see exactly the
        analytic work."""
        return []

    def gemm_outputs(self, call: OpCall, pass_: Phase, input_grad: bool) -> dict[str, Expr]:
        """Output elements of the GEMM / conv kernels one instance runs, per part, in the phase
        pass_: the denominator of the split-K coefficient rho (`costspec.analysis.calibration`). Forward: the
        elements each GEMM writes; backward: dW (the weight, bias excluded) plus dX (when input_grad).
        Every op with gemm or conv work defines it (a registry test checks)."""
        raise NotImplementedError(f"{self.name} has no gemm_outputs()")

    def notes(self, call: OpCall) -> list[str]:
        """One-line notes on a counting choice this use of the op makes (e.g. how causal attention
        is counted), for the report to print next to the numbers. Default: none."""
        return []

    def saved(self, call: OpCall, input_grad: bool) -> list[Saved]:
        """The tensors one instance's module keeps for backward in a training forward (parameters
        excluded; attention's by its SDPA kernel family, `backend:` or --backend); `input_grad`: its running
        input needs a gradient. Called only when some input or parameter needs one (else autograd records
        nothing). Every op defines it, sets `saves_nothing`, or says why it is not modelled yet
        (`saved_unmodelled`; a registry test)."""
        if self.saves_nothing:
            return []
        if self.saved_unmodelled:
            raise NotImplementedError(f"what {self.name} saves for backward is not modelled ({self.saved_unmodelled})")
        raise NotImplementedError(f"{self.name} does not define what it saves for backward")

    def makes(self, call: OpCall) -> dict[str, Expr]:
        """Tensors this op makes for later layers beside its output (not dataflow: they are linked), by `SHARED`
        name, with their bytes: a later layer's `saved` naming one keeps the nearest earlier one. Default: none."""
        return {}

    def view(self, call: OpCall, contiguous: Any) -> Any:
        """For an op whose module returns a view of its input (`aliases`): the condition (a sympy Boolean of
        the dims) under which that view is contiguous, given its input's; None when the module copies instead
        (a reshape of a strided view). Default: the input's layout."""
        return contiguous if self.aliases(call) else None

    def copies(self, call: OpCall, contiguous: Any) -> Any:
        """For an op whose `view` is not None: the condition (of the dims) under which its module copies instead
        (a reshape of an input strided at those dims), given its input's layout. Default: never."""
        return sympy.false

    def aliases(self, call: OpCall) -> bool:
        """True when this use's module returns a view of its input (one storage: a later layer saving the
        output keeps the input alive). Default: `output_view`."""
        return self.output_view

    def reads_input(self, call: OpCall) -> bool:
        """False for a layer whose output does not depend on its input's data (a table computed from
        its parameters alone, read by later layers): the running value before it is then not consumed
        by it and must be `save:`d to be used. Default: True."""
        return True
    def kv_cache(self, call: OpCall) -> Expr:
        """Elements one instance keeps in a key/value cache for later tokens (serving), as the step of this
        call reads it: the cached tokens and the new ones. Default: none (only attention caches)."""
        return ZERO

    def active_params(self, call: OpCall) -> Expr | None:
        """The parameters one token uses, where fewer than all of them (a mixture of experts: the router,
        top_k experts, shared experts); None when every parameter is used."""
        return None

    def example_input(self, call: OpCall, shape: tuple[int, ...], ev: Callable[[Expr], int], device: str,
                      dtype) -> "torch.Tensor | None":
        """The model input when this op is the spec's first layer, or None for a float tensor
        (torch_build's default). An embedding returns integer token ids in range."""
        return None

    def tied_to(self, call: OpCall) -> str | None:
        """The op name whose (unique) layer's weight this layer's module shares, or None.
        torch_build calls `tie(module, source_module)` after building both."""
        return None

    def tie(self, call: OpCall, module: "torch.nn.Module", source: "torch.nn.Module") -> None:
        """Make `module` use the weight of `source` (see tied_to)."""
        raise NotImplementedError

    def link(self, call: OpCall, module: Any, earlier: list) -> None:
        """Connect `module` to a value an earlier layer's module computes (T5's shared position bias).
        `earlier`: the (OpNode, module) pairs built before this one, in layer order (a repeat's
        instances one by one). torch_build calls it after building the whole model. Default: nothing."""

    def traffic(self, call: OpCall, pass_: Phase, input_grad: bool, fusion: Fusion) -> list[Traffic]:
        """Elements read and written per part (bytes = elements x the precision's element size).

        Default, for single-part ops, unfused: forward reads the input and the parameters and
        writes the output; backward reads the output gradient, the saved input and the
        parameters, and writes the input gradient (when needed) and the parameter gradients.
        Ops with several parts, or fused kernels, override this.
        """
        parts = self.forward(call)
        if len(parts) != 1:
            raise NotImplementedError(f"{self.name} has {len(parts)} parts and must define traffic()")
        x = numel(call.in_shape)
        y = numel(self.output_shape(call))
        w = parts[0].params
        if fusion == Fusion.AGGRESSIVE and self.fusable:
            return [Traffic(parts[0].name, ZERO, ZERO)]
        if pass_ == Phase.FORWARD:
            return [Traffic(parts[0].name, x + w, y)]
        if not input_grad and w == 0:
            return [Traffic(parts[0].name, ZERO, ZERO)]
        return [Traffic(parts[0].name, y + x + w, (x if input_grad else ZERO) + w)]

    def gemms(self, call: OpCall) -> list[Gemm]:
        """The matrix multiplies one forward call runs, per part (the geometry behind its matmul-class
        FLOPs), for the Tensor-Core alignment rules (`costspec.analysis.alignment`). Default: none."""
        return []


def layer_notes(op_nodes) -> list[str]:
    """`layer: note` for every counting choice the ops of a model state (`OpDef.notes`); a note that
    several layers state is one line with their count and the first and last names
    (`29 layers (stem.bn, ..., stage4.conv3.bn): note`). `op_nodes` are the model tree's op nodes
    (anything with .name, .op and .call; and the notes of its precision, `weight_notes`, where it has them)."""
    layers: dict[str, list[str]] = {}
    for node in op_nodes:
        for note in [*node.op.notes(node.call), *getattr(node, "weight_notes", ())]:
            names = layers.setdefault(note, [])
            if node.name not in names:
                names.append(node.name)
    return [f"{_layer_list(names)}: {note}" for note, names in layers.items()]


def _layer_list(names: list[str]) -> str:
    if len(names) == 1:
        return names[0]
    shown = ", ".join(names) if len(names) <= 3 else f"{names[0]}, {names[1]}, ..., {names[-1]}"
    return f"{len(names)} layers ({shown})"


def requires(op: OpDef, call: OpCall, rank: int | tuple[int, ...], what: str) -> None:
    """Raise a SpecError naming the layer if the input rank is not the expected one."""
    ranks = (rank,) if isinstance(rank, int) else rank
    if len(call.in_shape) not in ranks:
        shape = "[" + ", ".join(str(d) for d in call.in_shape) + "]"
        raise SpecError(f"{op.name} needs {what}, but its input has shape {shape}", call.loc,
                        f"an input of rank {' or '.join(map(str, ranks))}")


def same_size_constraint(call: OpCall, attr: str, value: Expr, actual: Expr, what: str) -> list[Constraint]:
    """`value` (attribute `attr`) must equal `actual` (e.g. the input's last dim): an immediate
    SpecError when sympy can decide they differ, else a Constraint checked when the dims are bound."""
    same = same_size(value, actual)
    if same is False:
        raise call.fail(f"{attr}={value} does not match {what} {actual}", attr, what)
    if same:
        return []
    return [Constraint(sympy.Eq(value, actual), f"{attr}={{value}} does not match {what} {{actual}}",
                       call.attrs.where(attr), {"value": value, "actual": actual}, what)]


def same_size(a: Expr, b: Expr) -> bool | None:
    """True/False when sympy can decide a == b for all dims, None when it depends on values."""
    diff = sympy.simplify(a - b)
    if diff == 0:
        return True
    if diff.is_number:
        return False
    return None


Builder = Callable[..., Any]
