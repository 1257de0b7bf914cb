"""Serving phases (`--phase prefill|decode --context N`): exact decode costs of the zoo's decoders by hand
arithmetic and against transformers stepping one token with a real key/value cache under FlopCounterMode,
the cache's elements against what that cache holds, and the specs a phase refuses."""
from __future__ import annotations

import json

import pytest
import sympy

from costspec.core.errors import SpecError, UsageError
from costspec.model import load, loads
from tests.common import ROOT

LLAMA = ROOT / "specs/llama_1b.yaml"
GPT2 = ROOT / "specs/gpt2_small.yaml"


def llama_token_flops(c=2048, kv_width=512, f=8192) -> int:
    """Llama-3.2-1B's GEMMs per token and layer: q and o (2*C*C each), k and v (2*C*KV*d each), the SwiGLU
    MLP (3 * 2*C*F)."""
    return 2 * (2 * c * c) + 2 * (2 * c * kv_width) + 3 * 2 * c * f


def llama_decode_flops(b: int, n: int, layers=16, c=2048, v=128256) -> int:
    """Per layer the GEMMs and SDPA's QK^T and AV over n + 1 keys (2 * 2*B*heads*(n+1)*d = 4*B*C*(n+1)), all on
    B tokens; then the tied LM head on the B new tokens (2*C*V each)."""
    return layers * (b * llama_token_flops(c) + 4 * b * c * (n + 1)) + b * 2 * c * v


@pytest.mark.parametrize("batch", [1, 8])
def test_llama_decode_matmul_flops_by_hand(batch):
    model = load(LLAMA, phase="decode", context=2048)
    report = model.evaluate("forward", B=batch)
    assert report.tc == llama_decode_flops(batch, 2048)  # 2,740,060,160 at B = 1
    assert llama_decode_flops(1, 2048) == 2_740_060_160
    assert report.params == load(LLAMA).evaluate().params


def test_decode_formula_is_symbolic_in_the_context():
    model = load(LLAMA, phase="decode")
    sdpa = model.node("layers.attn.sdpa").forward()
    b, c, n, h = (sympy.Symbol(x, positive=True, integer=True) for x in ("B", "C", "N", "heads"))
    assert sympy.simplify(sdpa.matmul["sdpa"] - 4 * b * c * (n + 1)) == 0
    assert sympy.simplify(sdpa.pointwise["softmax"] - b * h * (n + 1)) == 0
    assert "select" not in sdpa.pointwise  # one query over its cache: no mask
    assert model.bind()[n] == 2048  # the context defaults to the spec's token count


def test_prefill_is_the_forward_and_chunked_prefill_reads_the_cache():
    plain = load(LLAMA).evaluate("forward")
    assert load(LLAMA, phase="prefill").evaluate("forward").tc == plain.tc
    chunk = load(LLAMA, phase="prefill", context=1000).evaluate("forward", S=48)
    # 48 new tokens over 1000 cached ones: the projections and MLP on 48 tokens, QK^T and AV over 48 x 1048,
    # the LM head on the 48 tokens
    assert chunk.tc == 16 * (48 * llama_token_flops() + 2 * 2 * 32 * 48 * 1048 * 64) + 48 * 2 * 2048 * 128256


def test_chunked_prefill_useful_pairs_align_bottom_right():
    text = LLAMA.read_text().replace("rope: true, causal: true", "rope: true, causal: true, causal_flops: useful")
    model = loads(text)
    from costspec.model import serve

    chunk = serve(model, "prefill", 10)
    sdpa = chunk.node("layers.attn.sdpa").forward()
    s = 5  # query i sees the 10 cached keys and new keys 0..i: 5*10 + 5*6/2 = 65 pairs per head
    value = sdpa.matmul["sdpa"].xreplace(chunk.bind(sets={"S": s}))
    assert value == 2 * 32 * 65 * (64 + 64)


def test_gpt2_decode_by_hand():
    model = load(GPT2, phase="decode", context=1023)
    report = model.evaluate("forward", B=2)
    c, v, n = 768, 50257, 1023
    per_layer = 2 * c * 3 * c + 2 * c * c + 2 * 2 * c * 4 * c  # qkv, proj, the MLP's two linears
    assert report.tc == 2 * (12 * (per_layer + 4 * c * (n + 1)) + 2 * c * v)  # + the tied LM head


def test_gpt2_kv_cache_elements():
    model = load(GPT2, phase="decode", context=1023)
    values = model.bind(batch=4)
    total = sum(node.op.kv_cache(node.call) for node in model.op_nodes())
    assert total.xreplace(values) * 12 // 1 == 2 * 12 * 4 * 768 * 1024  # per layer x 12 layers


def test_eval_cli_decode_and_bad_input(cli):
    out = cli("eval", LLAMA, "--phase", "decode", "--context", "2048", "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["totals"]["tc_flops"] == llama_decode_flops(1, 2048)
    assert data["serving"] == {"phase": "decode", "context_dim": "N"}
    for args in (["specs/vit_b.yaml", "--phase", "decode"],  # no causal attention
                 ["specs/mamba_130m.yaml", "--phase", "decode"],
                 [LLAMA, "--phase", "decode", "--pass", "train"],
                 [LLAMA, "--phase", "decode", "--context", "0"]):
        bad = cli("eval", *args)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr


def test_decode_refuses_token_mixing_layers(write_spec):
    text = """costspec: 1
name: mixer
dims: {B: 1, S: 16, C: 64}
input: [B, S, C]
layers:
  - attention: {heads: 4, causal: true}
  - conv1d: {out: C, kernel: 3, padding: 1}
"""
    with pytest.raises(UsageError, match="conv1d"):
        load(write_spec(text), phase="decode", context=8)


def test_cache_attribute_needs_causal_self_attention():
    text = """costspec: 1
name: enc
dims: {B: 1, S: 16, C: 64, N: 4}
input: [B, S, C]
layers:
  - attention: {heads: 4, cache: N}
"""
    with pytest.raises(SpecError, match="cache"):
        loads(text)


# ---------------------------------------------------------------------------------------------------------
# against transformers: one decode step with a DynamicCache of N tokens, on meta, under FlopCounterMode
# ---------------------------------------------------------------------------------------------------------
def hf_decode(cls, config, batch: int, context: int) -> tuple[int, int]:
    """(FLOPs FlopCounterMode counts, elements the cache holds after the step) for one new token per sequence."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import DynamicCache

    with torch.device("meta"):
        model = cls(config).eval()
    cache = DynamicCache(config=config)
    kv = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    d = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    for layer in range(config.num_hidden_layers):
        k = torch.empty(batch, kv, context, d, device="meta")
        cache.update(k, k.clone(), layer)
    ids = torch.zeros(batch, 1, dtype=torch.long, device="meta")
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(input_ids=ids, past_key_values=cache, use_cache=True,
                    position_ids=torch.full((batch, 1), context, device="meta"))
    held = sum(t.numel() for layer in out.past_key_values.layers for t in (layer.keys, layer.values))
    return counter.get_total_flops(), held


def spec_decode(path, context: int, **dims) -> tuple[int, int]:
    model = load(path, phase="decode", context=context)
    values = model.bind(sets=dims)
    cache = sum(step.instances * step.node.op.kv_cache(step.node.call) for step in model.walk()
                if hasattr(step.node, "op") and not hasattr(step.node, "owner"))
    return model.report("forward", values).tc, int(sympy.sympify(cache).xreplace(values))


@pytest.mark.parametrize("batch", [1, 3])
def test_llama_decode_equals_transformers(batch):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=384, num_hidden_layers=2,
                                      num_attention_heads=8, num_key_value_heads=2, vocab_size=1000,
                                      max_position_embeddings=512, tie_word_embeddings=True,
                                      attn_implementation="sdpa")
    flops, held = hf_decode(transformers.LlamaForCausalLM, config, batch, 37)
    assert spec_decode(LLAMA, 37, B=batch, C=256, F=384, L=2, heads=8, KV=2, V=1000) == (flops, held)


def test_llama_1b_decode_equals_transformers_at_full_size(cli):
    """`costspec eval specs/llama_1b.yaml --phase decode --context 2048 --batch 1` against Llama-3.2-1B's
    LlamaForCausalLM (its config.json) stepping one token over a 2,048-token cache, the LM head on that token;
    `costspec memory`'s kv cache is the bytes of what transformers' cache holds after the step."""
    transformers = pytest.importorskip("transformers")
    data = json.loads((ROOT / "tests/data/hf_configs/llama_1b.json").read_text())
    config = transformers.LlamaConfig(**data, attn_implementation="sdpa")
    flops, held = hf_decode(transformers.LlamaForCausalLM, config, 1, 2048)
    assert spec_decode(LLAMA, 2048, B=1) == (flops, held)
    out = cli("eval", LLAMA, "--phase", "decode", "--context", "2048", "--batch", "1", "--format", "json")
    assert json.loads(out.stdout)["totals"]["tc_flops"] == flops == llama_decode_flops(1, 2048)
    memory = cli("memory", LLAMA, "--phase", "decode", "--context", "2048", "--format", "json")
    assert json.loads(memory.stdout)["kinds"]["kv cache"]["bytes"] == held * 2  # bf16


def test_gpt2_decode_equals_transformers():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=256,
                                      bos_token_id=0, eos_token_id=0, activation_function="gelu_pytorch_tanh",
                                      attn_implementation="sdpa")
    flops, held = hf_decode(transformers.GPT2LMHeadModel, config, 3, 37)
    assert spec_decode(GPT2, 37, B=3, C=128, heads=4, L=2, V=1000, P=256) == (flops, held)


def test_sliding_window_decode_equals_transformers():
    """Mistral with a window of 16 after 40 tokens: the cache keeps the last 15, the new token attends to 16.
    transformers' sliding cache drops the oldest after the step (15 held); costspec's cache is what the step
    reads (16): the one-token difference per layer is that convention."""
    transformers = pytest.importorskip("transformers")
    config = transformers.MistralConfig(num_hidden_layers=2, hidden_size=256, intermediate_size=384,
                                        num_attention_heads=8, num_key_value_heads=2, head_dim=32, vocab_size=1000,
                                        sliding_window=16, attn_implementation="sdpa")
    flops, held = hf_decode(transformers.MistralModel, config, 2, 40)
    spec_flops, cache = spec_decode(ROOT / "specs/mistral_7b.yaml", 40, B=2, W=16, L=2, C=256, F=384, heads=8,
                                    KV=2, V=1000)
    assert spec_flops == flops
    assert held == 2 * 2 * 2 * 2 * 32 * 15 and cache == 2 * 2 * 2 * 2 * 32 * 16


def test_backend_option_changes_the_attention_backward():
    """--backend math drops flash's recomputed QK^T: 2*B*heads*S^2*d per layer of the backward."""
    flash, math = (load(LLAMA, backend=b).evaluate("train") for b in ("flash", "math"))
    assert flash.tc - math.tc == 16 * 2 * 32 * 2048 * 2048 * 64
    assert load(LLAMA).evaluate("train").tc == flash.tc  # the spec's own choice is flash
    with pytest.raises(UsageError, match="backend"):
        load(LLAMA, backend="cudnn")


def test_sweep_and_formula_take_the_phase(cli):
    out = cli("sweep", LLAMA, "--phase", "decode", "--vary", "N=1023,2047", "--format", "json")
    assert out.returncode == 0, out.stderr
    points = json.loads(out.stdout)["rows"]
    assert [p["tc_flops"] for p in points] == [llama_decode_flops(1, 1023), llama_decode_flops(1, 2047)]
    form = cli("formula", LLAMA, "--phase", "decode", "--keep", "B,N,L")
    assert form.returncode == 0, form.stderr
    # per layer 4*C*(N+1) + the per-token GEMMs; the LM head 2*C*V per token
    assert f"TC FLOPs    = L*(8192*B*N + {llama_token_flops() + 4 * 2048}*B) + {2 * 2048 * 128256}*B" in form.stdout


def test_other_zoo_decoders_decode_equal_transformers():
    """Pythia (parallel residual, partial rope), Mixtral (MoE, transformers' batched_mm experts) and Gemma 2
    (soft-capping, eager attention, sliding and global layers alternating: its spec's variants need 26
    layers), each one token after 40 cached ones at B = 2; Gemma 2's sliding layers hold one token fewer
    after the step (the convention of test_sliding_window_decode_equals_transformers)."""
    t = pytest.importorskip("transformers")
    pythia = t.GPTNeoXConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                             vocab_size=1000, max_position_embeddings=256, attn_implementation="sdpa")
    assert hf_decode(t.GPTNeoXModel, pythia, 2, 40) == spec_decode(
        ROOT / "specs/pythia_160m.yaml", 40, B=2, C=128, L=2, heads=4, F=256, V=1000)
    mixtral = t.MixtralConfig(num_hidden_layers=2, hidden_size=256, intermediate_size=384, num_attention_heads=8,
                              num_key_value_heads=2, vocab_size=1000, num_local_experts=4,
                              _experts_implementation="batched_mm", attn_implementation="sdpa")
    assert hf_decode(t.MixtralModel, mixtral, 2, 40) == spec_decode(
        ROOT / "specs/mixtral_8x7b.yaml", 40, B=2, C=256, L=2, heads=8, KV=2, F=384, V=1000, E=4)
    gemma = t.Gemma2Config(hidden_size=128, num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=32, intermediate_size=256, vocab_size=1000, sliding_window=16,
                           attn_implementation="eager")
    flops, held = hf_decode(t.Gemma2ForCausalLM, gemma, 2, 40)
    spec_flops, cache = spec_decode(ROOT / "specs/gemma2_2b.yaml", 40, B=2, C=128, L=26, heads=4, KV=2, D=32,
                                    F=256, V=1000, W=16)
    assert spec_flops == flops
    assert cache - held == 13 * 2 * 2 * 2 * 32  # 13 sliding layers: k and v of one token, B 2, 2 kv heads of 32


MLA_SPEC = """costspec: 1
name: tiny_mla
dims: {B: 1, S: 16, C: 64, L: 2, F: 96, V: 100}
input: [B, S]
precision: {dtype: bf16}
blocks:
  blk:
    - residual:
        - rmsnorm: {}
        - mla: {heads: 4, kv_lora_rank: 32, q_lora_rank: 16, qk_nope_head_dim: 8, qk_rope_head_dim: 4,
                v_head_dim: 8, causal: true, absorb: ABSORB}
    - residual:
        - rmsnorm: {}
        - mlp: {hidden: F, gated: true, fn: silu, bias: false}
layers:
  - embedding: {vocab: V, dim: C}
  - repeat: L
    body: blk
  - rmsnorm: {}
"""


def test_mla_decode_equals_transformers_deepseek_v3():
    """transformers' DeepseekV3 caches the latent and the rope key (r + d_r per token) and up-projects every
    cached latent with kv_b each step; the absorbed form attends over the latent instead (no kv_b)."""
    torch = pytest.importorskip("torch")
    t = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import DynamicCache

    from costspec.model import serve

    batch, context = 2, 40
    config = t.DeepseekV3Config(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=32, qk_nope_head_dim=8,
                                qk_rope_head_dim=4, v_head_dim=8, vocab_size=100, first_k_dense_replace=2,
                                n_routed_experts=4, attn_implementation="sdpa", max_position_embeddings=256)
    with torch.device("meta"):
        model = t.DeepseekV3Model(config).eval()
    cache = DynamicCache(config=config)
    for layer in range(2):
        cache.update(torch.empty(batch, 1, context, 32, device="meta"),
                     torch.empty(batch, 1, context, 4, device="meta"), layer)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(input_ids=torch.zeros(batch, 1, dtype=torch.long, device="meta"), past_key_values=cache,
                    use_cache=True, position_ids=torch.full((batch, 1), context, device="meta"))
    held = sum(x.numel() for layer in out.past_key_values.layers for x in (layer.keys, layer.values))
    spec = serve(loads(MLA_SPEC.replace("ABSORB", "false")), "decode", context)
    values = spec.bind(batch=batch)
    cached = sum(n.op.kv_cache(n.call) for n in spec.op_nodes()) * 2  # one mla op node, 2 instances
    assert (spec.report("forward", values).tc, int(cached.xreplace(values))) == (counter.get_total_flops(), held)
    assert held == 2 * batch * (32 + 4) * (context + 1)
    absorbed = serve(loads(MLA_SPEC.replace("ABSORB", "true")), "decode", context)
    sdpa = absorbed.node("repeat.attn.sdpa").forward().matmul["sdpa"].xreplace(absorbed.bind(batch=batch))
    assert sdpa == 2 * batch * 4 * (context + 1) * ((32 + 4) + 32)  # QK^T over r + d_r, AV over r, one query
