"""Every registered op against torch: analytic matmul-class FLOPs == FlopCounterMode and pointwise
kinds / element counts == the aten ops executed, forward and backward, on hypothesis-drawn small
shapes and precisions (meta tensors; the named reconciliations of `costspec validate` apply).

Each op has a case: a strategy drawing (dims, input shape, layers) that use it. An op registered
without a case fails `test_every_op_has_a_case`.
"""
from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import costspec  # noqa: E402
from costspec.ops import OPS  # noqa: E402
from costspec.runtime.validate import render_table, validate  # noqa: E402

# Half the active profile's examples per op (conftest's "ci": 20, "long": 1000), reproducible.
SETTINGS = settings(max_examples=max(10, settings.default.max_examples // 2), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
small = st.integers(1, 5)
dtypes = st.sampled_from(["fp32", "tf32", "bf16", "fp16"])
CASES = {}


def case(name):
    def register(fn):
        CASES[name] = fn
        return fn

    return register


def spec_text(dims: dict, shape: list, layers: list, dtype: str) -> str:
    return yaml.safe_dump({"costspec": 1, "name": "case", "dims": dims, "precision": {"dtype": dtype},
                           "input": shape, "layers": layers}, sort_keys=False)


# Cases that flatten an op's output before a linear keep one leading row (`reshape: [1, -1]`): a linear on a
# rank-1 input takes torch's 1-D matmul path, whose bias gradient is reduced with a view or a one-row sum
# depending on the layout (a known gap in costspec's count for rank-1 linear inputs, see the closing notes).


def with_grad(draw, layers: list) -> list:
    """Half the time, a layernorm first: the op's input then requires grad (dX is counted)."""
    return ([{"layernorm": {}}] + layers) if draw(st.booleans()) else layers


@case("linear")
def _linear(draw):
    shape = [draw(small) for _ in range(draw(st.integers(0, 3)))] + [draw(small)]
    return {}, shape, with_grad(draw, [{"linear": {"out": draw(small), "bias": draw(st.booleans())}}])


@case("attention")
def _attention(draw, layout=None):
    heads = draw(st.integers(1, 4))
    kv = draw(st.sampled_from([k for k in range(1, heads + 1) if heads % k == 0]))
    rope = draw(st.booleans())
    head_dim = draw(st.integers(1, 2)) * 2 if rope else draw(st.integers(1, 4))  # rope needs an even head_dim
    c = heads * (head_dim if draw(st.booleans()) else draw(st.integers(1, 3)))  # the op needs heads | C
    attrs = {"heads": heads, "head_dim": head_dim, "fused_qkv": draw(st.booleans()),
             "qkv_bias": draw(st.booleans()), "proj_bias": draw(st.booleans()),
             "backend": draw(st.sampled_from(["flash", "math", "eager"])), "rope": rope}
    if kv != heads or draw(st.booleans()):
        attrs["kv_heads"] = kv  # grouped-query when kv < heads
    if draw(st.booleans()):  # per-projection biases (fused_qkv needs q, k, v to agree)
        qkv = draw(st.booleans())
        attrs.update(q_bias=qkv if attrs["fused_qkv"] else draw(st.booleans()), o_bias=draw(st.booleans()))
        attrs.update(k_bias=attrs["q_bias"] if attrs["fused_qkv"] else draw(st.booleans()))
        attrs.update(v_bias=attrs["q_bias"] if attrs["fused_qkv"] else draw(st.booleans()))
    if rope and draw(st.booleans()):
        attrs["rope_dims"] = draw(st.sampled_from([r for r in range(2, head_dim + 1, 2)]))
    if draw(st.booleans()):
        attrs["scale"] = "none"
    if draw(st.booleans()):  # q/k norms: per head (shared or per-head weights) or over the whole width
        attrs.update(qk_norm=draw(st.sampled_from(["rmsnorm", "layernorm"])),
                     qk_norm_over=draw(st.sampled_from(["head", "all"])))
        if attrs["qk_norm_over"] == "head":
            attrs["qk_norm_weight"] = draw(st.sampled_from(["shared", "per_head"]))
        if attrs["qk_norm"] == "layernorm":
            attrs["qk_norm_bias"] = draw(st.booleans())
    if attrs["backend"] != "math" and draw(st.booleans()):  # PyTorch's SDPA has neither: run eagerly
        attrs.update(softcap=draw(st.sampled_from([0, 5.0, 50.0])), sinks=draw(st.booleans()))
    layout = layout or draw(st.sampled_from(["global", "window", "rel_pos", "window+rel_pos", "causal", "sliding",
                                             "queries", "t5", "t5_causal", "swin", "beit", "shifted", "local",
                                             "cross", "alibi"]))
    grid = [draw(st.integers(1, 4)), draw(st.integers(1, 4))]
    s = grid[0] * grid[1] if layout in ("window", "rel_pos", "window+rel_pos", "swin") else draw(small)
    if "window" in layout:  # windows that do not divide the grid pad it, as SAM does
        attrs.update(window=draw(st.integers(1, 3)) if min(grid) > 1 else 1, grid=grid)
    if "rel_pos" in layout:
        attrs.update(rel_pos=True, grid=grid)
    if layout == "causal":
        attrs.update(causal=True, causal_flops=draw(st.sampled_from(["executed", "useful"])))
    if layout == "sliding":
        attrs.update(causal=True, sliding_window=draw(st.integers(1, 4)),
                     causal_flops=draw(st.sampled_from(["executed", "useful"])))
    if layout == "local":  # ModernBERT's bidirectional band |i - j| <= w // 2
        attrs.update(local_window=draw(st.integers(2, 6)), causal_flops=draw(st.sampled_from(["executed", "useful"])))
    pre = []
    if layout == "cross":  # keys and values from the first t tokens of a saved value (t <= s: causal is top-left)
        t = draw(st.integers(1, s))
        pre = [{"linear": {"out": c}, "save": "src"}, {"slice": {"axis": 1, "start": 0, "end": t}, "save": "enc"},
               {"layernorm": {}, "input": "src"}]
        attrs.update(kv="enc", causal=draw(st.booleans()), causal_flops=draw(st.sampled_from(["executed", "useful"])))
        if not attrs["causal"] and draw(st.booleans()):  # T5's cross-attention: a zero position bias added
            attrs["zero_bias"] = True
    if layout == "alibi":  # BLOOM: a per-head linear bias (the causal mask folded in), no other positions
        attrs.update(alibi=True, causal=draw(st.booleans()), rope=False)
        for key in ("rope_dims", "softcap", "sinks"):
            attrs.pop(key, None)
    if layout == "queries":
        attrs.update(queries=draw(st.integers(1, 3)), rope=False)
        attrs.pop("rope_dims", None)
    if layout == "t5":
        attrs.update(rel_bias="t5", buckets=draw(st.integers(4, 8)), max_distance=draw(st.integers(3, 16)))
    if layout == "t5_causal":  # T5's decoder: one-directional buckets, the bias masked causally
        buckets = draw(st.integers(4, 8))
        attrs.update(rel_bias="t5", causal=True, buckets=buckets, max_distance=draw(st.integers(buckets // 2 + 1, 16)),
                     causal_flops=draw(st.sampled_from(["executed", "useful"])))
    if layout == "swin":
        s = grid[0] * grid[1]
        attrs.update(rel_bias="swin", window=draw(st.integers(1, 3)) if min(grid) > 1 else 1, grid=grid)
    if layout == "beit":  # BEiT: the H x W patch grid after a class token
        s = grid[0] * grid[1] + 1
        attrs.update(rel_bias="beit", grid=grid)
    if layout == "shifted":  # Swin's shifted windows: whole windows, 0 < shift < window
        w = draw(st.integers(2, 3))
        grid = [w * draw(st.integers(1, 2)), w * draw(st.integers(1, 2))]
        s = grid[0] * grid[1]
        attrs.update(window=w, grid=grid, shift=draw(st.integers(1, w - 1)))
        if draw(st.booleans()):
            attrs["rel_bias"] = "swin"
    return {"B": draw(st.integers(1, 3))}, ["B", s, c], (pre or with_grad(draw, [])) + [{"attention": attrs}]


@case("mla")
def _mla(draw):
    heads = draw(st.integers(1, 3))
    attrs = {"heads": heads, "kv_lora_rank": draw(st.integers(1, 6)), "q_lora_rank": draw(st.integers(0, 4)),
             "qk_nope_head_dim": draw(st.integers(1, 3)), "qk_rope_head_dim": 2 * draw(st.integers(1, 2)),
             "v_head_dim": draw(st.integers(1, 3)), "bias": draw(st.booleans()), "causal": draw(st.booleans()),
             "causal_flops": draw(st.sampled_from(["executed", "useful"])), "absorb": draw(st.booleans()),
             "backend": draw(st.sampled_from(["flash", "math", "eager"]))}
    c = draw(st.integers(1, 6))
    return {"B": draw(st.integers(1, 3))}, ["B", draw(small), c], with_grad(draw, [{"mla": attrs}])


def _disentangled(draw):  # DeBERTa: a shared relative-position table, then 1-3 disentangled attention layers
    heads, span, layers = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
    c = heads * draw(st.integers(1, 3))
    attrs = {"heads": heads, "span": span, "share_att_key": draw(st.booleans()), "bias": draw(st.booleans())}
    attrs.update(draw(st.sampled_from([{"c2p": True, "p2c": True}, {"c2p": False}, {"p2c": False}])))
    table = {"rel_embeddings": {"rows": 2 * span + draw(st.integers(0, 2)), "readers": layers,
                                "norm": draw(st.booleans())}}
    body = [{"disentangled_attention": attrs}, {"linear": {"out": c}}]
    return {"B": draw(st.integers(1, 3))}, ["B", draw(small), c], with_grad(draw, [table] + body * layers)


CASES["disentangled_attention"] = _disentangled
CASES["rel_embeddings"] = _disentangled


def _image(draw, channels=None):  # at least 3x3: a 2x2 kernel with dilation 2 spans 3 pixels
    return {"B": draw(st.integers(1, 3))}, ["B", channels or draw(small), draw(st.integers(3, 7)),
                                             draw(st.integers(3, 7))]


@case("conv2d")
def _conv2d(draw):
    dims, shape = _image(draw, draw(st.sampled_from([2, 4, 6])))
    groups = draw(st.sampled_from([g for g in (1, 2, shape[1]) if shape[1] % g == 0]))
    attrs = {"out": groups * draw(st.integers(1, 3)), "kernel": [draw(st.integers(1, 2)), draw(st.integers(1, 2))],
             "stride": draw(st.integers(1, 2)), "padding": draw(st.integers(0, 1)), "dilation": draw(st.integers(1, 2)),
             "groups": groups, "bias": draw(st.booleans())}
    pre = [{"conv2d": {"out": shape[1], "kernel": 1}}] if draw(st.booleans()) else []
    return dims, shape, pre + [{"conv2d": attrs}]


@case("conv1d")
def _conv1d(draw):
    cin = draw(st.sampled_from([2, 4, 6]))
    groups = draw(st.sampled_from([g for g in (1, 2, cin) if cin % g == 0]))
    attrs = {"out": groups * draw(st.integers(1, 3)), "kernel": draw(st.integers(1, 3)),
             "stride": draw(st.integers(1, 2)), "padding": draw(st.integers(0, 1)), "dilation": draw(st.integers(1, 2)),
             "groups": groups, "bias": draw(st.booleans())}
    pre = [{"conv1d": {"out": cin, "kernel": 1}}] if draw(st.booleans()) else []
    return {"B": draw(st.integers(1, 3))}, ["B", cin, draw(st.integers(5, 9))], pre + [{"conv1d": attrs}]


@case("conv3d")
def _conv3d(draw):
    cin = draw(st.sampled_from([2, 4]))
    groups = draw(st.sampled_from([1, 2]))
    attrs = {"out": groups * draw(st.integers(1, 2)), "kernel": [draw(st.integers(1, 2)) for _ in range(3)],
             "stride": draw(st.sampled_from([1, 2, [1, 2, 2]])), "padding": draw(st.integers(0, 1)),
             "groups": groups, "bias": draw(st.booleans())}
    pre = [{"conv3d": {"out": cin, "kernel": 1}}] if draw(st.booleans()) else []
    shape = ["B", cin] + [draw(st.integers(2, 4)) for _ in range(3)]
    return {"B": draw(st.integers(1, 2))}, shape, pre + [{"conv3d": attrs}]


@case("conv_transpose2d")
def _conv_transpose2d(draw):
    dims, shape = _image(draw, draw(st.sampled_from([2, 4])))
    groups = draw(st.sampled_from([1, 2]))
    stride = draw(st.integers(1, 2))
    attrs = {"out": groups * draw(st.integers(1, 3)), "kernel": [draw(st.integers(1, 3)), draw(st.integers(1, 3))],
             "stride": stride, "padding": draw(st.integers(0, 1)), "output_padding": draw(st.integers(0, stride - 1)),
             "groups": groups, "bias": draw(st.booleans())}
    pre = [{"conv2d": {"out": shape[1], "kernel": 1}}] if draw(st.booleans()) else []
    return dims, shape, pre + [{"conv_transpose2d": attrs}]


def _pool(name, spatial):
    def draw_case(draw):
        kernel = [draw(st.integers(1, 3)) for _ in range(spatial)]
        attrs = {"kernel": kernel[0] if spatial == 1 or draw(st.booleans()) else kernel}
        kernel = [kernel[0]] * spatial if not isinstance(attrs["kernel"], list) else kernel
        if draw(st.booleans()):
            attrs["stride"] = draw(st.integers(1, 2))
        attrs["padding"] = draw(st.integers(0, min(kernel) // 2))
        if draw(st.booleans()):  # a last, partial window (clipped to the padded input)
            attrs["ceil_mode"] = True
        if name.startswith("avg") and draw(st.booleans()):
            attrs["count_include_pad"] = draw(st.booleans())
        shape = [draw(st.integers(1, 3)), draw(small)] + [draw(st.integers(3, 6)) for _ in range(spatial)]
        pre = [{"conv1d" if spatial == 1 else "conv2d": {"out": shape[1], "kernel": 1}}] if draw(st.booleans()) else []
        return {}, shape, pre + [{name: attrs}, {"reshape": {"shape": [1, -1]}}, {"linear": {"out": 2}}]

    return draw_case


CASES["max_pool1d"] = _pool("max_pool1d", 1)
CASES["max_pool2d"] = _pool("max_pool2d", 2)
CASES["avg_pool1d"] = _pool("avg_pool1d", 1)
CASES["avg_pool2d"] = _pool("avg_pool2d", 2)


@case("adaptive_avg_pool2d")
def _adaptive_avg_pool2d(draw):
    out = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    shape = ["B", draw(small), out[0] * draw(st.integers(1, 3)), out[1] * draw(st.integers(1, 3))]
    dims = {"B": draw(st.integers(1, 3))}
    if draw(st.booleans()):  # a symbolic output size (counted as pooling; 1 x 1 is reconciled as a mean)
        dims.update(OH=out[0], OW=out[1])
        out = ["OH", "OW"]
    return dims, shape, with_grad(draw, [{"adaptive_avg_pool2d": {"size": out}}, {"flatten": {"start": 1}},
                                         {"linear": {"out": 2}}])


@case("global_avg_pool")
def _global_avg_pool(draw):
    shape = [draw(st.integers(1, 3)), draw(small)] + [draw(small) for _ in range(draw(st.integers(1, 3)))]
    pre = [{"linear": {"out": shape[-1]}}] if draw(st.booleans()) else []
    return {}, shape, pre + [{"global_avg_pool": {}}, {"linear": {"out": 2}}]


@case("mean")
def _mean(draw):
    shape = [draw(small) for _ in range(draw(st.integers(2, 4)))]
    axes = draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=len(shape) - 1,
                         unique_by=lambda a: a % len(shape)))
    keepdim = draw(st.booleans())
    return {}, shape, with_grad(draw, [{"mean": {"axes": axes, "keepdim": keepdim}}, {"reshape": {"shape": [1, -1]}},
                                       {"linear": {"out": 2}}])


@case("scale")
def _scale(draw):
    by = draw(st.sampled_from([2, 0.5, "sqrt(C)", "1/sqrt(C)"]))
    return {"C": 4}, [draw(small), draw(small), "C"], with_grad(draw, [{"scale": {"by": by}}, {"linear": {"out": 2}}])


@case("layer_scale")
def _layer_scale(draw):
    shape = [draw(small) for _ in range(draw(st.integers(1, 4)))]
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    return {}, shape, with_grad(draw, [{"layer_scale": {"axis": axis}}, {"reshape": {"shape": [1, -1]}},
                                       {"linear": {"out": 2}}])


@case("patch_embed")
def _patch_embed(draw):
    p = draw(st.integers(1, 3))
    dims = {"B": draw(st.integers(1, 3))}
    shape = ["B", draw(small), p * draw(st.integers(1, 3)), p * draw(st.integers(1, 3))]
    attrs = {"patch": p, "dim": draw(small), "cls_token": draw(st.booleans()), "pos_embed": draw(st.booleans()),
             "bias": draw(st.booleans()), "mask_token": draw(st.booleans())}
    return dims, shape, [{"patch_embed": attrs}, {"layernorm": {}}]


@case("mlp")
def _mlp(draw):
    attrs = {"hidden": draw(small), "out": draw(small), "bias": draw(st.booleans()), "gated": draw(st.booleans()),
             "fn": draw(st.sampled_from(["gelu", "gelu_tanh", "quick_gelu", "relu", "silu", "sigmoid", "tanh"]))}
    return {}, [draw(small), draw(small), draw(small)], with_grad(draw, [{"mlp": attrs}])


@case("activation")
def _activation(draw):
    fn = draw(st.sampled_from(["gelu", "gelu_tanh", "quick_gelu", "relu", "silu", "sigmoid", "tanh"]))
    return {}, [draw(small), draw(small)], with_grad(draw, [{"activation": {"fn": fn}}, {"linear": {"out": 2}}])


@case("softmax")
def _softmax(draw):
    return {}, [draw(small), draw(small), draw(small)], with_grad(
        draw, [{"softmax": {"axis": draw(st.integers(-3, 2))}}, {"linear": {"out": 2}}])


@case("dropout")
def _dropout(draw):
    return {}, [draw(small), draw(small)], with_grad(draw, [{"dropout": {"p": 0.1}}, {"linear": {"out": 2}}])


def _residual(draw):  # the residual add the engine appends: x + f(x)
    body = draw(st.sampled_from([[{"linear": {"out": 3}}], [{"activation": {"fn": "relu"}}],
                                 [{"layernorm": {}}, {"linear": {"out": 3}}]]))
    return {}, [draw(small), 3], with_grad(draw, [{"residual": body}, {"linear": {"out": 2}}])


_BRANCHES = [[], [{"linear": {"out": 3}}], [{"activation": {"fn": "relu"}}], [{"layernorm": {}}, {"linear": {"out": 3}}],
             [{"mean": {"axes": [1], "keepdim": True}}]]  # the last one broadcasts back over axis 1


def _join(mode):
    """A `parallel:` of 2-3 drawn branches joined by `mode`, or the same join written with `with:`."""
    def draw_case(draw):
        shape = [draw(small), draw(small), 3]
        options = _BRANCHES[:-1] if mode == "concat" else _BRANCHES
        if mode == "add" and draw(st.booleans()):
            return _residual(draw)
        if draw(st.booleans()):
            branches = [draw(st.sampled_from(options)) for _ in range(draw(st.integers(2, 3)))]
            join = {"parallel": {"join": mode, "branches": branches, **({"axis": 1} if mode == "concat" else {})}}
            layers = [join]
        else:
            first = {**draw(st.sampled_from([{"linear": {"out": 3}}, {"activation": {"fn": "relu"}}])), "save": "v"}
            between = draw(st.sampled_from(options[1:]))
            layers = [first, *between, {mode: {"with": "v", **({"axis": 1} if mode == "concat" else {})}}]
        return {}, shape, with_grad(draw, layers + [{"linear": {"out": 2}}])

    return draw_case


@case("similarity")
def _similarity(draw):
    """Image rows sliced from the tokens (Bi <= Bt), the text embeddings saved before: both need a gradient
    (a layernorm first), only the image side (a linear between) or neither."""
    rows, width = draw(st.integers(1, 4)), draw(small)
    text = {"activation": {"fn": "relu"}, "save": "text"}
    image = [{"slice": {"axis": 0, "end": draw(st.integers(1, rows))}}]
    if draw(st.booleans()):
        image.append({"linear": {"out": width}})
    head = {"similarity": {"with": "text", "form": draw(st.sampled_from(["clip", "siglip"])),
                           "bias": draw(st.booleans())}}
    return {}, [rows, width], with_grad(draw, [text, *image, head])


CASES["add"] = _join("add")
CASES["mul"] = _join("mul")
CASES["concat"] = _join("concat")


@case("fanout")  # a saved value read by 1-3 later layers besides the running path (or instead of it)
def _fanout(draw):
    layers: list = [{"linear": {"out": 3}, "save": "v"}]
    for _ in range(draw(st.integers(1, 3))):
        layers += [draw(st.sampled_from([{"activation": {"fn": "relu"}}, {"linear": {"out": 3}}])),
                   draw(st.sampled_from([{"add": {"with": "v"}}, {"mul": {"with": "v"}}]))]
    if draw(st.booleans()):  # the running value put aside, `v` read as the input of a layer, then joined
        layers[-1] = {**layers[-1], "save": "w"}
        layers += [{"layernorm": {}, "input": "v"}, {"add": {"with": "w"}}]
    return {}, [draw(small), 3], with_grad(draw, layers + [{"linear": {"out": 2}}])


def _norm(name, rank):
    def draw_case(draw):
        attrs = {"affine": draw(st.booleans())}
        if name != "rmsnorm":
            attrs["bias"] = draw(st.booleans())
        shape = [draw(small) for _ in range(rank)]
        pre = [{"linear": {"out": shape[-1]}}] if rank != 4 else [{"conv2d": {"out": shape[1], "kernel": 1}}]
        return {}, shape, (pre if draw(st.booleans()) else []) + [{name: attrs}, {"reshape": {"shape": [1, -1]}},
                                                                   {"linear": {"out": 2}}]

    return draw_case


CASES["layernorm"] = _norm("layernorm", 3)
CASES["rmsnorm"] = _norm("rmsnorm", 3)
CASES["layernorm2d"] = _norm("layernorm2d", 4)


@case("grn")  # channels last [B, H, W, C]
def _grn(draw):
    shape = [draw(small) for _ in range(4)]
    pre = [{"linear": {"out": shape[-1]}}] if draw(st.booleans()) else []
    return {}, shape, pre + [{"grn": {}}, {"reshape": {"shape": [1, -1]}}, {"linear": {"out": 2}}]


@case("batchnorm")
def _batchnorm(draw):
    rank = draw(st.integers(2, 5))
    shape = [draw(st.integers(1, 3)) for _ in range(rank)]
    shape[0] = draw(st.integers(2, 3))  # train mode needs more than one value per channel
    attrs = {"mode": draw(st.sampled_from(["train", "eval"])), "affine": draw(st.booleans())}
    pre = [{"conv1d": {"out": shape[1], "kernel": 1}}] if rank == 3 else [{"linear": {"out": shape[-1]}}]
    return {}, shape, (pre if draw(st.booleans()) else []) + [{"batchnorm": attrs}, {"reshape": {"shape": [1, -1]}},
                                                               {"linear": {"out": 2}}]


@case("groupnorm")
def _groupnorm(draw):
    groups = draw(st.integers(1, 3))
    shape = [draw(small), groups * draw(st.integers(1, 2))] + [draw(small) for _ in range(draw(st.integers(0, 2)))]
    if shape[1] // groups == 1 and len(shape) == 2 or all(d == 1 for d in shape[2:]):  # > 1 value per group
        shape.append(2)
    attrs = {"groups": groups, "affine": draw(st.booleans())}
    pre = [{"linear": {"out": shape[-1]}}] if draw(st.booleans()) else []
    return {}, shape, pre + [{"groupnorm": attrs}, {"reshape": {"shape": [1, -1]}}, {"linear": {"out": 2}}]


@case("flatten")
def _flatten(draw):
    start = draw(st.integers(0, 2))
    return {}, [draw(small), draw(small), draw(small)], with_grad(
        draw, [{"flatten": {"start": start, "end": draw(st.integers(start, 2))}}, {"linear": {"out": 2}}])


@case("reshape")
def _reshape(draw):
    b, s, c = draw(small), draw(small), draw(small)
    shape = draw(st.sampled_from([[b, -1], [b * s, c], [b, c, s], [-1]]))
    return {}, [b, s, c], with_grad(draw, [{"reshape": {"shape": shape}}, {"linear": {"out": 2}}])


@case("transpose")
def _transpose(draw):
    return {}, [draw(small), draw(small), draw(small)], with_grad(
        draw, [{"transpose": {"axis0": draw(st.integers(-3, 2)), "axis1": draw(st.integers(-3, 2))}},
               {"linear": {"out": 2}}])


@case("permute")
def _permute(draw):
    shape = [draw(small) for _ in range(draw(st.integers(1, 4)))]
    order = draw(st.permutations(range(len(shape))))
    return {}, shape, with_grad(draw, [{"permute": {"order": list(order)}}, {"reshape": {"shape": [1, -1]}},
                                       {"linear": {"out": 2}}])


@case("slice")
def _slice(draw):
    shape = [draw(small) for _ in range(draw(st.integers(1, 3)))]
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    size = shape[axis]
    start = draw(st.integers(0, size - 1))
    attrs = {"axis": axis, "start": start}
    if draw(st.booleans()):
        attrs["end"] = draw(st.integers(start + 1, size))
    return {}, shape, with_grad(draw, [{"slice": attrs}, {"reshape": {"shape": [1, -1]}}, {"linear": {"out": 2}}])


@case("chunk")
def _chunk(draw):
    chunks = draw(st.integers(1, 3))
    shape = [draw(small), chunks * draw(st.integers(1, 3))]
    attrs = {"chunks": chunks, "index": draw(st.integers(0, chunks - 1)), "axis": 1}
    return {}, shape, with_grad(draw, [{"chunk": attrs}, {"linear": {"out": 2}}])


@case("split")
def _split(draw):
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    shape = [draw(small), sum(sizes)]
    attrs = {"sizes": sizes, "index": draw(st.integers(0, len(sizes) - 1))}
    return {}, shape, with_grad(draw, [{"split": attrs}, {"linear": {"out": 2}}])


@case("pad")
def _pad(draw):
    shape = [draw(small) for _ in range(draw(st.integers(1, 3)))]
    pads = [draw(st.integers(0, 2)) for _ in range(2 * draw(st.integers(1, len(shape))))]
    return {}, shape, with_grad(draw, [{"pad": {"pads": pads}}, {"reshape": {"shape": [1, -1]}}, {"linear": {"out": 2}}])


@case("moe")
def _moe(draw):
    experts = draw(st.integers(1, 4))
    attrs = {"experts": experts, "top_k": draw(st.integers(1, experts)), "hidden": draw(small),
             "gated": draw(st.booleans()), "fn": draw(st.sampled_from(["silu", "gelu", "relu"])),
             "bias": draw(st.booleans()), "renorm": draw(st.booleans())}
    if attrs["gated"]:
        attrs["fused_gate_up"] = draw(st.booleans())
    if draw(st.booleans()):
        attrs.update(shared_experts=draw(st.integers(1, 2)), shared_hidden=draw(small), shared_gate=draw(st.booleans()))
    if draw(st.booleans()):
        attrs["capacity_factor"] = draw(st.sampled_from([0.5, 1.0, 1.25]))
    shape = [draw(small) for _ in range(draw(st.integers(1, 2)))] + [draw(small)]
    return {}, shape, with_grad(draw, [{"moe": attrs}])


@case("upsample")
def _upsample(draw):
    dims, shape = _image(draw)
    attrs = {"mode": draw(st.sampled_from(["nearest", "bilinear", "bicubic"]))}
    if draw(st.booleans()):
        attrs["scale"] = draw(st.integers(1, 3))
    else:
        attrs["size"] = [draw(st.integers(1, 9)), draw(st.integers(1, 9))]
    pre = [{"conv2d": {"out": shape[1], "kernel": 1}}] if draw(st.booleans()) else []
    return dims, shape, pre + [{"upsample": attrs}, {"conv2d": {"out": 2, "kernel": 1}}]


@case("embedding")  # token ids are the model input: an embedding comes first
def _embedding(draw):
    attrs = {"vocab": draw(small), "dim": draw(small), "segments": draw(st.integers(0, 2))}
    return {"B": draw(st.integers(1, 3))}, ["B", draw(small)], [{"embedding": attrs}, {"linear": {"out": 2}}]


@case("position_embedding")
def _position_embedding(draw):
    s = draw(small)
    attrs = {"length": s + draw(st.integers(0, 2))} if draw(st.booleans()) else {}
    return {"B": draw(st.integers(1, 3))}, ["B", s, draw(small)], with_grad(
        draw, [{"position_embedding": attrs}, {"linear": {"out": 2}}])


@case("cls_token")
def _cls_token(draw):
    return {"B": draw(st.integers(1, 3))}, ["B", draw(small), draw(small)], with_grad(
        draw, [{"cls_token": {}}, {"linear": {"out": 2}}])


@case("learned_tokens")
def _learned_tokens(draw):
    s = draw(small)
    attrs = {"count": draw(st.integers(1, 3))}
    if draw(st.booleans()):
        attrs["at"] = draw(st.sampled_from(["start", "end"]))
    if attrs.get("at", "start") == "start" and draw(st.booleans()):
        attrs["after"] = draw(st.integers(0, s))  # inside the sequence: the input read as two slices
    return {"B": draw(st.integers(1, 3))}, ["B", s, draw(small)], with_grad(
        draw, [{"learned_tokens": attrs}, {"linear": {"out": 2}}])


@case("interpolated_positions")  # resized to the tokens' grid and added; or a stack later layers slice and add
def _interpolated_positions(draw):
    grid, size = [draw(st.integers(1, 3)) for _ in range(2)], [draw(st.integers(1, 4)) for _ in range(2)]
    if draw(st.booleans()):
        size = list(grid)  # the native grid: `native: skip` adds the table as it is
    attrs = {"grid": grid, "size": size, "prefix": draw(st.integers(0, 2)), "suffix": draw(st.integers(0, 2)),
             "mode": draw(st.sampled_from(["bicubic", "bilinear"])), "native": draw(st.sampled_from(["run", "skip"]))}
    shape = ["B", attrs["prefix"] + size[0] * size[1] + attrs["suffix"], draw(small)]
    dims = {"B": draw(st.integers(1, 3))}
    if draw(st.booleans()):
        return dims, shape, with_grad(draw, [{"interpolated_positions": attrs}, {"linear": {"out": 2}}])
    attrs.update(add=False, tables=draw(st.integers(1, 3)))
    return dims, shape, [{"layernorm": {}, "save": "x"}, {"interpolated_positions": attrs, "save": "tables"},
                         {"slice": {"axis": 0, "start": 0, "end": 1}, "input": "tables"}, {"add": {"with": "x"}},
                         {"linear": {"out": 2}}]


@case("take_token")
def _take_token(draw):
    s = draw(small)
    return {"B": draw(st.integers(1, 3))}, ["B", s, draw(small)], with_grad(
        draw, [{"take_token": {"index": draw(st.integers(-s, s - 1))}}, {"linear": {"out": 2}}])


@case("lm_head")
def _lm_head(draw):
    vocab, c, bias = draw(small), draw(small), draw(st.booleans())
    dims = {"B": draw(st.integers(1, 3))}
    if draw(st.booleans()):  # tied to the embedding's table
        return dims, ["B", draw(small)], [{"embedding": {"vocab": vocab, "dim": c}}, {"layernorm": {}},
                                          {"lm_head": {"vocab": vocab, "tied": True, "bias": bias}}]
    return dims, ["B", draw(small), c], with_grad(draw, [{"lm_head": {"vocab": vocab, "bias": bias}}])


def _ssm_common(draw) -> dict:
    return {"d_state": draw(st.integers(1, 3)), "d_conv": draw(st.integers(1, 3)), "bias": draw(st.booleans()),
            "conv_bias": draw(st.booleans())}


@case("mamba")  # the scan's python loop runs S steps: S up to 4
def _mamba(draw):
    attrs = {**_ssm_common(draw), "expand": draw(st.integers(1, 2))}
    if draw(st.booleans()):
        attrs["dt_rank"] = draw(st.integers(1, 3))
    if draw(st.booleans()):  # Jamba's RMSNorms on dt, B and C
        attrs["inner_norms"] = True
    return {"B": draw(st.integers(1, 2))}, ["B", draw(st.integers(1, 4)), draw(small)], with_grad(
        draw, [{"mamba": attrs}])


@case("mamba2")  # chunks that divide S or pad it; groups sharing B and C across 1-2 heads each; the
# einsums contract over d_state and chunk, which the op requires to be 2 or more
def _mamba2(draw):
    groups = draw(st.integers(1, 2))
    heads, head_dim = groups * draw(st.integers(1, 2)), draw(st.integers(1, 3))
    expand = 2 if heads * head_dim % 2 == 0 and draw(st.booleans()) else 1
    attrs = {**_ssm_common(draw), "d_state": draw(st.integers(2, 3)), "expand": expand, "head_dim": head_dim,
             "groups": groups, "chunk": draw(st.integers(2, 4))}
    if draw(st.booleans()):
        attrs["heads"] = heads
    return {"B": draw(st.integers(1, 2))}, ["B", draw(st.integers(1, 6)), heads * head_dim // expand], with_grad(
        draw, [{"mamba2": attrs}])


@case("unmapped")
def _unmapped(draw):  # a gap: no work, its parameters, an output shape of more or fewer elements than its input
    b, s, c = draw(small), draw(small), draw(small)
    out = draw(st.sampled_from([[b, s, c], [b, c], [b, 2 * s, c]]))
    gap = {"what": "roll (aten.roll)", "module": "blocks.0", "shape": out, "params": draw(st.integers(0, 4))}
    return {}, [b, s, c], with_grad(draw, [{"unmapped": gap}, {"linear": {"out": 2}}])


@SETTINGS
@given(st.data(), dtypes)
def test_attention_alibi_matches_torch(data, dtype):
    """ALiBi's bias (one add per score, the causal mask folded in) against the module's aten ops, every backend."""
    dims, shape, layers = data.draw(st.composite(_attention)(layout="alibi"))
    text = spec_text(dims, shape, layers, dtype)
    model = costspec.loads(text)
    result = validate(model, model.bind(), "train", "meta")
    assert result.ok, text + "\n" + render_table(result)


@SETTINGS
@given(st.data(), dtypes)
def test_attention_beit_bias_matches_torch(data, dtype):
    """BEiT's table over the patch grid and the class token's three entries: gathered, one add per score, the
    gather's backward scatter-added into the table, against the module's aten ops."""
    dims, shape, layers = data.draw(st.composite(_attention)(layout="beit"))
    text = spec_text(dims, shape, layers, dtype)
    model = costspec.loads(text)
    result = validate(model, model.bind(), "train", "meta")
    assert result.ok, text + "\n" + render_table(result)


@SETTINGS
@given(st.data(), dtypes, st.booleans())
def test_attention_causal_t5_bias_matches_torch(data, dtype, shared):
    """T5's decoder self-attention: the one-directional bias kept below the diagonal by a where (h*S*S selects,
    its backward another), the SDPA adding it as the float mask, every backend; `shared`: a second layer reads
    the first one's bias (its where its own, its gradient summed into the table's), forward and backward."""
    dims, shape, layers = data.draw(st.composite(_attention)(layout="t5_causal"))
    if shared:
        attn = layers[-1]["attention"]
        attn["rel_bias_readers"] = 1
        reader = {k: v for k, v in attn.items() if k not in ("buckets", "max_distance", "rel_bias_readers")}
        layers = layers + [{"attention": {**reader, "rel_bias_shared": True}}]
    text = spec_text(dims, shape, layers, dtype)
    model = costspec.loads(text)
    result = validate(model, model.bind(), "train", "meta", saved=True)
    assert result.ok, text + "\n" + render_table(result)
    for phase in ("forward", "backward"):
        total = result.total(phase)
        assert total.matmul_reconciled == total.matmul_analytic


def test_every_op_has_a_case():
    missing = sorted(set(OPS) - set(CASES))
    assert not missing, f"registered ops without a torch case: {missing}"


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_matches_torch(op):
    if op not in CASES:
        pytest.fail(f"op '{op}' has no case in tests/ops/test_vs_torch.py")

    @SETTINGS
    @given(st.data(), dtypes)
    def run(data, dtype):
        dims, shape, layers = data.draw(st.composite(CASES[op])())
        text = spec_text(dims, shape, layers, dtype)
        model = costspec.loads(text)
        assert any(n.op.name == op for n in model.op_nodes())
        result = validate(model, model.bind(), "train", "meta", saved=True)
        assert result.ok, text + "\n" + render_table(result)
        for phase in ("forward", "backward"):
            total = result.total(phase)
            assert total.matmul_reconciled == total.matmul_analytic

    run()
