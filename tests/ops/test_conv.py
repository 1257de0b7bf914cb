"""The op families beyond the zoo's first models (issue 14): convolutions in 1, 2, 3 dims and
transposed, batch/group norms, pooling, scale, shape ops, mixture of experts and attention options.
Numbers are computed by hand next to each assertion; the torch cross-checks of every op over random
shapes are in tests/test_ops_vs_torch.py."""
from __future__ import annotations

import textwrap

import pytest

import costspec
from costspec.core.errors import SpecError


def spec(layers: str, dims: str = "{B: 2}", input_: str = "[B, 4, 10]") -> costspec.Model:
    return costspec.loads(textwrap.dedent(f"""\
        costspec: 1
        name: t
        dims: {dims}
        input: {input_}
        layers:
        """) + textwrap.indent(textwrap.dedent(layers), "  "))


def forward(model, pass_="forward"):
    cost = model.cost(pass_)
    values = model.bind()
    return ({k: int(v.xreplace(values)) for k, v in cost.matmul.items()},
            {k: int(v.xreplace(values)) for k, v in cost.pointwise.items()})


def params(model) -> int:
    return int(model.cost().params.xreplace(model.bind()))


def out_shape(model) -> tuple:
    values = model.bind()
    return tuple(int(d.xreplace(values)) for d in model.out_shape)


# -- convolutions ---------------------------------------------------------------------------------
def test_conv1d_whisper_stem():
    # Whisper tiny's conv1: 80 mel bins -> 384 channels, kernel 3, padding 1, over 3000 frames
    model = spec("- conv1d: {out: 384, kernel: 3, padding: 1}", dims="{B: 1}", input_="[B, 80, 3000]")
    assert out_shape(model)[1:] == (384, 3000)
    matmul, pointwise = forward(model)
    assert matmul == {"conv": 2 * 1 * 384 * 3000 * 80 * 3}
    assert pointwise == {"bias_add": 384 * 3000}
    assert params(model) == 384 * 80 * 3 + 384


def test_conv3d_video_patch_embedding():
    # a tubelet embedding: kernel = stride = [2, 16, 16] on 16 frames of 224 x 224 -> 8 x 14 x 14 tubelets
    model = spec("- conv3d: {out: 768, kernel: [2, 16, 16], stride: [2, 16, 16]}", dims="{B: 1}",
                 input_="[B, 3, 16, 224, 224]")
    assert out_shape(model)[1:] == (768, 8, 14, 14)
    matmul, _ = forward(model)
    assert matmul == {"conv": 2 * 768 * (8 * 14 * 14) * 3 * (2 * 16 * 16)}
    assert params(model) == 768 * 3 * 2 * 16 * 16 + 768


def test_conv_transpose2d_doubles_the_grid_and_counts_every_input_through_the_kernel():
    model = spec("- conv_transpose2d: {out: 8, kernel: 2, stride: 2, bias: false}", input_="[B, 4, 5, 6]")
    assert out_shape(model)[1:] == (8, 10, 12)  # (5-1)*2 + (2-1) + 1 = 10
    matmul, pointwise = forward(model)
    assert matmul == {"conv": 2 * 2 * 4 * (5 * 6) * 8 * 4}  # 2 * B*Cin*H*W * Cout * kh*kw
    assert pointwise == {}
    assert params(model) == 4 * 8 * 4


def test_conv_shape_errors_are_located():
    with pytest.raises(SpecError, match=r"conv1d needs an NCL input"):
        spec("- conv1d: {out: 4, kernel: 3}", input_="[B, 4, 10, 10]")
    with pytest.raises(SpecError, match=r"layers\[0\]\.conv1d\.kernel.*output length would be -1"):
        spec("- conv1d: {out: 4, kernel: 12}")
    with pytest.raises(SpecError, match=r"output_padding 2 must be smaller than stride 2 or dilation 1"):
        spec("- conv_transpose2d: {out: 4, kernel: 2, stride: 2, output_padding: 2}", input_="[B, 4, 5, 6]")
    with pytest.raises(SpecError, match=r"kernel"):
        spec("- conv3d: {out: 4, kernel: [1, 2]}", input_="[B, 4, 2, 3, 3]")


# -- norms ----------------------------------------------------------------------------------------
def test_batchnorm_train_and_eval_cost_differently_and_keep_running_stats_out_of_the_params():
    train = spec("- batchnorm: {}", input_="[B, 4, 5, 6]")
    frozen = spec("- batchnorm: {mode: eval}", input_="[B, 4, 5, 6]")
    n = 2 * 4 * 5 * 6
    assert forward(train)[1] == {"batchnorm": n}
    assert forward(frozen)[1] == {"batchnorm_eval": n}
    assert int(train.cost().cuda.xreplace(train.bind())) == 7 * n  # batch statistics: 7 FLOPs/element
    assert int(frozen.cost().cuda.xreplace(frozen.bind())) == 2 * n  # per-channel scale and shift
    assert params(train) == params(frozen) == 2 * 4  # gamma, beta; running mean/var are buffers
    module, _ = train.to_torch()
    assert sorted(dict(module.named_buffers())) == ["bn.running_mean", "bn.running_var"]


def test_batchnorm_and_groupnorm_shape_errors():
    with pytest.raises(SpecError, match=r"more than one value per channel"):
        spec("- batchnorm: {}", dims="{B: 1}", input_="[B, 4]")
    spec("- batchnorm: {mode: eval}", dims="{B: 1}", input_="[B, 4]")  # eval mode needs no batch statistics
    with pytest.raises(SpecError, match=r"channels 4 not divisible by groups 3"):
        spec("- groupnorm: {groups: 3}")
    with pytest.raises(SpecError, match=r"batchnorm needs an input \[B, C, \.\.\.\]"):
        spec("- batchnorm: {}", input_="[8]")


# -- pooling and means ----------------------------------------------------------------------------
def test_resnet_stem_max_pool_and_head_global_average():
    model = spec("""\
        - max_pool2d: {kernel: 3, stride: 2, padding: 1}
        - global_avg_pool: {}
        """, dims="{B: 1}", input_="[B, 64, 112, 112]")
    assert out_shape(model) == (1, 64)
    _, pointwise = forward(model)
    # 56 x 56 outputs of 3 x 3 windows; then every element of the 64 x 56 x 56 map added once
    assert pointwise == {"max_pool": 64 * 56 * 56 * 9, "mean": 64 * 56 * 56}
    backward = forward(model, "backward")[1]
    assert backward == {}  # nothing needs a gradient: no parameters anywhere


def test_avg_pool_stride_defaults_to_the_kernel_and_mean_drops_axes():
    model = spec("- avg_pool1d: {kernel: 2}", input_="[B, 4, 10]")
    assert out_shape(model) == (2, 4, 5)
    assert forward(model)[1] == {"avg_pool": 2 * 4 * 5 * 2}
    assert out_shape(spec("- mean: {axes: [1]}", input_="[B, 4, 10]")) == (2, 10)
    assert out_shape(spec("- mean: {axes: [-1], keepdim: true}", input_="[B, 4, 10]")) == (2, 4, 1)
    assert out_shape(spec("- adaptive_avg_pool2d: {size: [2, 5]}", input_="[B, 4, 6, 10]")) == (2, 4, 2, 5)


def test_pooling_errors():
    with pytest.raises(SpecError, match=r"padding 2 is more than half the kernel 3"):
        spec("- max_pool2d: {kernel: 3, padding: 2}", input_="[B, 4, 10, 10]")
    with pytest.raises(SpecError, match=r"axis 3 is out of range for an input of rank 3"):
        spec("- mean: {axes: [3]}")
    with pytest.raises(SpecError, match=r"axis -1 is listed twice"):
        spec("- mean: {axes: [2, -1]}")
    with pytest.raises(SpecError, match=r"input size 10 is not a multiple of the output size 3"):
        spec("- adaptive_avg_pool2d: {size: 3}", input_="[B, 4, 6, 10]")
    with pytest.raises(SpecError, match=r"global_avg_pool needs an input \[B, C, \.\.\.\]"):
        spec("- global_avg_pool: {}", input_="[B, 4]")


# -- scale and layer scale ------------------------------------------------------------------------
def test_gemma_embedding_scale_and_layer_scale():
    model = spec("""\
        - scale: {by: sqrt(C)}
        - layer_scale: {}
        """, dims="{B: 2, C: 16}", input_="[B, 3, C]")
    n = 2 * 3 * 16
    assert forward(model)[1] == {"scale": n, "mul": n}
    assert params(model) == 16  # gamma only; the scale is a constant
    module, _ = model.to_torch()
    assert module.scale.factor == 4.0  # sqrt(16)
    assert tuple(module.ls.gamma.shape) == (16,)
    nchw = spec("- layer_scale: {axis: 1}", input_="[B, 4, 5, 6]")
    assert params(nchw) == 4
    with pytest.raises(SpecError, match=r"axis 3 is out of range for an input of rank 3"):
        spec("- layer_scale: {axis: 3}")
    with pytest.raises(SpecError, match=r"call of 'exp' is not allowed"):
        spec("- scale: {by: exp(2)}")


# -- shape ops ------------------------------------------------------------------------------------
def test_permute_slice_chunk_split_pad_shapes():
    assert out_shape(spec("- permute: {order: [0, 2, 1]}")) == (2, 10, 4)
    assert out_shape(spec("- slice: {axis: -1, start: 2, end: 7}")) == (2, 4, 5)
    assert out_shape(spec("- slice: {axis: 1, start: 1}")) == (2, 3, 10)
    assert out_shape(spec("- chunk: {chunks: 2, index: 1}")) == (2, 4, 5)
    assert out_shape(spec("- split: {sizes: [3, 7], index: 1}")) == (2, 4, 7)
    assert out_shape(spec("- pad: {pads: [1, 2, 0, 3]}")) == (2, 7, 13)  # last axis 10+1+2, then 4+0+3
    model = spec("""\
        - permute: {order: [0, 2, 1]}
        - chunk: {chunks: 2, index: 0, axis: 1}
        - pad: {pads: [1, 1]}
        """)
    assert forward(model) == ({}, {}) and params(model) == 0


def test_shape_op_errors():
    with pytest.raises(SpecError, match=r"order \[0, 0, 1\] is not a permutation of the 3 axes"):
        spec("- permute: {order: [0, 0, 1]}")
    with pytest.raises(SpecError, match=r"end 11 is beyond the axis' size 10"):
        spec("- slice: {axis: 2, end: 11}")
    with pytest.raises(SpecError, match=r"end 3 is not after start 5"):
        spec("- slice: {axis: 2, start: 5, end: 3}")
    with pytest.raises(SpecError, match=r"axis size 10 is not divisible by chunks 3"):
        spec("- chunk: {chunks: 3, index: 0}")
    with pytest.raises(SpecError, match=r"index 2 is not one of the 2 pieces"):
        spec("- chunk: {chunks: 2, index: 2}")
    with pytest.raises(SpecError, match=r"sizes sum to 9, the axis has 10"):
        spec("- split: {sizes: [3, 6], index: 0}")
    with pytest.raises(SpecError, match=r"8 pads for an input of rank 3"):
        spec("- pad: {pads: [1, 1, 1, 1, 1, 1, 1, 1]}")


# -- mixture of experts ---------------------------------------------------------------------------
def test_mixtral_layer_params_active_params_and_balanced_expert_flops():
    # Mixtral 8x7B's MoE layer: C = 4096, 8 SwiGLU experts of width 14336, top-2
    model = spec("- moe: {experts: 8, top_k: 2, hidden: 14336}", dims="{B: 1, S: 16}", input_="[B, S, 4096]")
    c, f, e, k, t = 4096, 14336, 8, 2, 16
    expert = 3 * c * f
    assert params(model) == c * e + e * expert
    notes = [n for node in model.op_nodes() for n in node.op.notes(node.call)]
    assert notes[0].startswith(f"{c * e + e * expert} parameters in total, {c * e + k * expert} active per token")
    matmul, pointwise = forward(model)
    rows = t * k  # balanced: every expert t*k/e = 4 rows, the experts together t*k
    assert matmul == {"gemm": 2 * t * c * e + 2 * rows * c * f * 3}
    assert pointwise["mul"] == rows * f + rows * c  # act(gate) * up, then each output times its weight
    assert pointwise["topk"] == pointwise["softmax"] == t * e


def test_moe_capacity_factor_drops_rows_beyond_capacity():
    # T = 10 tokens, k = 2, E = 4: capacity ceil(0.5 * 20 / 4) = 3 rows per expert, R = min(20, 4 * 3) = 12
    model = spec("- moe: {experts: 4, top_k: 2, hidden: 6, gated: false, capacity_factor: 0.5}",
                 dims="{B: 1}", input_="[B, 10, 8]")
    matmul, _ = forward(model)
    assert matmul == {"gemm": 2 * 10 * 8 * 4 + 2 * 12 * 8 * 6 * 2}
    shared = spec("- moe: {experts: 4, top_k: 1, hidden: 6, shared_experts: 2}", dims="{B: 1}", input_="[B, 10, 8]")
    assert params(shared) == 8 * 4 + 4 * 3 * 8 * 6 + 3 * 8 * (2 * 6)  # shared: one MLP of width 2 * 6
    with pytest.raises(SpecError, match=r"top_k 5 is more than the 4 experts"):
        spec("- moe: {experts: 4, top_k: 5, hidden: 6}")


def test_moe_fused_gate_up_drops_the_dx_add_and_shared_gate_adds_a_sigmoid_gate():
    # T = 10 tokens (B = 1), C = 8, E = 4, k = 2, hidden 6: R = T*k = 20 expert rows
    base = "- linear: {out: 8, bias: false}\n- moe: {experts: 4, top_k: 2, hidden: 6%s}"
    split, fused = (spec(base % extra, dims="{B: 1}", input_="[B, 10, 8]") for extra in ("", ", fused_gate_up: true"))
    assert forward(split) == forward(fused) and params(split) == params(fused)  # one C -> 2*hidden GEMM, same work
    (mm_s, pw_s), (mm_f, pw_f) = forward(split, "backward"), forward(fused, "backward")
    assert mm_s == mm_f
    assert pw_s["add"] - pw_f.get("add", 0) == 20 * 8  # gate's and up's dX summed: R*C adds, none when fused
    # Qwen2-MoE's shared expert with its sigmoid gate: sigmoid(x w) * shared(x), w: C -> 1
    plain, gated = (spec("- moe: {experts: 4, top_k: 2, hidden: 6, shared_experts: 1, shared_hidden: 12%s}" % extra,
                         dims="{B: 1}", input_="[B, 10, 8]") for extra in ("", ", shared_gate: true"))
    assert params(gated) - params(plain) == 8
    (mm_p, pw_p), (mm_g, pw_g) = forward(plain), forward(gated)
    assert mm_g["gemm"] - mm_p["gemm"] == 2 * 10 * 8  # the C -> 1 projection on T tokens
    assert pw_g["sigmoid"] == 10 and pw_g["mul"] - pw_p["mul"] == 10 * 8  # T scores, broadcast over C
    with pytest.raises(SpecError, match=r"shared_gate gates the shared experts' output"):
        spec("- moe: {experts: 4, top_k: 2, hidden: 6, shared_gate: true}")
    with pytest.raises(SpecError, match=r"fused_gate_up fuses the gate and up projections of gated experts"):
        spec("- moe: {experts: 4, top_k: 2, hidden: 6, gated: false, fused_gate_up: true}")


# -- attention options ----------------------------------------------------------------------------
def test_sliding_window_counts_useful_pairs_and_refuses_the_2d_window_misuse():
    # Mistral-style: S = 8 tokens, window 3, one head of dim 4 (C = 4)
    useful = spec("- attention: {heads: 1, causal: true, sliding_window: 3, causal_flops: useful}",
                  dims="{B: 1}", input_="[B, 8, 4]")
    pairs = 3 * 4 // 2 + (8 - 3) * 3  # queries 0..2 see 1, 2, 3 keys; the other 5 see 3 each: 21
    node = next(n for n, *_ in useful.walk() if n.name == "attn.sdpa")
    assert int(node.forward().matmul["sdpa"].xreplace(useful.bind())) == 2 * pairs * (4 + 4)
    executed = spec("- attention: {heads: 1, causal: true, sliding_window: 3}", dims="{B: 1}", input_="[B, 8, 4]")
    node = next(n for n, *_ in executed.walk() if n.name == "attn.sdpa")
    assert int(node.forward().matmul["sdpa"].xreplace(executed.bind())) == 2 * 8 * 8 * (4 + 4)
    with pytest.raises(SpecError, match=r"window 4096 on a grid of height 1: .*sliding_window: 4096"):
        spec("- attention: {heads: 1, window: 4096, grid: [1, S]}", dims="{B: 1, S: 8192}", input_="[B, S, 4]")
    with pytest.raises(SpecError, match=r"sliding_window is a causal sliding window"):
        spec("- attention: {heads: 1, sliding_window: 3}", input_="[B, 8, 4]")


def test_learned_queries_pool_the_tokens():
    # SigLIP's attention-pooling head core: 1 learned query over S = 196 tokens, C = 8, 2 heads
    model = spec("- attention: {heads: 2, queries: 1, fused_qkv: true}", dims="{B: 2}", input_="[B, 196, 8]")
    assert out_shape(model) == (2, 1, 8)
    rows = {r.name: r for r in model.evaluate("forward").rows}
    assert rows["attn.queries"].params == 8
    gemm = {n.name: int(n.forward().matmul["gemm"].xreplace(model.bind())) for n, *_ in model.walk()
            if n.name in ("attn.kv", "attn.q")}
    assert gemm == {"attn.kv": 2 * 2 * 196 * 8 * 16, "attn.q": 2 * 2 * 1 * 8 * 8}  # k, v on B*S rows; q on B*n
    sdpa = next(n for n, *_ in model.walk() if n.name == "attn.sdpa").forward().matmul["sdpa"]
    assert int(sdpa.xreplace(model.bind())) == 2 * 2 * 2 * 1 * 196 * (4 + 4)  # B * h queries x 196 keys, QK^T and AV


def test_relative_bias_tables_partial_rope_and_per_projection_bias():
    t5 = spec("- attention: {heads: 2, rel_bias: t5, scale: none}", input_="[B, 6, 8]")
    assert {r.name: r.params for r in t5.evaluate("forward").rows}["attn.rel_bias"] == 32 * 2  # buckets x heads
    swin = spec("- attention: {heads: 2, window: 3, grid: [6, 6], rel_bias: swin}", input_="[B, 36, 8]")
    assert {r.name: r.params for r in swin.evaluate("forward").rows}["attn.rel_bias"] == 5 * 5 * 2
    partial = spec("- attention: {heads: 2, head_dim: 8, rope: true, rope_dims: 2}", input_="[B, 6, 16]")
    rope = next(n for n, *_ in partial.walk() if n.name == "attn.rope").forward().pointwise
    assert int(rope["add"].xreplace(partial.bind())) == 2 * (2 + 2) * 6 * 2  # B*(h+kv)*S*rope_dims
    whisper = spec("- attention: {heads: 2, fused_qkv: false, k_bias: false}", input_="[B, 6, 8]")
    rows = {r.name: r.params for r in whisper.evaluate("forward").rows}
    assert (rows["attn.q"], rows["attn.k"], rows["attn.v"]) == (8 * 8 + 8, 8 * 8, 8 * 8 + 8)
    with pytest.raises(SpecError, match=r"fused_qkv is one projection with one bias"):
        spec("- attention: {heads: 2, k_bias: false}", input_="[B, 6, 8]")
    with pytest.raises(SpecError, match=r"rope needs an even rope_dims of at most head_dim 4, got 3"):
        spec("- attention: {heads: 2, rope: true, rope_dims: 3}", input_="[B, 6, 8]")
    with pytest.raises(SpecError, match=r"rel_bias: swin is Swin's table"):
        spec("- attention: {heads: 2, rel_bias: swin}", input_="[B, 36, 8]")


# -- resampling -----------------------------------------------------------------------------------
def test_upsample_nearest_is_free_and_bilinear_costs_per_output():
    nearest = spec("- upsample: {scale: 2}", input_="[B, 4, 5, 6]")
    assert out_shape(nearest) == (2, 4, 10, 12)
    assert forward(nearest) == ({}, {})
    bilinear = spec("- upsample: {mode: bilinear, size: [7, 9]}", input_="[B, 4, 5, 6]")
    assert forward(bilinear)[1] == {"bilinear": 2 * 4 * 7 * 9}
    assert int(bilinear.cost().cuda.xreplace(bilinear.bind())) == 7 * 2 * 4 * 7 * 9  # 4 mul + 3 add per output
    with pytest.raises(SpecError, match=r"upsample needs exactly one of scale and size"):
        spec("- upsample: {scale: 2, size: 4}", input_="[B, 4, 5, 6]")


def test_swin_shifted_windows_mask_every_score_and_validate():
    from costspec.runtime.validate import render_table, validate

    model = spec("""\
        - layernorm: {}
        - attention: {heads: 2, window: 3, grid: [6, 6], shift: 1, rel_bias: swin}
        """, input_="[B, 36, 8]")
    node = next(n for n, *_ in model.walk() if n.name == "attn.sdpa")
    scores = 2 * 4 * 2 * 9 * 9  # B * 4 windows, 2 heads, 9 x 9 scores per window
    # flash: one add of the (shift mask + table) bias per score, and one add combining the two masks
    assert int(node.forward().pointwise["add"].xreplace(model.bind())) == scores + scores
    for device in ("meta", "cpu"):
        result = validate(model, model.bind(), "train", device)
        assert result.ok, render_table(result)
    with pytest.raises(SpecError, match=r"shift 3 is not smaller than the window 3"):
        spec("- attention: {heads: 2, window: 3, grid: [6, 6], shift: 3}", input_="[B, 36, 8]")
    with pytest.raises(SpecError, match=r"shifted windows need the grid 6 x 7 divisible by the window 3"):
        spec("- attention: {heads: 2, window: 3, grid: [6, 7], shift: 1}", input_="[B, 42, 8]")
