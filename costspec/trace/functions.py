"""Torch functions and tensor methods the model's own code calls, mapped to ops of the registry.

`map_call(call, index)` gives the layers that compute output `index` of `call` from its one data
input: [] for what costs nothing and changes no shape (dropout in eval mode, `.contiguous()`,
dtype casts), the op otherwise. Parameters read by the call make it the op that holds them (`x *
gamma`: layer_scale, `x + table`: position_embedding, `cat([cls.expand(...), x])`: cls_token).
Joins of two data values (add, mul, cat) are the structure's (`graph`); anything else raises
`Unmappable` with what the registry lacks.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch

from costspec.trace.ir import Op
from costspec.trace.leaf import Unmappable, pair, pool_op, upsample_op
from costspec.trace.record import DATA, PARAM, Call, Value

ACTIVATION_FNS = {"relu": "relu", "silu": "silu", "sigmoid": "sigmoid", "tanh": "tanh"}
NOTHING = {"contiguous", "clone", "float", "half", "bfloat16", "double", "to", "type", "type_as", "dropout",
           "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "requires_grad_",
           "cpu", "cuda",
           "roll", "flip"}  # a cyclic shift or reversal moves data (aten.roll / aten.flip: no arithmetic)
FREE_OPS = {"reshape", "flatten", "transpose", "permute", "slice", "take_token", "chunk", "split", "pad"}
JOINS = {"add", "mul", "cat"}


def _arg(call: Call, index: int, name: str, default: Any = None) -> Any:
    if name in call.kwargs:
        return call.kwargs[name]
    return call.args[index] if len(call.args) > index else default


def _data(call: Call) -> Value:
    return call.data_inputs[0]


def _axis(axis: int, rank: int) -> int:
    return axis - rank if axis >= 0 else axis


def _reshape(call: Call, index: int) -> list[Op]:
    """A view to another shape: flatten when it merges consecutive axes, else reshape."""
    x, out = _data(call).shape, call.outputs[index].shape
    if out == x:
        return []
    for start in range(len(x)):
        for end in range(start + 1, len(x)):
            merged = x[:start] + (math.prod(x[start:end + 1]),) + x[end + 1:]
            if merged == out:
                return [Op(op="flatten", attrs={"start": start, "end": _axis(end, len(x))})]
    return [Op(op="reshape", attrs={"shape": list(out)})]


def _transpose(call: Call, index: int) -> list[Op]:
    if call.fn in ("t", "t_"):
        a, b = 0, 1
    else:
        a, b = _arg(call, 1, "dim0"), _arg(call, 2, "dim1")
    rank = len(_data(call).shape)
    a, b = a % rank, b % rank
    return [Op(op="transpose", attrs={"axis0": min(a, b), "axis1": max(a, b)})]


def _permute(call: Call, index: int) -> list[Op]:
    dims = call.args[1:] if len(call.args) > 2 or not isinstance(_arg(call, 1, "dims"), (tuple, list)) \
        else _arg(call, 1, "dims")
    rank = len(_data(call).shape)
    order = [int(d) % rank for d in dims]
    return [] if order == list(range(rank)) else [Op(op="permute", attrs={"order": order})]


def _mean(call: Call, index: int) -> list[Op]:
    dims = _arg(call, 1, "dim")
    if dims is None:
        raise Unmappable("a mean over every element (mean reduces chosen axes)")
    rank = len(_data(call).shape)
    axes = [int(d) % rank for d in (dims if isinstance(dims, (tuple, list)) else [dims])]
    keep = bool(_arg(call, 2, "keepdim", False))
    return [Op(op="mean", attrs={"axes": sorted(axes), **({"keepdim": True} if keep else {})})]


def _softmax(call: Call, index: int) -> list[Op]:
    axis = _arg(call, 1, "dim")
    rank = len(_data(call).shape)
    return [Op(op="softmax", attrs={} if axis is None or axis % rank == rank - 1 else {"axis": axis % rank})]


def _activation(call: Call, index: int) -> list[Op]:
    if call.fn == "gelu":
        approximate = _arg(call, 1, "approximate", "none")
        return [Op(op="activation", attrs={"fn": "gelu_tanh" if approximate == "tanh" else "gelu"})]
    return [Op(op="activation", attrs={"fn": ACTIVATION_FNS[call.fn]})]


def _getitem(call: Call, index: int) -> list[Op]:
    """x[...] with integers, slices (step 1) and None: slices, then a reshape for the dropped / new axes."""
    key = call.args[1]
    key = key if isinstance(key, tuple) else (key,)
    shape = _data(call).shape
    if any(isinstance(k, Value) or isinstance(k, (list, torch.Tensor)) for k in key):
        raise Unmappable("indexing with a tensor or list (a gather)")
    if key.count(Ellipsis) > 1:
        raise Unmappable("an index with two ellipses")
    if Ellipsis in key:
        at = key.index(Ellipsis)
        used = sum(1 for k in key if k is not None and k is not Ellipsis)
        key = key[:at] + (slice(None),) * (len(shape) - used) + key[at + 1:]
    ops: list[Op] = []
    axis = 0
    for k in key:
        if k is None:
            continue
        size = shape[axis]
        if isinstance(k, int):
            start = k % size
            if len(shape) == 3 and axis == 1 and all(isinstance(j, slice) and j == slice(None) for j in key[:1]):
                ops.append(Op(op="take_token", attrs={"index": k} if k else {}))
                return ops + _reshape_to(call, index, ops)
            ops.append(Op(op="slice", attrs={"axis": axis, "start": start, "end": start + 1}))
        elif isinstance(k, slice):
            start, stop, step = k.indices(size)
            if step != 1:
                raise Unmappable(f"a strided slice (step {step}) of axis {axis}")
            if (start, stop) != (0, size):
                ops.append(Op(op="slice", attrs={"axis": axis, **({"start": start} if start else {}), "end": stop}))
        else:
            raise Unmappable(f"an index {k!r}")
        axis += 1
    return ops + _reshape_to(call, index, ops)


def _reshape_to(call: Call, index: int, ops: list[Op]) -> list[Op]:
    """A reshape to the call's output shape where the sliced shape differs from it (dropped or new axes)."""
    shape = list(_data(call).shape)
    for op in ops:
        if op.op == "slice":
            shape[op.attrs["axis"]] = op.attrs["end"] - op.attrs.get("start", 0)
        elif op.op == "take_token":
            shape = shape[:1] + shape[2:]
    out = list(call.outputs[index].shape)
    return [] if shape == out else [Op(op="reshape", attrs={"shape": out})]


def _chunk(call: Call, index: int) -> list[Op]:
    chunks, axis = _arg(call, 1, "chunks"), _arg(call, 2, "dim", 0)
    rank = len(_data(call).shape)
    return [Op(op="chunk", attrs={"chunks": int(chunks), "index": index, "axis": _axis(int(axis) % rank, rank)})]


def _split(call: Call, index: int) -> list[Op]:
    axis = int(_arg(call, 2, "dim", 0)) % len(_data(call).shape)
    sizes = [o.shape[axis] for o in call.outputs]
    return [Op(op="split", attrs={"sizes": sizes, "index": index, "axis": _axis(axis, len(_data(call).shape))})]


def _pad(call: Call, index: int) -> list[Op]:
    mode = _arg(call, 2, "mode", "constant")
    if mode != "constant":
        raise Unmappable(f"padding mode {mode!r} (pad fills with a constant)")
    value = _arg(call, 3, "value", None)
    return [Op(op="pad", attrs={"pads": [int(p) for p in _arg(call, 1, "pad")],
                                **({"value": float(value)} if value else {})})]


def _interpolate(call: Call, index: int) -> list[Op]:
    return [upsample_op(_arg(call, 1, "size"), _arg(call, 2, "scale_factor"), _arg(call, 3, "mode", "nearest"),
                        _arg(call, 4, "align_corners"))]


def _pool(op: str) -> Callable[[Call, int], list[Op]]:
    def pool(call: Call, index: int) -> list[Op]:
        if _arg(call, 5 if op.startswith("max") else 4, "ceil_mode", False):
            raise Unmappable("ceil_mode=True (pooling ops round the output size down)")
        kernel = _arg(call, 1, "kernel_size")
        return [pool_op(op, kernel, _arg(call, 2, "stride") or kernel, _arg(call, 3, "padding", 0))]
    return pool


def _param(call: Call) -> Value | None:
    return next((v for v in call.inputs if v.kind == PARAM), None)


def _scalar(call: Call) -> float | None:
    other = [a for a in call.args[:2] if not isinstance(a, Value)]
    return float(other[0]) if other and isinstance(other[0], (int, float)) and not isinstance(other[0], bool) \
        else None


def _scale(call: Call, index: int) -> list[Op]:
    """x * c, x / c, -x: a scale by a constant; x * gamma (a parameter): layer_scale; x + table: position_embedding."""
    if call.fn == "neg":
        return [Op(op="scale", attrs={"by": -1})]
    param = _param(call)
    x = _data(call)
    if param is not None and call.fn == "mul":
        return [_layer_scale(param, x)]
    if param is not None and call.fn == "add":
        return [_position_table(param, x)]
    value = _scalar(call)
    if value is None:
        other = [v for v in call.inputs if v is not x]
        raise Unmappable(f"{call.fn} of the data with a " + ("constant tensor" if other else "value")
                         + (f" of shape {list(other[0].shape)}" if other else ""))
    if call.fn == "mul":
        return [Op(op="scale", attrs={"by": _number(value)})]
    if call.fn == "div" and call.args and isinstance(call.args[0], Value):
        return [Op(op="scale", attrs={"by": _number(1 / value)})]
    raise Unmappable(f"{call.fn} with the constant {value} (scale multiplies; no op adds a constant)")


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def _layer_scale(param: Value, x: Value) -> Op:
    numel = math.prod(param.shape)
    rank = len(x.shape)
    padded = (1,) * (rank - len(param.shape)) + tuple(param.shape)
    axes = [i for i, n in enumerate(padded) if n != 1]
    if len(padded) != rank or len(axes) != 1 or padded[axes[0]] != x.shape[axes[0]] or numel != x.shape[axes[0]]:
        raise Unmappable(f"a product with a parameter of shape {list(param.shape)} (layer_scale scales one axis)")
    axis = _axis(axes[0], rank)
    return Op(op="layer_scale", attrs={} if axis == -1 else {"axis": axis})


def _position_table(param: Value, x: Value) -> Op:
    shape = tuple(n for n in param.shape)
    if len(x.shape) == 3 and shape in ((1, x.shape[1], x.shape[2]), (x.shape[1], x.shape[2])):
        return Op(op="position_embedding", attrs={"length": x.shape[1]})
    raise Unmappable(f"a sum with a parameter of shape {list(param.shape)} (position_embedding adds a "
                     "[S, C] table to [B, S, C] tokens)")


def _cls_token(call: Call, index: int) -> list[Op]:
    """cat([token.expand(B, -1, -1), x], dim=1) with a learned [1, 1, C] token: cls_token. A
    concatenation with empty tensors only (a key/value cache's first update) is no layer."""
    if all(v.kind == DATA or not math.prod(v.shape) for v in call.inputs):
        return []
    tensors = call.args[0] if call.args else call.kwargs.get("tensors")
    axis = int(_arg(call, 1, "dim", 0))
    x = _data(call)
    if (isinstance(tensors, (list, tuple)) and len(tensors) == 2 and tensors[1] is x and tensors[0].kind == PARAM
            and len(x.shape) == 3 and axis % 3 == 1 and tensors[0].shape[1] == 1):
        return [Op(op="cls_token", attrs={})]
    raise Unmappable("a concatenation with a parameter or constant (cls_token prepends one learned token)")


def _functional(op: str, build: Callable[[Call], dict]) -> Callable[[Call, int], list[Op]]:
    def mapped(call: Call, index: int) -> list[Op]:
        return [Op(op=op, attrs=build(call))]
    return mapped


def _layer_norm(call: Call) -> dict:
    if len(_arg(call, 1, "normalized_shape")) != 1:
        raise Unmappable("layer_norm over more than the last dim")
    weight, bias = _arg(call, 2, "weight"), _arg(call, 3, "bias")
    return {} if weight is not None and bias is not None else {"bias": False} if weight is not None \
        else {"affine": False}


def _linear(call: Call) -> dict:
    weight, bias = _arg(call, 1, "weight"), _arg(call, 2, "bias")
    if not isinstance(weight, Value) or weight.kind != PARAM:
        raise Unmappable("linear with a weight that is not a parameter")
    return {"out": weight.shape[0], "bias": bias is not None}


HANDLERS: dict[str, Callable[[Call, int], list[Op]]] = {
    **{name: (lambda call, index: []) for name in NOTHING},
    **{name: _reshape for name in ("view", "reshape", "flatten", "unsqueeze", "squeeze", "unflatten",
                                   "view_as", "reshape_as", "expand_dims")},
    "transpose": _transpose, "t": _transpose, "swapaxes": _transpose, "permute": _permute, "mean": _mean,
    "softmax": _softmax, "getitem": _getitem, "chunk": _chunk, "split": _split, "pad": _pad,
    "interpolate": _interpolate, "upsample": _interpolate,
    "max_pool1d": _pool("max_pool1d"), "max_pool2d": _pool("max_pool2d"),
    "avg_pool1d": _pool("avg_pool1d"), "avg_pool2d": _pool("avg_pool2d"),
    "adaptive_avg_pool2d": _functional("adaptive_avg_pool2d", lambda c: {"size": pair(_arg(c, 1, "output_size"))}),
    "relu": _activation, "silu": _activation, "sigmoid": _activation, "tanh": _activation, "gelu": _activation,
    "mul": _scale, "div": _scale, "neg": _scale, "add": _scale, "cat": _cls_token,
    "layer_norm": _functional("layernorm", _layer_norm),
    "rms_norm": _functional("rmsnorm", lambda c: {} if _arg(c, 2, "weight") is not None else {"affine": False}),
    "linear": lambda call, index: [Op(op="linear", attrs=_linear(call), implied={"bias": True})],
}


def map_call(call: Call, index: int) -> list[Op]:
    """The layers computing output `index` of `call` from its data input (see the module docstring)."""
    if len(call.data_inputs) != 1:
        raise Unmappable(f"{call.fn} of {len(call.data_inputs)} data values")
    handler = HANDLERS.get(call.fn)
    if handler is None:
        raise Unmappable(f"torch function {call.fn!r}" + (f" ({', '.join(call.aten)})" if call.aten else ""))
    if call.fn in ("reshape", "view", "flatten") and call.outputs[index].shape == _data(call).shape:
        return []
    if any(v.kind == DATA for v in call.inputs[1:]) and call.fn not in JOINS:
        raise Unmappable(f"{call.fn} reading the data twice")
    return handler(call, index)
