"""Decode of encoder-decoders (`--phase decode --context N` on BART, T5 and Whisper as `import hf` writes them):
one generation step as transformers runs it with `encoder_outputs` and an EncoderDecoderCache (N self-attention
tokens, the cross-attention's keys and values of the S encoder tokens), compared under FlopCounterMode; the KV
cache's bytes (self and cross) against the cache's tensors; prefill (the whole forward) not refused."""
from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import sympy

from costspec.analysis.serving import backend_doc, decoder_doc
from costspec.core.errors import UsageError
from costspec.importer import import_hf
from costspec.model import loads, serve
from tests.importer.check import write_config

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

CONTEXT, ENCODER = 10, 12  # N cached decoder tokens, S encoder tokens
TOKENS = dict(pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)


def bart():
    return transformers.BartForConditionalGeneration, transformers.BartConfig(
        d_model=64, encoder_layers=1, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=96, decoder_ffn_dim=80, vocab_size=100, max_position_embeddings=128,
        forced_eos_token_id=2, **TOKENS)


def t5():
    return transformers.T5ForConditionalGeneration, transformers.T5Config(
        d_model=64, d_kv=16, d_ff=96, num_layers=1, num_decoder_layers=2, num_heads=2, vocab_size=100, **TOKENS)


def whisper():
    return transformers.WhisperForConditionalGeneration, transformers.WhisperConfig(
        d_model=64, encoder_layers=1, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=2,
        encoder_ffn_dim=96, decoder_ffn_dim=80, vocab_size=100, num_mel_bins=16, max_source_positions=ENCODER,
        max_target_positions=64, suppress_tokens=None, begin_suppress_tokens=None, **TOKENS)


FAMILIES = {"bart": bart, "t5": t5, "whisper": whisper}


def decoder_shape(config) -> tuple[int, int, int]:
    """(decoder layers, decoder heads, head dim)."""
    layers = getattr(config, "decoder_layers", None) or config.num_decoder_layers
    heads = getattr(config, "decoder_attention_heads", None) or config.num_heads
    return layers, heads, getattr(config, "d_kv", None) or config.d_model // heads


def hf_step(cls, config, batch: int, pointwise: bool = False) -> Any:
    """(FLOPs FlopCounterMode counts, elements the EncoderDecoderCache holds after the step) for one decoder token
    per sequence, the encoder's states given (the encoder does not run), the cross cache filled (is_updated: its
    k/v projections do not run). BART builds its decoder mask from an all-ones padding mask, which meta tensors
    cannot inspect (.item()): it runs on cpu, under SDPA's math kernel (decomposed into the counted bmm).
    `pointwise`: {kind: elements} of the CUDA-core work instead."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import DynamicCache, EncoderDecoderCache

    device = "cpu" if cls is transformers.BartForConditionalGeneration else "meta"
    config._attn_implementation = "sdpa"
    with torch.device(device):
        model = cls(config).eval()
    layers, heads, d = decoder_shape(config)
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())  # grown per layer (T5: L != LD)
    for layer in range(layers):
        for part, tokens in ((cache.self_attention_cache, CONTEXT), (cache.cross_attention_cache, ENCODER)):
            k = torch.randn(batch, heads, tokens, d, device=device)
            part.update(k, k.clone(), layer)
        cache.is_updated[layer] = True
    states = torch.randn(batch, ENCODER, config.d_model, device=device)
    ids = torch.zeros(batch, 1, dtype=torch.long, device=device)
    if pointwise:  # the CUDA-core kinds costspec's counter sees on the step, by kind
        from costspec.runtime.runtime_count import measure

        class Step(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, x):
                return self.model(encoder_outputs=(states,), decoder_input_ids=x, past_key_values=cache,
                                  use_cache=True).logits

        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
            measured = measure(Step(), ids, False)
        kinds: Counter = Counter()
        for counts in measured.pointwise["forward"].values():
            kinds.update(counts)
        return dict(kinds)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        out = model(encoder_outputs=(states,), decoder_input_ids=ids, past_key_values=cache, use_cache=True)
    held = out.past_key_values
    parts = (held.self_attention_cache, held.cross_attention_cache)
    return counter.get_total_flops(), sum(t.numel() for c in parts for layer in c.layers for t in (layer.keys,
                                                                                                  layer.values))


def imported(family, tmp_path):
    cls, config = FAMILIES[family]()
    path = write_config(config, tmp_path)
    return cls, config, loads(import_hf(path).text, str(path.with_suffix(".yaml")))


def cache_elements(model, values) -> int:
    cache = sum(step.instances * step.node.op.kv_cache(step.node.call) for step in model.walk()
                if hasattr(step.node, "op") and not hasattr(step.node, "owner"))
    return int(sympy.sympify(cache).xreplace(values))


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_decode_step_equals_transformers(family, batch, tmp_path):
    cls, config, model = imported(family, tmp_path)
    step = serve(model, "decode", CONTEXT)
    values = step.bind(batch, {"S": ENCODER})
    flops, held = hf_step(cls, config, batch)
    assert (step.report("forward", values).tc, cache_elements(step, values)) == (flops, held)
    layers, heads, d = decoder_shape(config)
    assert held == 2 * layers * batch * heads * d * (CONTEXT + 1 + ENCODER)  # self (N + the new one) and cross


def test_bart_cross_attention_reads_its_cache_by_hand(tmp_path):
    _, _, model = imported("bart", tmp_path)
    step = serve(model, "decode", CONTEXT)
    values = step.bind(2, {"S": ENCODER})
    sdpa = step.node("decoder.attn2.sdpa").forward().matmul["sdpa"].xreplace(values)
    assert sdpa == 2 * 2 * 2 * 4 * 1 * ENCODER * 16  # QK^T and AV: one query over S keys, 4 heads of 16
    q = step.node("decoder.attn2.q").forward().matmul["gemm"].xreplace(values)
    assert q == 2 * 2 * 64 * 64  # B rows
    for projected in ("k", "v"):  # projected at prefill
        with pytest.raises(Exception, match="decoder.attn2"):
            step.node(f"decoder.attn2.{projected}")
    assert not any(n.name.startswith("encoder") for n in step.op_nodes())  # the encoder does not run
    assert tuple(int(x.xreplace(values)) for x in step.in_shape) == (2, 1)  # the decoder's one new token


def test_memory_kv_cache_holds_the_cross_cache(cli, tmp_path):
    cls, config, _ = imported("whisper", tmp_path)
    spec = tmp_path / "whisper.yaml"
    spec.write_text(import_hf(tmp_path / "config.json").text)
    result = cli("memory", str(spec), "--phase", "decode", "--context", str(CONTEXT), "--batch", "2",
                 "--format", "json")
    assert result.returncode == 0, result.stderr
    layers, heads, d = decoder_shape(config)
    _, held = hf_step(cls, config, 2)
    kv = json.loads(result.stdout)["kinds"]["kv cache"]["bytes"]
    assert kv == held * 2  # bf16
    assert kv == 2 * layers * 2 * heads * d * ((CONTEXT + 1) + ENCODER) * 2  # self and cross (2*L*h*d*S*bytes)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_decode_memory_holds_the_whole_models_weights(family, tmp_path):
    """The decode step runs neither the encoder nor the cross-attention's k/v projections, but generation keeps
    the whole model loaded: memory's weights are every parameter of the class, at the spec's bf16."""
    from costspec.analysis.memory import memory_kinds

    cls, config, model = imported(family, tmp_path)
    step = serve(model, "decode", CONTEXT)
    values = step.bind(2, {"S": ENCODER})
    weights = next(k for k in memory_kinds(step, "forward", cache=True) if k.name == "weights")
    with torch.device("meta"):
        real = sum(p.numel() for p in cls(config).parameters())
    assert int(weights.bytes.xreplace(values)) == 2 * real
    assert step.report("forward", values).params < real  # what the step itself runs: the decoder, no k/v


def test_prefill_is_the_whole_forward(tmp_path):
    _, _, model = imported("t5", tmp_path)
    values = model.bind(2, {"S": ENCODER, "T": 5})
    assert serve(model, "prefill", None).report("forward", values).tc == model.report("forward", values).tc
    chunk = serve(model, "prefill", CONTEXT)  # the decoder's 5 new tokens after 10 cached ones
    bound = chunk.bind(2, {"S": ENCODER, "T": 5})
    self_sdpa = chunk.node("decoder[first].attn1.sdpa").forward().matmul["sdpa"].xreplace(bound)
    assert self_sdpa == 2 * 2 * 2 * 2 * 5 * (CONTEXT + 5) * 16
    name = next(s.node.name for s in model.walk() if s.node.name.startswith("encoder") and "sdpa" in s.node.name)
    encoder = chunk.node(name).forward().matmul["sdpa"].xreplace(bound)  # the encoder runs, uncached
    assert encoder == model.node(name).forward().matmul["sdpa"].xreplace(values) == 2 * 2 * 2 * 2 * ENCODER ** 2 * 16


def test_cross_attention_to_an_input_is_still_refused(tmp_path):
    text = """
costspec: 1
name: xattn
dims: {B: 1, S: 8, T: 6, C: 32}
input: [B, S, C]
inputs: {image: [B, T, C]}
layers:
  - attention: {heads: 2, causal: true}
  - attention: {heads: 2, kv: image}
"""
    model = loads(text)
    with pytest.raises(UsageError, match="dropping its encoder"):
        serve(model, "decode", 4)


def test_the_decoder_document_keeps_its_source_lines(tmp_path):
    _, _, model = imported("bart", tmp_path)
    doc = model.doc
    first = next(i for i, item in enumerate(doc.data["layers"]) if item.get("input") == "decoder_input_ids")
    step = decoder_doc(doc, {"enc": "S"}, "--phase")
    assert step.data["layers"][0]["embedding"] == {"vocab": "V", "dim": "C"}  # holds the table the encoder held
    assert step.data["input"] == ["B", "T"] and "inputs" not in step.data
    assert step.locate(("layers", 0, "embedding")).line == doc.locate(("layers", first, "embedding")).line
    assert step.locate(("input",)).line == doc.locate(("inputs", "decoder_input_ids")).line


def spec_pointwise(model, batch: int) -> dict[str, int]:
    """The decode step's CUDA-core elements by kind, on PyTorch's math SDPA (as the step runs on meta)."""
    step = serve(model, "decode", CONTEXT)
    step = type(step)(backend_doc(step.doc, "math"))
    values = step.bind(batch, {"S": ENCODER})
    kinds: Counter = Counter()
    for item in step.walk():
        if hasattr(item.node, "op") and not hasattr(item.node, "owner"):
            for kind, n in item.node.forward().pointwise.items():
                kinds[kind] += int(sympy.sympify(n * item.instances).xreplace(values))
    return {k: v for k, v in kinds.items() if v}


def test_decode_cuda_core_work_equals_transformers_but_named_rules(tmp_path):
    """Whisper and BART: every CUDA-core kind equal, but what transformers adds beside the spec, each named:
    Whisper's q scaled after q_proj (the importer's rule: B*T*C per decoder self- and cross-attention, T = 1) and
    BART's final_logits_bias (B*T*V adds, the importer's rule); the new token's position id (cache length + arange:
    one add; BART adds its offset of 2 to it: one more) and, in BART's decoder, the check of the all-ones padding
    mask it builds over the N + 1 keys (B*(N+1) sum, one select) on integer bookkeeping tensors."""
    batch = 2
    for sub in ("whisper", "bart"):
        (tmp_path / sub).mkdir()
    cls, config, model = imported("whisper", tmp_path / "whisper")
    layers = config.decoder_layers
    expected = Counter(spec_pointwise(model, batch))
    expected.update({"scale": 2 * layers * batch * config.d_model, "add": 1, "unknown:aten.arange": 1})
    assert hf_step(cls, config, batch, pointwise=True) == dict(expected)
    cls, config, model = imported("bart", tmp_path / "bart")
    expected = Counter(spec_pointwise(model, batch))
    expected.update({"add": batch * config.vocab_size + 2, "sum": batch * (CONTEXT + 1), "select": 1,
                     "unknown:aten.arange": 1, "unknown:aten._local_scalar_dense": 0})
    assert hf_step(cls, config, batch, pointwise=True) == dict(expected)
