"""torch.nn modules that map as a whole to one op of the registry (nn.Linear -> linear, ...).

A module maps only when its class's `forward` is torch's own (a subclass that overrides it, such
as a channels-first LayerNorm, is traced into instead). `identity` modules (Dropout in eval mode,
Identity) become no layer. Anything else a table entry cannot describe (a padding mode, ceil_mode,
a LayerNorm over two dims) is a reason, and the module is reported unmapped with it.
"""
from __future__ import annotations

from typing import Any, Callable

from torch import nn

from costspec.trace.ir import Op


class Unmappable(Exception):
    """This module or call has no op: the reason says what the registry cannot describe."""


def pair(value: Any) -> Any:
    """(3, 3) -> 3; (3, 5) -> [3, 5]."""
    if isinstance(value, (tuple, list)):
        values = [int(v) for v in value]
        return values[0] if len(set(values)) == 1 else values
    return int(value)


ACTIVATIONS: dict[type, Callable[[Any], str]] = {
    nn.ReLU: lambda m: "relu", nn.SiLU: lambda m: "silu", nn.Sigmoid: lambda m: "sigmoid",
    nn.Tanh: lambda m: "tanh", nn.GELU: lambda m: "gelu_tanh" if m.approximate == "tanh" else "gelu",
}
IDENTITY = (nn.Identity, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)


def _conv(m: Any, rank: int) -> Op:
    if m.padding_mode != "zeros":
        raise Unmappable(f"padding_mode={m.padding_mode!r} (conv layers pad with zeros)")
    padding = m.padding
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        elif any(d * (k - 1) % 2 for k, d in zip(m.kernel_size, m.dilation)):
            raise Unmappable("padding='same' with an even kernel (torch pads one side more)")
        else:
            padding = tuple(d * (k - 1) // 2 for k, d in zip(m.kernel_size, m.dilation))
    attrs = {"out": m.out_channels, "kernel": pair(m.kernel_size), "stride": pair(m.stride),
             "padding": pair(padding), "dilation": pair(m.dilation), "groups": m.groups,
             "bias": m.bias is not None}
    if isinstance(m, nn.ConvTranspose2d):
        attrs["output_padding"] = pair(m.output_padding)
        return Op(op="conv_transpose2d", attrs=attrs, implied=dict(_DEFAULTS))
    return Op(op=f"conv{rank}d", attrs=attrs, implied=dict(_DEFAULTS))


_DEFAULTS = {"stride": 1, "padding": 0, "dilation": 1, "groups": 1, "output_padding": 0, "bias": True}


def _pool(m: nn.Module, op: str, shapes: tuple[tuple, tuple]) -> Op:
    (x, out) = shapes
    if getattr(m, "ceil_mode", False):
        if op == "avg_pool2d" and out[2:] == (1, 1) and pair(m.padding) == 0 and all(
                k >= n for k, n in zip(_two(m.kernel_size), x[2:])):
            return Op(op="adaptive_avg_pool2d", attrs={"size": 1},
                      comment=f"AvgPool2d({m.kernel_size}, ceil_mode=True): one window over the whole input")
        raise Unmappable("ceil_mode=True (pooling ops round the output size down)")
    if pair(getattr(m, "dilation", 1)) != 1:
        raise Unmappable("a dilated pooling window")
    stride = m.stride if m.stride is not None else m.kernel_size
    return pool_op(op, m.kernel_size, stride, m.padding)


def _two(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


def _adaptive_1d(m: nn.AdaptiveAvgPool1d) -> Op:
    if pair(m.output_size) != 1:
        raise Unmappable(f"AdaptiveAvgPool1d to {m.output_size} (only to 1: a mean over the last axis)")
    return Op(op="mean", attrs={"axes": [-1], "keepdim": True}, comment="AdaptiveAvgPool1d(1)")


def pool_op(op: str, kernel, stride, padding) -> Op:
    """A pooling op: stride left out when it is the kernel, padding when 0."""
    kernel = pair(kernel)
    return Op(op=op, attrs={"kernel": kernel, "stride": pair(stride), "padding": pair(padding)},
              implied={"stride": kernel, "padding": 0})


def _layernorm(m: nn.LayerNorm) -> Op:
    if len(m.normalized_shape) != 1:
        raise Unmappable(f"LayerNorm over {len(m.normalized_shape)} dims (layernorm normalises the last one)")
    attrs: dict[str, Any] = {}
    if not m.elementwise_affine:
        attrs["affine"] = False
    elif m.bias is None:
        attrs["bias"] = False
    return Op(op="layernorm", attrs=attrs)


def _batchnorm(m: nn.modules.batchnorm._BatchNorm) -> Op:
    frozen = not m.training and m.track_running_stats
    attrs: dict[str, Any] = {"mode": "eval" if frozen else "train"}
    if not m.affine:
        attrs["affine"] = False
    return Op(op="batchnorm", attrs=attrs)


def _upsample(m: nn.Upsample) -> Op:
    return upsample_op(m.size, m.scale_factor, m.mode, m.align_corners)


def upsample_op(size, scale, mode: str, align_corners) -> Op:
    if mode not in ("nearest", "bilinear") or (mode == "bilinear" and align_corners):
        raise Unmappable(f"interpolation mode {mode!r}" + (" with align_corners" if align_corners else "")
                         + " (upsample: nearest, or bilinear without align_corners)")
    if size is not None:
        return Op(op="upsample", attrs={"mode": mode, "size": pair(size)})
    factors = set(scale) if isinstance(scale, (tuple, list)) else {scale}
    if len(factors) != 1 or float(next(iter(factors))) != int(next(iter(factors))):
        raise Unmappable(f"scale factor {scale} (upsample scales both sides by one integer)")
    return Op(op="upsample", attrs={"mode": mode, "scale": int(next(iter(factors)))})


LEAVES: dict[type, Callable[..., Op | None]] = {
    nn.Linear: lambda m: Op(op="linear", attrs={"out": m.out_features, "bias": m.bias is not None},
                            implied={"bias": True}),
    nn.Conv1d: lambda m: _conv(m, 1), nn.Conv2d: lambda m: _conv(m, 2), nn.Conv3d: lambda m: _conv(m, 3),
    nn.ConvTranspose2d: lambda m: _conv(m, 2),
    nn.BatchNorm1d: _batchnorm, nn.BatchNorm2d: _batchnorm, nn.BatchNorm3d: _batchnorm,
    nn.LayerNorm: _layernorm,
    nn.RMSNorm: lambda m: Op(op="rmsnorm", attrs={} if m.elementwise_affine else {"affine": False}),
    nn.GroupNorm: lambda m: Op(op="groupnorm", attrs={"groups": m.num_groups,
                                                      **({} if m.affine else {"affine": False})}),
    nn.Embedding: lambda m: Op(op="embedding", attrs={"vocab": m.num_embeddings, "dim": m.embedding_dim}),
    nn.Softmax: lambda m: Op(op="softmax", attrs={"axis": -1 if m.dim is None else m.dim}),
    nn.MaxPool1d: lambda m, s: _pool(m, "max_pool1d", s), nn.MaxPool2d: lambda m, s: _pool(m, "max_pool2d", s),
    nn.AvgPool1d: lambda m, s: _pool(m, "avg_pool1d", s), nn.AvgPool2d: lambda m, s: _pool(m, "avg_pool2d", s),
    nn.AdaptiveAvgPool1d: _adaptive_1d,
    nn.AdaptiveAvgPool2d: lambda m: Op(op="adaptive_avg_pool2d", attrs={"size": pair(m.output_size)}),
    nn.Flatten: lambda m: Op(op="flatten", attrs={"start": m.start_dim, "end": m.end_dim}),
    nn.Upsample: _upsample,
    nn.ZeroPad2d: lambda m: Op(op="pad", attrs={"pads": list(m.padding)}),
    nn.ConstantPad2d: lambda m: Op(op="pad", attrs={"pads": list(m.padding), "value": float(m.value)}),
    **{cls: (lambda m: None) for cls in IDENTITY},
    **{cls: (lambda m, fn=fn: Op(op="activation", attrs={"fn": fn(m)})) for cls, fn in ACTIVATIONS.items()},
}
# modules torch implements in C++ or with parameters only their own forward uses: traced as one call even
# when no table entry maps them, so that they are reported as one unmapped module
OPAQUE = (nn.MultiheadAttention, nn.RNNBase, nn.Transformer, nn.TransformerEncoderLayer,
          nn.TransformerDecoderLayer)


_SHAPED = (nn.MaxPool1d, nn.MaxPool2d, nn.AvgPool1d, nn.AvgPool2d)  # entries that read the call's shapes


def table_entry(module: nn.Module) -> Callable[..., Op | None] | None:
    """The table's mapping for `module`, if its class (or a base class it inherits `forward` from) has one."""
    for cls in type(module).__mro__:
        if cls in LEAVES:
            return LEAVES[cls] if type(module).forward is getattr(cls, "forward", None) else None
    return None


def is_leaf(module: nn.Module) -> bool:
    """Recorded as one call: a table entry applies, or torch implements it as a whole (OPAQUE)."""
    return table_entry(module) is not None or isinstance(module, OPAQUE)


def map_leaf(module: nn.Module, shapes: tuple[tuple, tuple]) -> Op | None:
    """The op of a leaf module called on an input of shape shapes[0] giving shapes[1] (None: an identity,
    no layer); Unmappable when the table has none."""
    entry = table_entry(module)
    if entry is None:
        raise Unmappable(f"{type(module).__name__} (no op of the registry describes it)")
    return entry(module, shapes) if isinstance(module, _SHAPED) else entry(module)
