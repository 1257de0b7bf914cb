"""Model tree -> torch nn.Module whose submodule paths are the spec's dotted layer names.

Each op builds its own module (`OpDef.build`); this file only assembles them: a scope becomes a
`Scope` with the scope's layers as children under their local names, a repeat an
`nn.ModuleList` (instance i built from the body of the variant group holding i), a residual a
fork / body / add sequence inside its scope. No cost formulas live here.

Module paths map back to report rows by dropping the repeat index, or replacing it by the group:
`blocks.2.attn.qkv` -> `blocks.attn.qkv`, or `blocks[global].attn.qkv` for a repeat with variants.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import sympy

from costspec.core.errors import MissingExtraError, SpecError, UsageError
from costspec.core.expr import evaluator
from costspec.core.results import Column, Result, Row, Table
from costspec.tree.nodes import Node, OpNode, ParallelNode, RepeatNode, ResidualNode, ScopeNode
from costspec.tree.walk import group_of, row_name

if TYPE_CHECKING:

    from costspec.tree.network import Network


def import_torch(purpose: str):
    """torch, or a MissingExtraError naming the extra to install."""
    try:
        import torch
    except ImportError:
        raise MissingExtraError("torch", "torch", purpose) from None
    return torch


TORCH_DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def configure_dtype(torch, dtype: str):
    """The torch dtype for a costspec dtype; fp32 disables TF32, tf32 enables it (matmul and cuDNN)."""
    if dtype not in TORCH_DTYPES:
        raise ValueError(f"dtype {dtype!r} cannot be run; one of {', '.join(TORCH_DTYPES)}")
    tf32 = dtype == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    return getattr(torch, TORCH_DTYPES[dtype])


def build_module(model: "Network", values: Mapping[sympy.Symbol, sympy.Integer]):
    """(nn.Module, make_input) for `model` at bound dims `values`.

    Parameters are created on torch's current default device (wrap the call in
    `with torch.device("meta"):` for shape-only runs). `make_input(device, dtype)` returns a
    tensor of the spec's input shape (random on real devices), with requires_grad False.
    """
    from costspec.runtime.torch_budget import check_torch_build

    check_torch_build(model, values)
    torch = import_torch("building a torch module from a spec")
    from costspec.runtime.containers import CostspecModel

    ev = evaluator(values)
    shape = tuple(ev(d) for d in model.in_shape)
    root = CostspecModel(model.name, shape)
    built: list[tuple[OpNode, object]] = []
    root.steps = _fill(root, model.root.children, ev, built)
    _tie(built)
    for i, (node, module) in enumerate(built):  # values shared with an earlier layer (OpDef.link)
        node.op.link(node.call, module, built[:i])
    first = next(model.op_nodes(), None)
    for name, ref in model.root.inputs.items():
        size = tuple(ev(d) for d in ref.shape)
        reader = next((n for n in model.op_nodes() if n.input_from is ref), None)
        device = torch.get_default_device()
        value = reader.op.example_input(reader.call, size, ev, device, torch.get_default_dtype()) if reader else None
        root.add_input(name, torch.randn(size) if value is None else value)

    def make_input(device="cpu", dtype=None) -> Any:
        """An input of the spec's shape (no grad), random unless on meta: float, or what the first
        layer's op asks for (an embedding: int64 token ids in range)."""
        dtype = dtype or torch.get_default_dtype()
        x = first.op.example_input(first.call, shape, ev, device, dtype) if first is not None else None
        return torch.randn(shape, device=device, dtype=dtype) if x is None else x

    return root, make_input


def _tie(built: list) -> None:
    """Share weights the ops ask for (`OpDef.tied_to`): each such layer uses the weight of the one untied
    layer of the named op kind in the model (an lm_head tied to the embedding; a decoder's embedding
    tied to the encoder's), which must come before it (autograd adds the shared gradients in that order)."""
    for index, (node, module) in enumerate(built):
        kind = node.op.tied_to(node.call)
        if kind is None:
            continue
        # a layer in a repeat: one per instance; a tied layer of the kind shares, it does not own
        instances = [(i, n, m) for i, (n, m) in enumerate(built) if n.op.name == kind and n.op.tied_to(n.call) is None]
        if len(instances) != 1:
            found = "none" if not instances else f"{len(instances)} instances"
            raise SpecError(f"{node.op.name} '{node.name}' is tied to the model's {kind} layer, but the model has "
                            f"{found}", node.call.attrs.where("tied"),
                            f"exactly one untied {kind} layer (outside any repeat)")
        (at, source_node, source), = instances
        if at > index:
            raise SpecError(f"{node.op.name} '{node.name}' is tied to {kind} '{source_node.name}', which comes after "
                            "it", node.call.attrs.where("tied"), f"the untied {kind} layer before those tied to it")
        theirs, ours = tuple(source.weight.shape), tuple(module.weight.shape)
        if theirs != ours:
            raise SpecError(f"{node.op.name} '{node.name}' needs a weight of shape {list(ours)} to tie to "
                            f"{kind} '{source_node.name}', whose table is {list(theirs)}",
                            node.call.attrs.where("tied"), f"the same vocab and dim as the {kind}")
        node.op.tie(node.call, module, source)


def _fill(container, nodes, ev, built: list) -> tuple:
    """Add the modules of `nodes` to `container` under their local names; return the steps. Every op
    module is appended to `built` with its node."""
    from torch import nn

    from costspec.runtime.containers import Call, Load, Parallel, Repeat, Residual, Scope, Store

    steps: list[object] = []
    for node in nodes:
        if node.input_from is not None:
            steps.append(Load(node.input_from.name))
        if isinstance(node, ResidualNode):
            *body, add = node.children
            assert isinstance(add, OpNode)  # the residual's closing add
            body_steps = _fill(container, body, ev, built)
            _add_child(container, add, _op_module(add, ev, built))
            steps.append(Residual(add.local, body_steps))
        elif isinstance(node, ParallelNode):
            *branches, join = node.children
            assert isinstance(join, OpNode)  # the join that closes the branches
            branch_steps = tuple(_fill(container, branch.children, ev, built) for branch in branches)
            _add_child(container, join, _op_module(join, ev, built))
            steps.append(Parallel(join.local, branch_steps))
        elif isinstance(node, ScopeNode) and node.transparent:  # an unnamed sequence
            steps.extend(_fill(container, node.children, ev, built))
        elif isinstance(node, RepeatNode):
            instances = nn.ModuleList()
            for i in range(ev(node.times)):
                instance = Scope()
                instance.steps = _fill(instance, group_of(node, i).children, ev, built)
                instance.checkpointed = node.checkpoint and i % node.checkpoint_every == 0
                instances.append(instance)
            _add_child(container, node, instances)
            steps.append(Repeat(node.local))
        elif isinstance(node, OpNode):
            _add_child(container, node, _op_module(node, ev, built))
            steps.append(Call(node.local, node.reads))
        else:  # a named scope (sequence, block use)
            scope = Scope()
            scope.steps = _fill(scope, node.children, ev, built)
            scope.checkpointed = node.checkpoint
            _add_child(container, node, scope)
            steps.append(Call(node.local))
        if node.saves is not None:
            steps.append(Store(node.saves, node.value is None or node.value.continued))
    return tuple(steps)


def _op_module(node: OpNode, ev, built: list):
    from torch import nn

    module = node.op.build(node.call, ev)
    built.append((node, module))
    for part in node.fwd_parts:  # parts that are not `own` are submodules of the same name
        if part.name and not part.own and not isinstance(getattr(module, part.name, None), nn.Module):
            raise AssertionError(f"{node.op.name}.build() has no submodule '{part.name}' for its part")
    if node.frozen_params != 0:
        _freeze_weight_matrices(node, module, ev)
    if node.precision.lora:
        module = _with_lora_adapters(node, module)
    return module


def _with_lora_adapters(node: OpNode, module):
    """PEFT's LoRA on each weight GEMM of the layer: the nn.Linear that runs it wrapped as
    base(x) + lora_B(lora_A(x)) * scaling (`costspec.nn.lora.LoraLinear`). A weight GEMM run by another module
    (experts, convs, per-head batched projections) gets no adapter: the spec is refused here."""
    from torch import nn

    from costspec.nn.lora import LoraLinear

    r = node.precision.lora
    assert r is not None
    own = {p.name for p in node.fwd_parts if p.own or not p.name}
    for part, gemms in node.weight_gemms.items():
        holder = module if part in own else getattr(module, part)
        if type(holder) is not nn.Linear or len(gemms) != 1:
            raise UsageError(f"{node.op.name} '{node.name}': costspec builds LoRA adapters on nn.Linear layers only, "
                             f"and its part {part or node.op.name!r} runs a {type(holder).__name__}; eval, formula "
                             "and memory count its adapters (docs/conventions.md#lora-adapters)")
        wrapped = LoraLinear(holder, r)
        if holder is module:
            return wrapped
        setattr(module, part, wrapped)
    return module


def _freeze_weight_matrices(node: OpNode, module, ev) -> None:
    """A quantised or LoRA-adapted layer's weight matrices get no gradient (`requires_grad_(False)`): the
    matrices (2 dims or more) of the parts whose weight GEMMs the precision freezes; their count must be
    the spec's frozen parameters. The module runs them at the compute dtype (no dequantisation: `validate`
    names it, runtime/reconcile.py)."""
    own = {p.name for p in node.fwd_parts if p.own or not p.name}
    frozen = 0
    for part in node.weight_gemms:
        holder = module if part in own else getattr(module, part)
        params = holder.parameters(recurse=holder is not module or not node.children)
        for param in params:
            if param.dim() >= 2 and param.requires_grad:
                param.requires_grad_(False)
                frozen += param.numel()
    if frozen != ev(node.frozen_params):
        raise AssertionError(f"{node.op.name} '{node.name}': froze {frozen} weight values, the spec's frozen "
                             f"parameters are {ev(node.frozen_params)}")


def _add_child(container, node: Node, module) -> None:
    if node.local in container._modules or hasattr(container, node.local):
        raise SpecError(f"layer name '{node.local}' clashes with an attribute of torch's nn.Module", node.loc,
                        "another name for this layer")
    container.add_module(node.local, module)


def row_names(model: "Network", module) -> dict[str, str]:
    """torch module path -> row name, for every submodule of a module built from `model`."""
    return {path: row_name(model.root, path) for path, _ in module.named_modules()}


def describe(module, max_depth: int | None = None) -> Result:
    """The module tree as the one result type: a row per submodule with its class and parameter count
    (all parameters below it, and its own where they differ)."""
    rows = []
    for path, sub in module.named_modules():
        depth = path.count(".") + 1 if path else 0
        if max_depth is not None and depth > max_depth:
            continue
        own = sum(p.numel() for p in sub.parameters(recurse=False))
        total = sum(p.numel() for p in sub.parameters())
        extra = sub.extra_repr()
        rows.append(Row(path, path.rsplit(".", 1)[-1] if path else "(model)", depth, {
            "type": type(sub).__name__ + (f"({extra})" if extra else ""), "params": total,
            "own_params": own if own != total else None}))
    columns = [Column("type", "type", "text"), Column("params", "params"), Column("own_params", "own")]
    return Result("", [Table(columns, rows, label_title="module")])
