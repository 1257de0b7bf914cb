"""Modules recognised as one op by what they run (before they are compiled into their layers).

* attention: a module whose code runs one `scaled_dot_product_attention`, with q, k and v each
  projected by an nn.Linear (or split from one fused projection) of the module's input, passed to
  it through views, transposes, the grouped-query expansion of k and v (`repeat_interleave`,
  `expand` + `reshape`) and rotary position embedding (products with constant cos / sin tables,
  rotate-half's slices, neg and cat), and its output projected by an nn.Linear back to the
  module's output. Anything else in the module (a norm, another parameter, an extra input) and it
  is not this pattern: its layers are compiled one by one, and an SDPA there is reported unmapped.
* rmsnorm: a module whose class name ends in RMSNorm (LlamaRMSNorm, ...) with one weight of the
  last dim's size, counted as validate --against counts it (one rmsnorm per element).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torch import nn

from costspec.trace.ir import Extra, Layer, Op
from costspec.trace.leaf import IDENTITY
from costspec.trace.record import CONST, DATA, PARAM, Call, Entry, Scope, Value

if TYPE_CHECKING:
    from costspec.trace.graph import Compiler

SDPA = "scaled_dot_product_attention"
VIEWS = {"view", "reshape", "transpose", "permute", "contiguous", "flatten", "unflatten", "unsqueeze", "squeeze",
         "expand", "repeat_interleave", "to", "float", "type_as", "clone", "getitem", "chunk", "split", "unbind",
         "dropout", "t", "expand_as", "view_as", "reshape_as", "half", "bfloat16"}
ROPE = {"mul", "add", "neg", "cat", "sub", "stack"}


@dataclass
class _Back:
    """What walking back from one SDPA argument found."""

    linears: list[Scope] = field(default_factory=list)
    rope: bool = False
    rope_dims: int | None = None
    negated: int = 0  # elements rotate-half negates (-x2 of [-x2, x1])
    seen: list[Entry] = field(default_factory=list)
    ok: bool = True


def _producer(value: Value, inside: set[int]) -> Entry | None:
    """The entry of the scope's subtree (a leaf module call or a function call) that made `value`."""
    entry = value.producer
    while entry is not None and id(entry) not in inside:
        entry = entry.scope
    return entry


def _back(value: Value, inside: set[int], found: _Back, depth: int = 0) -> None:
    entry = _producer(value, inside)
    if entry is None or depth > 64:
        found.ok = False
        return
    if entry in found.seen:
        return
    found.seen.append(entry)
    if isinstance(entry, Scope):
        if entry.leaf and type(entry.module) is nn.Linear:
            if entry not in found.linears:
                found.linears.append(entry)
            return
        found.ok = False
        return
    assert isinstance(entry, Call)
    if entry.fn == "cat" and all(v.kind == DATA or not math.prod(v.shape) for v in entry.inputs):
        for v in entry.data_inputs:  # a concatenation with empty tensors (a key/value cache's first update)
            _back(v, inside, found, depth + 1)
        return
    if entry.fn in ROPE and not (entry.fn == "cat" and len(entry.data_inputs) < 2):
        consts = [v for v in entry.inputs if v.kind == CONST]
        if entry.fn == "mul" and consts:
            found.rope = True
            size = consts[0].shape[-1] if consts[0].shape else None
            if size and size != value.shape[-1]:
                found.rope_dims = size
        elif entry.fn == "mul" and not consts and len(entry.data_inputs) < 2:
            pass  # a product by a number (a pre-scaled q) is not rotary
        elif entry.fn == "neg":
            found.negated += math.prod(entry.outputs[0].shape)
        for v in entry.data_inputs:
            _back(v, inside, found, depth + 1)
        return
    if entry.fn in VIEWS:
        if any(v.kind == PARAM for v in entry.inputs):
            found.ok = False
            return
        for v in entry.data_inputs:
            _back(v, inside, found, depth + 1)
        return
    found.ok = False


def attention(compiler: "Compiler", scope: Scope, base: str) -> Layer | None:
    """The `attention` op of a module that is one (see the module docstring), else None."""
    if scope.leaf:
        return None
    entries = list(scope.walk())
    cores = [e for e in entries if isinstance(e, Call) and e.fn == SDPA]
    if len(cores) != 1:
        return None
    core = cores[0]
    start = next((v for v in scope.inputs if v.kind == DATA), None)
    outs = [v for v in scope.outputs if v.kind == DATA]
    tensors = [a for a in core.args if isinstance(a, Value)][:3]
    if start is None or not outs or len(tensors) < 3 or any(v.kind != DATA for v in tensors):
        return None
    inside = {id(e) for e in entries}
    q, k, v = (_walk(t, inside) for t in tensors)
    if not (q.ok and k.ok and v.ok) or len(q.linears) != 1 or len(k.linears) != 1 or len(v.linears) != 1:
        return None
    projections = {id(s): s for s in q.linears + k.linears + v.linears}
    if any(s.inputs[0] is not start for s in projections.values()):
        return None  # a projection of another value (cross-attention): not this pattern
    out_proj, after = _forward(core.outputs[0], entries, outs[0])
    if out_proj is None:
        return None
    used = set(map(id, q.seen + k.seen + v.seen + after)) | {id(core), id(out_proj)}
    for entry in entries:
        if id(entry) in used or not entry.data_inputs or (isinstance(entry, Call) and entry.identity):
            continue
        if isinstance(entry, Scope) and not entry.leaf:
            continue  # a container of the projections (their calls are checked themselves)
        return None  # work the attention op does not describe
    linears = list(projections.values()) + [out_proj]
    extra = sum(p.numel() for p in scope.module.parameters()) - sum(_params(s) for s in linears)
    mask = core.kwargs.get("attn_mask", core.args[3] if len(core.args) > 3 else None)
    window = _swin_window(mask, scope, tensors[0], extra, entries) if isinstance(mask, Value) else None
    if isinstance(mask, Value) and window is None:
        return None  # a mask the importer cannot read (its values are not known on meta)
    if extra and window is None:
        return None  # parameters beyond the projections (a q/k norm, a bias table)
    head_dim, heads = tensors[0].shape[-1], tensors[0].shape[-3] if len(tensors[0].shape) >= 3 else 1
    width = start.shape[-1]
    fused = len(projections) == 1
    if fused:
        kv_heads = (q.linears[0].module.out_features // head_dim - heads) // 2
    else:
        kv_heads = k.linears[0].module.out_features // head_dim
    # head_dim and kv_heads are written unless they are what the op derives (C / heads, heads)
    attrs: dict[str, Any] = {"heads": heads, "head_dim": head_dim, "kv_heads": kv_heads}
    implied: dict[str, Any] = {"kv_heads": heads}
    if width % heads == 0:
        implied["head_dim"] = width // heads
    attrs.update(_biases([q.linears[0], k.linears[0], v.linears[0]], out_proj, fused))
    if not fused:
        attrs["fused_qkv"] = False
    causal = core.kwargs.get("is_causal", core.args[5] if len(core.args) > 5 else False)
    if causal:
        attrs["causal"] = True
    if q.rope or k.rope:
        if not (q.rope and k.rope):
            return None
        attrs["rope"] = True
        if q.rope_dims:
            attrs["rope_dims"] = q.rope_dims
    if window is not None:
        attrs.update({"window": window[0], "rel_bias": "swin"})
        if window[1]:
            attrs["shift"] = window[0] // 2
    op = Op(op="attention", attrs=attrs, implied=implied, extra=_rotate_half(q, k))
    if window is not None:
        op.comment = (f"the module sees {window[0]}x{window[0]} windows its caller partitioned: one window per row"
                      + ("; its shift mask is added (the shift itself does not change the cost)" if window[1] else ""))
    scale = core.kwargs.get("scale")
    if scale is not None and not math.isclose(float(scale), head_dim ** -0.5, rel_tol=1e-6):
        op.comment = f"the module scales the scores by {float(scale):g} (the cost is that of any scale)"
    return op


def _swin_window(mask: Value, scope: Scope, q: Value, extra: int, entries: list[Entry]) -> tuple[int, bool] | None:
    """(w, shifted) when the mask is Swin's: a (2w-1)^2 x heads table of parameters gathered into a bias over
    the w*w tokens of a window, plus (shifted windows) a constant mask; else None."""
    tokens, heads = q.shape[-2], q.shape[-3]
    w = math.isqrt(tokens)
    if mask.kind != PARAM or w * w != tokens or extra != (2 * w - 1) ** 2 * heads:
        return None
    tables = [p for p in scope.module.parameters() if tuple(p.shape) in (((2 * w - 1) ** 2, heads),)]
    if len(tables) != 1:
        return None
    shifted = False
    todo, seen = [mask], set()
    while todo:
        value = todo.pop()
        if value.vid in seen or value.producer is None:
            continue
        seen.add(value.vid)
        producer = value.producer
        for v in producer.inputs:
            if v.kind == CONST and math.prod(v.shape) > 1 and v.shape[-2:] == (tokens, tokens):
                shifted = True
            todo.append(v)
    return w, shifted


ROTATE_HALF = ("rotate-half RoPE builds [-x2, x1] with a neg (a multiplication by -1: the `scale` kind) of half of "
               "q and k, forward and backward; the spec's RoPE folds the sign into the sin table")
ROTATE_HALF_BACKWARD = ("rotate-half's backward: the gradients of the two halves it slices from q and k are added "
                        "back into one tensor, one add per element of q and k that the spec's RoPE does not run")


def _rotate_half(q: _Back, k: _Back) -> list[Extra]:
    """What a rotate-half RoPE runs beyond the op's (counted as transformers' runs it, see import hf's llama)."""
    if not (q.rope and k.rope and q.negated and k.negated):
        return []
    return [Extra("scale", None, [q.negated, k.negated], ROTATE_HALF),
            Extra("add", "backward", [2 * q.negated, 2 * k.negated], ROTATE_HALF_BACKWARD)]


def _walk(value: Value, inside: set[int]) -> _Back:
    found = _Back()
    _back(value, inside, found)
    return found


def _params(scope: Scope) -> int:
    return sum(p.numel() for p in scope.module.parameters())


def _biases(qkv: list[Scope], out: Scope, fused: bool) -> dict[str, bool]:
    has = [s.module.bias is not None for s in qkv]
    o = out.module.bias is not None
    attrs: dict[str, bool] = {}
    if len(set(has)) == 1:
        if not has[0]:
            attrs["qkv_bias"] = False
    else:
        attrs.update({name: b for name, b in zip(("q_bias", "k_bias", "v_bias"), has) if not b})
    if not o:
        attrs["proj_bias"] = False
    return attrs


def _forward(value: Value, entries: list[Entry], end: Value) -> tuple[Scope | None, list[Entry]]:
    """From the SDPA output through views to one nn.Linear, then through views to the module's output."""
    consumers: dict[int, list[Entry]] = {}
    for entry in entries:
        for v in entry.inputs:
            consumers.setdefault(v.vid, []).append(entry)
    after: list[Entry] = []
    proj: Scope | None = None
    current = value
    for _ in range(64):
        if current is end and proj is not None:
            return proj, after
        users = [e for e in consumers.get(current.vid, []) if not (isinstance(e, Scope) and not e.leaf)
                 and not (isinstance(e, Call) and e.identity)]
        if len(users) != 1:
            return None, after
        user = users[0]
        if isinstance(user, Scope):
            if proj is not None or type(user.module) is not nn.Linear:
                return None, after
            proj = user
        elif not isinstance(user, Call) or user.fn not in VIEWS or len(user.data_inputs) != 1:
            return None, after
        else:
            after.append(user)
        current = user.outputs[0]
    return None, after


def rmsnorm_by_name(compiler: "Compiler", scope: Scope, base: str) -> Layer | None:
    """A module named *RMSNorm with one weight over the last dim: rmsnorm."""
    if not type(scope.module).__name__.endswith("RMSNorm"):
        return None
    params = list(scope.module.parameters())
    start = next((v for v in scope.inputs if v.kind == DATA), None)
    if start is None or len(params) > 1 or (params and tuple(params[0].shape) != (start.shape[-1],)):
        return None
    return Op(op="rmsnorm", attrs={} if params else {"affine": False})


def patch_embed(compiler: "Compiler", scope: Scope, base: str) -> Layer | None:
    """A module that is ViT's patch embedding: a Conv2d with kernel = stride, its output flattened and
    transposed to tokens, then optionally a learned class token prepended (cat with an expanded [1, 1, C]
    parameter) and a learned [1, S, C] position table added: `patch_embed`."""
    if scope.leaf:
        return None
    entries = [e for e in scope.walk() if e.data_inputs and not (isinstance(e, Scope) and not e.leaf)
               and not (isinstance(e, Call) and (e.identity or e.fn in ("dropout", "contiguous")))
               and not (isinstance(e, Scope) and isinstance(e.module, IDENTITY))]
    convs = [e for e in entries if isinstance(e, Scope) and type(e.module) is nn.Conv2d]
    if len(convs) != 1 or entries[0] is not convs[0]:
        return None
    conv = convs[0].module
    kernel, stride = tuple(conv.kernel_size), tuple(conv.stride)
    if kernel != stride or kernel[0] != kernel[1] or conv.padding not in ((0, 0), 0) or conv.groups != 1 \
            or tuple(conv.dilation) != (1, 1) or conv.padding_mode != "zeros":
        return None
    steps = [e.fn if isinstance(e, Call) else "?" for e in entries[1:]]
    if steps[:2] != ["flatten", "transpose"] or any(s not in ("cat", "add") for s in steps[2:]) or \
            len(steps) != len(set(steps)):
        return None
    flat, swap = entries[1], entries[2]
    if not isinstance(flat, Call) or not isinstance(swap, Call) or len(flat.outputs[0].shape) != 3 or \
            swap.outputs[0].shape != (flat.outputs[0].shape[0], flat.outputs[0].shape[2], flat.outputs[0].shape[1]):
        return None
    attrs: dict[str, Any] = {"patch": kernel[0], "dim": conv.out_channels, "cls_token": "cat" in steps,
                             "pos_embed": "add" in steps, "bias": conv.bias is not None}
    tokens = entries[-1].outputs[0].shape
    expected = sum(p.numel() for p in conv.parameters()) + (tokens[-1] if attrs["cls_token"] else 0) \
        + (tokens[-2] * tokens[-1] if attrs["pos_embed"] else 0)
    if sum(p.numel() for p in scope.module.parameters()) != expected:
        return None
    for entry in entries[3:]:
        params = [v for v in entry.inputs if v.kind == PARAM]
        if len(params) != 1 or len(entry.data_inputs) != 1:
            return None
    return Op(op="patch_embed", attrs=attrs, implied={"cls_token": False, "pos_embed": False, "bias": True})


PATTERNS = [patch_embed, attention, rmsnorm_by_name]
