"""Runtime counts of a torch module: matmul-class FLOPs from torch's FlopCounterMode and
CUDA-core work from a TorchDispatchMode that maps every executed aten op to a cost-table kind.

Both are attributed to torch module paths with the tracker FlopCounterMode runs
(`attribution.ScopeTracker`: the innermost module active when the op executes; in backward, by
module scope or by the module that created the autograd node running), per pass; the attention
computations (`attribution.Region`) are recorded with their ops. Every aten op ends up in exactly
one place: a cost-table kind (pointwise), a matmul-class op (FlopCounterMode counts it), ignored on
purpose (with the reason), or unknown (listed, never dropped).

torch is imported by this module: import it only where torch is needed.
"""
from __future__ import annotations

import copy
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from costspec.core.vocab import FusedRun
from costspec.ops import OPS
from costspec.runtime.attribution import EAGER, OUTSIDE, PASSES, QK_MATMULS, Region, ScopeTracker, SdpaCalls

# -- classification tables (aten overload packet name -> what it is) ----------------------------
_IGNORED_REASON = "moves or views data, no arithmetic"
IGNORED: dict[str, str] = {name: _IGNORED_REASON for name in (
    "aten.view", "aten._unsafe_view", "aten.reshape", "aten._reshape_alias", "aten.t", "aten.transpose",
    "aten.permute", "aten.expand", "aten.unsqueeze", "aten.squeeze", "aten.clone", "aten.copy_",
    "aten._to_copy", "aten.contiguous", "aten.detach", "aten.alias", "aten.cat", "aten.stack", "aten.unbind",
    "aten.split", "aten.split_with_sizes", "aten.slice", "aten.select", "aten.slice_backward",
    "aten.select_backward", "aten.as_strided", "aten.unfold", "aten.flatten", "aten.lift_fresh",
    "aten.squeeze_", "aten.unsqueeze_", "aten.t_", "aten.transpose_", "aten.as_strided_", "aten.detach_",
    "aten.resize_",
)}
IGNORED.update({name: _IGNORED_REASON for name in ("aten.constant_pad_nd", "aten.flip", "aten.repeat")})
IGNORED.update({"aten.scatter": "writes values at indices (top-k's backward), no arithmetic",
                "aten.scatter_": "writes values at indices (a group mask), no arithmetic",
                "aten.gather": "gathers values at indices (the routing weights of the chosen experts), no arithmetic",
                "aten.upsample_nearest2d": "gathers rows of a table, no arithmetic",
                "aten.roll": _IGNORED_REASON})
IGNORED.update({name: "gathers rows of a table, no arithmetic" for name in ("aten.embedding", "aten.index")})
IGNORED.update({name: "allocates or fills memory, no arithmetic" for name in (
    "aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided",
    "aten.zeros", "aten.zeros_like", "aten.new_zeros", "aten.ones", "aten.ones_like", "aten.fill_",
    "aten.zero_", "aten.scalar_tensor",
)})

def _from_registry():
    """What the registered ops say their modules emit (`OpDef.runtime`): aten op -> cost-table kind (one
    output element = one element of the kind), decomposed module class -> (forward, backward kind), and
    fused-kernel key -> the words of its aten op names. Two ops disagreeing on an aten op is a bug."""
    simple: dict[str, str] = {}
    decomposed: dict[str, tuple[str, str]] = {}
    fused: dict[str, tuple[str, ...]] = {}
    for op in OPS.values():
        for name, kind in op.runtime.aten.items():
            if simple.setdefault(name, kind) != kind:
                raise AssertionError(f"{name} is counted as {simple[name]} and as {kind} ({op.name})")
        if op.runtime.decomposed:
            cls, fwd, bwd = op.runtime.decomposed
            decomposed[cls] = (fwd, bwd)
        fused.update(op.runtime.fused)
    return simple, decomposed, fused


SIMPLE, DECOMPOSED, FUSED = _from_registry()


def decomposed_kinds(module) -> tuple[str, str] | None:
    """(forward kind, backward kind) when `module`'s class (or a base class) is priced as one decomposed kind."""
    return next((DECOMPOSED[c.__name__] for c in type(module).__mro__ if c.__name__ in DECOMPOSED), None)


# -- aten ops whose element count is computed from their arguments (a pooling window, a training flag):
# PyTorch facts about these aten ops, used by the pooling, batchnorm, mean and moe modules ----------------
# aten op -> (argument index of its `training` flag, kind when training, kind in eval mode)
BATCH_NORM: dict[str, tuple[int, str, str]] = {
    "aten.native_batch_norm": (5, "batchnorm", "batchnorm_eval"),
    "aten._native_batch_norm_legit": (5, "batchnorm", "batchnorm_eval"),
    "aten._native_batch_norm_legit_no_training": (-1, "batchnorm", "batchnorm_eval"),
    "aten.native_batch_norm_backward": (7, "batchnorm_backward", "batchnorm_eval_backward"),
}


# pooling: aten op -> (kind, index of its dilation argument or None); elements = what the windows cover
POOL_WINDOWS: dict[str, tuple[str, int | None]] = {
    "aten.max_pool2d_with_indices": ("max_pool", 4), "aten.max_pool1d": ("max_pool", 4),
    "aten.max_pool2d": ("max_pool", 4), "aten.avg_pool2d": ("avg_pool", None), "aten.avg_pool1d": ("avg_pool", None),
}


def _sizes(value, n: int, default) -> list[int]:
    """A pooling argument (an int, or one per spatial dim; [] for the default) as n ints."""
    if isinstance(value, (list, tuple)):
        value = list(value) or default
    sizes = [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
    return sizes * n if len(sizes) == 1 else sizes


def _covered(inp, out_spatial: list[int], kernel, stride, padding, dilation) -> int:
    """Input elements (of the padded input) the windows of a pool cover, summed over the windows:
    each window clipped to the padded extent [-padding, size + padding). Without ceil_mode every
    window lies inside it (output x kernel area); with ceil_mode the last one may reach past it
    (EfficientNet's AvgPool2d(2560, ceil_mode=True) on 7 x 7: 49 elements, not 2560^2)."""
    n = len(out_spatial)
    sizes = list(inp.shape[-n:])
    k = _sizes(kernel, n, None)
    s = _sizes(stride, n, k)
    p = _sizes(padding, n, [0])
    d = _sizes(dilation, n, [1])
    total = inp.numel() // max(1, _product(sizes))  # the batch and channel dims
    for size, outs, ki, si, pi, di in zip(sizes, out_spatial, k, s, p, d):
        end = size + pi
        total *= sum(sum(1 for t in range(ki) if j * si - pi + t * di < end) for j in range(outs))
    return total


def _product(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _pool(name: str, args, out) -> list[tuple[str, int]]:
    kind, dilation_at = POOL_WINDOWS[name]
    out_t = out[0] if isinstance(out, (tuple, list)) else out
    n = 1 if name.endswith("1d") else 2
    dilation = args[dilation_at] if dilation_at is not None and len(args) > dilation_at else 1
    stride = args[2] if len(args) > 2 else []
    padding = args[3] if len(args) > 3 else 0
    return [(kind, _covered(args[0], list(out_t.shape[-n:]), args[1], stride, padding, dilation))]


def _computed(name: str, args, kwargs, out, phase: str) -> list[tuple[str, int]] | None:
    """(kind, elements) of the aten ops the dataflow and op-family modules emit beyond SIMPLE, or None."""
    if name in BATCH_NORM:
        index, train, eval_ = BATCH_NORM[name]
        training = index >= 0 and bool(args[index])
        return [(train if training else eval_, _numel(args[0]))]
    if name in POOL_WINDOWS:
        return _pool(name, args, out)
    if name == "aten.avg_pool2d_backward":  # the output gradient spread over each window
        grad, inp = args[0], args[1]
        stride = args[3] if len(args) > 3 else []
        padding = args[4] if len(args) > 4 else 0
        return [("avg_pool_backward", _covered(inp, list(grad.shape[-2:]), args[2], stride, padding, 1))]
    if name == "aten._adaptive_avg_pool2d_backward":  # even windows: every input element gets one add
        return [("avg_pool_backward", _numel(out))]
    if name in ("aten._adaptive_avg_pool2d", "aten.mean"):  # every input element added once
        return [("avg_pool" if name.endswith("pool2d") else "mean", _numel(args[0]))]
    if name in ("aten.div", "aten.div_"):  # by a constant (mean's backward: g / count) or elementwise
        return [("scale" if _is_scalar(args[1]) else "div", _numel(out))]
    if name == "aten.neg":  # a multiplication by -1
        return [("scale", _numel(out))]
    if name == "aten.topk":
        return [("topk", _numel(args[0]))]
    if name == "aten.sum" and phase == "forward":  # (in the backward, a broadcast gradient's sum: bias_grad)
        return [("sum", _numel(args[0]))]
    if name == "aten.pow":
        return _pow(args, out)
    if name == "aten.clamp":  # one compare/select per bound given
        given = list(args[1:3]) + [kwargs.get("min"), kwargs.get("max")]
        bounds = sum(1 for a in given if a is not None)
        return [("clamp" if bounds == 2 else "clamp_bound", _numel(out))] if bounds else []
    if name in ("aten.clamp_min", "aten.clamp_max"):
        return [("clamp_bound", _numel(out))]
    if name in SELECTS:
        return [("select", _numel(out))]
    if name in ("aten.scatter_add", "aten.scatter_add_"):  # a gather's backward: one add per source element
        return [("scatter_add", _numel(args[3]))]
    return None


# comparisons and logical ops on masks: one compare/select per output element (clamp's backward keeps the
# gradient inside the bounds: ge, le, logical_and, where; a router's group mask: bitwise_not, masked_fill)
SELECTS = frozenset({"aten.ge", "aten.le", "aten.logical_and", "aten.logical_and_", "aten.bitwise_not",
                     "aten.masked_fill"})


# pow(x, e) with a scalar e, as its kernel computes it: 0 and 1 fill or copy; 2 and 3 multiply; -2 is 1/(x*x)
_POW_KINDS: dict[float, list[str]] = {0.0: [], 1.0: [], 2.0: ["square"], 3.0: ["cube"], -2.0: ["square", "pow"]}


def _pow(args, out) -> list[tuple[str, int]]:
    exponent = args[1] if len(args) > 1 else None
    if isinstance(exponent, (int, float)) and not isinstance(exponent, bool) and isinstance(args[0], torch.Tensor):
        kinds = _POW_KINDS.get(float(exponent), ["pow"])
    else:  # a tensor exponent, or a scalar base (aten.pow.Scalar): one libm call per element
        kinds = ["pow"]
    return [(kind, _numel(out)) for kind in kinds]



def _numel(value) -> int:
    if isinstance(value, (tuple, list)):
        value = value[0]
    return value.numel() if isinstance(value, torch.Tensor) else 0


def _is_scalar(value) -> bool:
    return isinstance(value, (int, float)) or (isinstance(value, torch.Tensor) and value.dim() == 0)


def classify(name: str, func, args, kwargs, out, phase: str, module) -> tuple[str, list[tuple[str, int]]]:
    """(category, [(kind, elements)]) of one executed aten op.

    category: "pointwise" | "matmul" (counted by FlopCounterMode; may carry a fused epilogue kind)
    | "fused:<key>" (a fused kernel an op declares, e.g. fused:sdpa; kinds = [(FusedRun, 1)])
    | "ignored" | "unknown".
    """
    packet = func._overloadpacket
    for key, words in FUSED.items():
        if any(word in name for word in words):
            return f"fused:{key}", [(FusedRun.COUNTED if packet in flop_registry else FusedRun.UNCOUNTED, 1)]
    if name in IGNORED:
        return "ignored", []
    computed = _computed(name, args, kwargs, out, phase)
    if computed is not None:
        return "pointwise", computed
    if name in ("aten.gelu", "aten.gelu_backward"):  # one aten op, two cost-table kinds by its argument
        approximate = kwargs.get("approximate", args[-1] if isinstance(args[-1], str) else "none")
        kind = "gelu_tanh" if approximate == "tanh" else "gelu"
        return "pointwise", [(kind + ("_backward" if name.endswith("_backward") else ""), _numel(out))]
    if name in SIMPLE:
        return "pointwise", [(SIMPLE[name], _numel(args[0] if name.endswith("_backward") else out))]
    if name in ("aten.add", "aten.add_"):
        linear_epilogue = phase == "forward" and isinstance(module, torch.nn.Linear)
        return "pointwise", [("bias_add" if linear_epilogue else "add", _numel(out))]
    if name in ("aten.mul", "aten.mul_"):
        scalar = any(_is_scalar(a) for a in args[:2])
        return "pointwise", [("scale" if scalar else "mul", _numel(out))]
    if name in ("aten.index_put", "aten.index_put_", "aten._index_put_impl_"):
        accumulate = kwargs.get("accumulate", args[3] if len(args) > 3 else False)
        if accumulate:  # the gradient of a gather: values added into the gathered rows
            return "pointwise", [("scatter_add", _numel(args[2]))]
        return "ignored", []
    if name == "aten.sum" and phase == "backward":  # a bias / broadcast-parameter gradient
        return "pointwise", [("bias_grad", _numel(args[0]))]
    if name == "aten.addmm":  # the bias add runs in the GEMM's epilogue
        return "matmul", [("bias_add", _numel(out))]
    if name == "aten.convolution":
        return "matmul", [("bias_add", _numel(out))] if args[2] is not None else []
    if name == "aten.convolution_backward":
        mask = args[-1]
        return "matmul", [("bias_grad", _numel(args[0]))] if mask[2] else []
    if packet in flop_registry:
        return "matmul", []
    return "unknown", []


@dataclass
class Unknown:
    """An aten op the counter has no mapping for (listed in reports, never dropped)."""

    phase: str
    module: str
    op: str
    elements: int


@dataclass
class Measurement:
    """What ran, per pass, attributed to torch module paths ("" = the root module, OUTSIDE = none)."""

    root: str  # the root module's class name (FlopCounterMode's key prefix)
    matmul: dict[str, dict[str, int]]  # pass -> path -> FlopCounterMode FLOPs (exclusive of submodules)
    total: dict[str, int]  # pass -> FlopCounterMode's "Global" total
    pointwise: dict[str, dict[str, Counter]]  # pass -> path -> kind -> elements
    fused: dict[str, dict[str, dict[str, Counter]]]  # pass -> path -> fused key -> FusedRun -> calls
    ignored: Counter = field(default_factory=Counter)  # (op, reason) -> calls
    outside: Counter = field(default_factory=Counter)  # ops outside the model: op -> calls
    unknown: list[Unknown] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # attribution problems (never expected)
    regions: list[Region] = field(default_factory=list)  # attention computations, in forward order
    lookups: set[str] = field(default_factory=set)  # module paths that read a table by index (aten.embedding)


class PointwiseCounter(TorchDispatchMode):
    """Records every executed aten op with its kind, element count and innermost module path."""

    def __init__(self, tracker, modules: dict[str, torch.nn.Module], root: str):
        super().__init__()
        self.tracker, self.modules, self.root = tracker, modules, root
        self.phase = "forward"
        self.pointwise: dict[str, dict[str, Counter]] = {p: defaultdict(Counter) for p in PASSES}
        self.fused: dict[str, dict[str, dict[str, Counter]]] = {p: defaultdict(lambda: defaultdict(Counter))
                                                                 for p in PASSES}
        self.decomposed: dict[tuple[str, str, str], tuple[str, int]] = {}
        self.ignored: Counter = Counter()
        self.outside: Counter = Counter()
        self.unknown: list[Unknown] = []
        self.problems: list[str] = []
        self.lookups: set[str] = set()

    def _innermost(self) -> str:
        names = [n for n in self.tracker.parents if n != "Global"]
        if not names:
            return OUTSIDE
        paths = [n[len(self.root) + 1:] if n != self.root else "" for n in names]
        deepest = max(paths, key=lambda p: (p.count(".") + 1 if p else 0))
        depth = deepest.count(".") + 1 if deepest else 0
        ties = sorted(p for p in paths if (p.count(".") + 1 if p else 0) == depth)
        if len(ties) > 1:
            self.problems.append(f"{self.phase}: ambiguous module scope {ties}")
        return deepest

    def _region(self, name: str, path: str) -> Region | None:
        """The attention region this op belongs to. Forward: the one open in `path`; an eager one
        opens at a QK^T matmul outside any SDPA call and closes at the next (its AV). Backward: the
        region of the node running."""
        nodes = self.tracker.nodes
        if self.tracker.recomputing:  # a checkpointed part's forward again: its attention was recorded once
            return None
        if self.phase != "forward":
            return nodes.current()[1]
        if name in QK_MATMULS and path != OUTSIDE and nodes.region is None:
            nodes.open(Region(path, EAGER))
        region = nodes.region if nodes.region is not None and nodes.region.path == path else None
        nodes.mark(path)
        if region is not None and region.opened_by == EAGER and name in QK_MATMULS:
            region.matmuls += 1
            if region.matmuls == 2:
                nodes.region = None
        return region

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func._overloadpacket)
        path = self._innermost()
        region = self._region(name, path)
        if path == OUTSIDE:
            self.outside[name] += 1
            return out
        module = self.modules.get(path)
        runs = "forward" if self.tracker.recomputing else self.phase  # a recomputation runs forward ops
        category, kinds = classify(name, func, args, kwargs, out, runs, module)
        if category == "ignored":
            self.ignored[(name, IGNORED.get(name, _IGNORED_REASON))] += 1
            if name == "aten.embedding":
                self.lookups.add(path)
            return out
        decomposed = decomposed_kinds(module)
        if decomposed and category in ("pointwise", "unknown"):
            kind = decomposed[0 if runs == "forward" else 1]  # (a recomputation: both in backward)
            _, most = self.decomposed.get((self.phase, path, kind), (kind, 0))
            self.decomposed[(self.phase, path, kind)] = (kind, max(most, _numel(out)))
            return out
        if category == "unknown":
            self.unknown.append(Unknown(self.phase, path, name, _numel(out)))
            kinds = [(f"unknown:{name}", _numel(out))]
        elif category.startswith("fused:"):
            self.fused[self.phase][path][category.partition(":")[2]][kinds[0][0]] += 1
            if region is not None:
                region.fused[kinds[0][0]] += 1
            return out
        for kind, elements in kinds:
            self.pointwise[self.phase][path][kind] += elements
        if region is not None:
            region.pointwise[self.phase].update(dict(kinds))
            if category == "matmul" and func._overloadpacket in flop_registry:
                region.matmul[self.phase] += flop_registry[func._overloadpacket](*args, **kwargs, out_val=out)
        return out

    def finish(self) -> None:
        for (phase, path, _), (kind, elements) in self.decomposed.items():
            self.pointwise[phase][path][kind] += elements
        self.decomposed.clear()


def measure(module: torch.nn.Module, x: torch.Tensor, train: bool, by_node: bool = False) -> Measurement:
    """Run `module(x)` (and, if train, backward of out.float().sum()) under FlopCounterMode and the
    pointwise counter; `by_node`: backward work by the module that created its autograd node
    (`ScopeTracker`)."""
    root = type(module).__name__
    modules = dict(module.named_modules())
    flops: dict[str, dict[str, int]] = {}
    fc = FlopCounterMode(display=False)
    tracker = ScopeTracker(root, by_node)
    fc.mod_tracker = tracker
    with fc:
        counter = PointwiseCounter(tracker, modules, root)
        with counter, SdpaCalls(tracker.nodes, tracker.innermost):
            out = module(x)
            loss = out.float().sum() if train else None
            forward = copy.deepcopy(fc.get_flop_counts())
            if loss is not None and loss.requires_grad:  # a model without parameters has no backward at all
                counter.phase = "backward"
                loss.backward()
        counter.finish()
        everything = fc.get_flop_counts()
    inclusive = {"forward": _totals(forward), "backward": {}}
    if train:  # backward = everything counted minus the forward snapshot
        every = _totals(everything)
        inclusive["backward"] = {k: every[k] - inclusive["forward"].get(k, 0) for k in every}
    problems = list(dict.fromkeys(counter.problems))
    for phase in PASSES:
        flops[phase] = _exclusive(inclusive[phase], root, problems, phase)
    total = {p: inclusive[p].get("Global", 0) for p in PASSES}
    return Measurement(root, flops, total, counter.pointwise, counter.fused, counter.ignored, counter.outside,
                       counter.unknown, problems, [r for r in tracker.nodes.regions if r.complete], counter.lookups)


def _totals(counts: dict) -> dict[str, int]:
    return {key: sum(per_op.values()) for key, per_op in counts.items()}


def _exclusive(inclusive: dict[str, int], root: str, problems: list[str], phase: str) -> dict[str, int]:
    """FlopCounterMode's inclusive per-module counts -> counts of each module path alone."""
    paths = {("" if k == root else k[len(root) + 1:]): v for k, v in inclusive.items() if k != "Global"}
    out = dict(paths)
    for path, value in paths.items():
        parent = _keyed_parent(path, paths)
        if parent is not None:
            out[parent] = out[parent] - value
    if "" in paths:
        out[OUTSIDE] = inclusive.get("Global", 0) - paths[""]
    else:
        out[OUTSIDE] = inclusive.get("Global", 0) - sum(v for p, v in paths.items() if _keyed_parent(p, paths) is None)
    for path, value in out.items():
        if value < 0:
            problems.append(f"{phase}: FlopCounterMode's count for '{path or '(model)'}' is smaller than its "
                            f"submodules' ({value}): module scopes overlapped")
    return {p: v for p, v in out.items() if v}


def _keyed_parent(path: str, keyed: dict) -> str | None:
    if path == "":
        return None
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in keyed:
            return candidate
    return "" if "" in keyed else None

