"""Where backward work belongs, by autograd node, and the attention regions the counters record.

`NodeScopes` tags every autograd node a forward creates with the innermost module path active when
it was created (and the attention `Region` it belongs to). Autograd numbers its nodes in creation
order (`_sequence_nr`), so marking the next number at every scope change and every op records
each node's tag as a span of numbers. In backward, the node running
(`torch._C._current_autograd_node()`) names the module whose forward made it: its work belongs
there, however many sibling modules read the same tensor. The gradient sums the engine runs into
the buffer of a value that several ops read run while the node delivering the last of them is
current: they belong to that reader's module.

`ScopeTracker` is the module tracker both counters attribute with: forward, the innermost module;
backward, by node (validate --against) or by torch's module scopes with costspec's fixes (plain
validate, on the modules costspec generates).

A `Region` is one attention computation in one module: an F.scaled_dot_product_attention call
(`SdpaCalls` marks it; how it ran: decomposed, or a fused kernel), or eager attention (the
module's own QK^T bmm up to its AV bmm), with the work of its ops, forward and backward (the
backward of the nodes created inside it).

torch is imported by this module: import it only where torch is needed.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.autograd.graph import register_multi_grad_hook
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.module_tracker import ModuleTracker

from costspec.core.vocab import FusedRun
from costspec.ops.attention.ran import EAGER, MATH, Ran

OUTSIDE = "(outside the model)"  # no model module active: the loss and its gradient seed
PASSES = ("forward", "backward")
CALL = "call"  # a region opened by an F.scaled_dot_product_attention call
QK_MATMULS = ("aten.bmm", "aten.baddbmm")  # eager attention's QK^T and AV


@dataclass(eq=False)
class Region:
    """One attention computation of the module at `path`, and what its ops ran."""

    path: str
    opened_by: str  # CALL or EAGER
    matmuls: int = 0  # eager: the bmm ops seen (QK^T, then AV closes it)
    matmul: dict[str, int] = field(default_factory=lambda: {p: 0 for p in PASSES})
    pointwise: dict[str, Counter] = field(default_factory=lambda: {p: Counter() for p in PASSES})
    fused: Counter = field(default_factory=Counter)  # FusedRun -> calls of a fused SDPA kernel inside
    mask: str = ""  # the mask a call was given (`ops.attention.ran.Ran.mask`)

    @property
    def how(self) -> str:
        """MATH, EAGER, or the FusedRun of a fused kernel."""
        if self.opened_by == EAGER:
            return EAGER
        if self.fused:
            return FusedRun.UNCOUNTED if self.fused.get(FusedRun.UNCOUNTED) else FusedRun.COUNTED
        return MATH

    @property
    def complete(self) -> bool:
        """An eager region is attention only when its QK^T met its AV (two matmuls)."""
        return self.opened_by == CALL or self.matmuls == 2

    def ran(self) -> Ran:
        return Ran.of(self.how, self.matmul, {p: dict(c) for p, c in self.pointwise.items()}, self.mask)


Tag = tuple[str, "Region | None"]


class NodeScopes:
    """The tag (module path, region) of every autograd node created since it was made."""

    def __init__(self) -> None:
        self.start = torch.autograd._get_sequence_nr()
        self.bounds: list[int] = []  # exclusive upper sequence number of each span
        self.tags: list[Tag] = []
        self.region: Region | None = None  # the region open now (forward)
        self.regions: list[Region] = []
        self.last: Tag = (OUTSIDE, None)

    def mark(self, path: str) -> None:
        """The nodes created since the last mark were created with `path` innermost."""
        n = torch.autograd._get_sequence_nr()
        if n > (self.bounds[-1] if self.bounds else self.start):
            region = self.region if self.region is not None and self.region.path == path else None
            self.bounds.append(n)
            self.tags.append((path, region))

    def open(self, region: Region) -> None:
        self.region = region
        self.regions.append(region)

    def close(self, path: str) -> None:
        """Close the region open in `path` (its module's forward ended, or its AV ran)."""
        if self.region is not None and self.region.path == path:
            self.mark(path)
            self.region = None

    def current(self) -> Tag:
        """Backward: the tag of the node running (the last one's, for nodes made before counting,
        such as AccumulateGrad; OUTSIDE before the first: the gradient seed)."""
        node = torch._C._current_autograd_node()
        if node is None:
            return (OUTSIDE, None)
        seq = node._sequence_nr()
        i = bisect_right(self.bounds, seq) if seq >= self.start else len(self.tags)
        if i < len(self.tags):
            self.last = self.tags[i]
        return self.last


class SdpaCalls(TorchFunctionMode):
    """Opens a region for every F.scaled_dot_product_attention call, in the innermost module."""

    def __init__(self, nodes: NodeScopes, innermost) -> None:
        super().__init__()
        self.nodes, self.innermost = nodes, innermost

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not torch.nn.functional.scaled_dot_product_attention or torch._C._current_graph_task_id() != -1:
            return func(*args, **kwargs)  # (in backward: a recomputation, whose attention was recorded in forward)
        path = self.innermost()
        self.nodes.mark(path)  # nodes made before the call are not in it
        outer = self.nodes.region
        self.nodes.open(Region(path, CALL, mask=_mask(args, kwargs)))
        try:
            return func(*args, **kwargs)
        finally:
            self.nodes.mark(path)
            self.nodes.region = outer


def _mask(args, kwargs) -> str:
    """F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, ...)'s mask."""
    mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
    if kwargs.get("is_causal", args[5] if len(args) > 5 else False):
        return "causal"
    if not isinstance(mask, torch.Tensor):
        return "none"
    if mask.dtype != torch.bool:
        return "float"
    lead = [1, 1, *mask.shape[:-2]][-2:]
    return "bool:" + ("B" if lead[0] > 1 else "1") + ("H" if lead[1] > 1 else "1")


class ScopeTracker(ModuleTracker):
    """torch's ModuleTracker (what FlopCounterMode attributes with), in one of two backward modes.

    `by_node` (validate --against): backward work belongs to the module whose forward created the
    autograd node that runs it (`attribution.NodeScopes`): `parents` is then that module and its
    callers, so sibling modules reading one tensor (a parallel attention and MLP on one LayerNorm
    output) never share a scope and FlopCounterMode's per-module counts nest.

    Otherwise (plain validate, the modules costspec generates), torch's backward scopes, with those
    that torch's opens late or leaves open for the rest of the backward pass (measured: torch 2.13
    notes, §6a) opened and closed where the module's own backward work runs:

    * a module whose inputs need no gradient (the first layer with parameters) leaves its
      backward scope when its parameters' gradients are computed; torch's tracker waits for
      input gradients that never come, and charges every later backward op to it as well;
    * a module that returns its input unchanged (Dropout(p=0), a flatten of one axis) has no
      backward scope; torch's tracker enters one when the output's gradient arrives and never
      leaves it, because the exit hook (on the same tensor) fired first;
    * a value that many modules return or read (T5's position bias: computed in the first layer,
      returned by it and passed through every later one, added to the scores of all of them) has
      its gradient complete only when the last reader's backward ran. A module enters its
      backward scope when the first of its outputs' gradients arrives (torch's waits for all),
      and leaves it when the gradients of the inputs it does not pass through are computed
      (torch's waits for all inputs), so the pass-through value holds no scope open.

    In both modes the autograd nodes are tagged (`nodes`): the attention regions' backward work
    is recorded by node.

    A forward that runs during the backward pass is a checkpointed part's recomputation
    (torch.utils.checkpoint re-runs it when backward first needs its saved tensors): its modules are
    `recomputing`, a stack of their own, and its work belongs to them (as in forward), whatever
    backward scopes are open; the backward scopes are left as they are.
    """

    def __init__(self, root: str = "", by_node: bool = False) -> None:
        super().__init__()
        self.root, self.by_node = root, by_node
        self.nodes = NodeScopes()
        self.called: set[str] = set()  # tracker names of the modules whose forward ran
        self.recomputing: list[str] = []  # tracker names of the modules a recomputation is inside, outer first
        self._chains: dict[str, set[str]] = {}

    @property
    def parents(self) -> set[str]:
        if self.recomputing:  # the recomputed modules and the called ones above them
            outer = self.recomputing[0].split(".")
            above = {n for n in (".".join(outer[:k]) for k in range(1, len(outer))) if n in self.called}
            return {"Global", *above, *self.recomputing}
        if self.by_node and torch._C._current_graph_task_id() != -1:
            return self._chain(self.nodes.current()[0])
        return self._parents

    @parents.setter
    def parents(self, value: set[str]) -> None:
        self._parents = value

    def _chain(self, path: str) -> set[str]:
        """"Global" and the tracker names of `path` and the called modules above it."""
        if path not in self._chains:
            names = {"Global"}
            if path != OUTSIDE:
                parts = path.split(".") if path else []
                names |= {n for n in (".".join([self.root, *parts[:k]]) for k in range(len(parts) + 1))
                          if n in self.called}
            self._chains[path] = names
        return self._chains[path]

    def __enter__(self):
        """torch's hooks, the forward one called even when a module's forward raises: a recomputation that
        PyTorch's early stop ends (an exception inside the modules it runs) leaves their scopes too."""
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._fw_pre_handle = register_module_forward_pre_hook(self._fw_pre_hook)
        self._fw_post_handle = register_module_forward_hook(self._fw_post_hook, always_call=True)
        return self

    def path(self, name: str) -> str:
        return name[len(self.root) + 1:] if name != self.root else ""

    def innermost(self) -> str:
        """Forward: the innermost module path active now (OUTSIDE when none)."""
        names = [n for n in self._parents if n != "Global"]
        if not names:
            return OUTSIDE
        return max((self.path(n) for n in names), key=lambda p: (p.count(".") + 1 if p else 0))

    def _fw_pre_hook(self, mod, input) -> None:
        if torch._C._current_graph_task_id() != -1:  # a checkpointed part's forward, re-run in backward
            self.recomputing.append(self._get_mod_name(mod))
            return
        self.nodes.mark(self.innermost())
        self.called.add(self._get_mod_name(mod))
        self._get_append_fn(self._get_mod_name(mod), False)()  # the input-gradient exit: _fw_post_hook
        if self.by_node:
            return
        args, _ = tree_flatten(input)
        if torch.is_grad_enabled() and not any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            params = [p for p in mod.parameters() if p.requires_grad]
            if params:
                self._hooks.append(register_multi_grad_hook(params, self._get_pop_fn(self._get_mod_name(mod), True)))

    def _fw_post_hook(self, mod, input, output) -> None:
        if self.recomputing:
            self.recomputing.pop()
            return
        name = self._get_mod_name(mod)
        self.nodes.close(self.path(name))  # an eager region left open (one matmul): not attention
        self.nodes.mark(self.innermost())
        self._get_pop_fn(name, False)()
        if self.by_node:
            return
        inputs = [a for a in tree_flatten(input)[0] if isinstance(a, torch.Tensor) and a.requires_grad]
        outputs = [a for a in tree_flatten(output)[0] if isinstance(a, torch.Tensor) and a.requires_grad]
        passed = {id(a) for a in outputs} & {id(a) for a in inputs}
        if outputs and len(passed) == len({id(a) for a in outputs}):  # identity: no backward work of its own
            return
        own = [a for a in inputs if id(a) not in passed] or inputs
        if own:
            self._hooks.append(register_multi_grad_hook(own, self._get_pop_fn(name, True)))
        if outputs:
            self._hooks.append(register_multi_grad_hook(outputs, self._get_append_fn(name, True), mode="any"))
