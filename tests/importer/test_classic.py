"""`costspec import hf` for the decoders outside the template: falcon, gptj, opt (costspec/importer/families/
falcon.py, gptj.py, opt.py), each imported as its whole *ForCausalLM with its LM head.

Each variant: a small config built with its transformers config class (2 layers, small widths), imported, and
the spec checked with `validate --against hf:<*ForCausalLM>` on meta, forward and train: every row PASS,
matmul FLOPs (after the named rules) and parameters exactly equal, the parameters equal to the class's own
count. A hypothesis property test draws each family's switches (slow profile); the refusals name the key.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from costspec.importer import FAMILIES, import_hf  # noqa: E402
from tests.importer.check import assert_exact, assert_refused, hostile_sweep, import_and_check, read_keys, write_config  # noqa: E402

FALCON = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=100, max_position_embeddings=16,
              ffn_hidden_size=96)
GPTJ = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=16, rotary_dim=8, n_inner=96)
OPT = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=100, max_position_embeddings=16,
           ffn_dim=96, word_embed_proj_dim=64)
# name: (model_type, config class, kwargs)
SMALL = {
    "falcon_7b": ("falcon", "FalconConfig", FALCON),  # multi-query, parallel on one LayerNorm, tied
    "falcon_40b": ("falcon", "FalconConfig", dict(FALCON, new_decoder_architecture=True, num_kv_heads=2, bias=True,
                                                  tie_word_embeddings=False)),
    "falcon_sequential": ("falcon", "FalconConfig", dict(FALCON, multi_query=False, parallel_attn=False)),
    "falcon_new_one_norm": ("falcon", "FalconConfig", dict(FALCON, new_decoder_architecture=True, num_kv_heads=4,
                                                           num_ln_in_parallel_attn=1, activation="relu")),
    "gptj": ("gptj", "GPTJConfig", GPTJ),  # gelu_new (its python-level ops a named rule), untied biased head
    "gptj_full_rotary_tied": ("gptj", "GPTJConfig", dict(GPTJ, rotary_dim=16, tie_word_embeddings=True,
                                                         activation_function="relu")),
    "opt_125m": ("opt", "OPTConfig", OPT),  # pre-LN, biases, tied head
    "opt_350m": ("opt", "OPTConfig", dict(OPT, word_embed_proj_dim=32, do_layer_norm_before=False, enable_bias=False,
                                          layer_norm_elementwise_affine=False, tie_word_embeddings=False,
                                          activation_function="gelu_new")),
}
FAST = ("falcon_40b", "gptj", "opt_350m")


def config(name: str, **changes):
    _, cls, small = SMALL[name]
    return getattr(transformers, cls)(**{**small, **changes})


def real_params(name: str, folder) -> int:
    model_type, cls, _ = SMALL[name]
    hf = getattr(transformers, FAMILIES[model_type].hf_class)
    cfg = getattr(transformers, cls).from_json_file(str(folder / "config.json"))
    with torch.device("meta"):
        return sum(p.numel() for p in hf(cfg).parameters())


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in sorted(SMALL)])
def test_small_config_matches_its_causal_lm(tmp_path, name):
    _, results = import_and_check(config(name), tmp_path)
    totals = assert_exact(results)
    assert any(row.name == "lm_head" and row.matched for row in results["forward"].phases["forward"].rows)
    assert totals["forward"]["spec_params"] == real_params(name, tmp_path)


def test_falcon_counts_by_hand(tmp_path):
    """Falcon-7B's layout at S 16, C 64, 4 heads of 16 and one key/value head, F 96, L 2, V 100, tied head."""
    text = import_hf(write_config(config("falcon_7b"), tmp_path)).text
    from costspec.model import loads

    model = loads(text)
    report = model.report("forward", model.bind())
    S, C, F, L, V, d = 16, 64, 96, 2, 100, 16
    per_layer = 2 * S * C * (4 + 2) * d + 2 * S * C * C + 2 * 2 * S * C * F + 2 * 2 * 4 * S * S * d
    assert report.tc == L * per_layer + 2 * S * C * V
    assert report.params == V * C + L * (C * 6 * d + C * C + 2 * C * F + 2 * C) + 2 * C
    assert "precision: {dtype: bf16}  # the config names no dtype: bf16" in text
    assert "--against hf:FalconForCausalLM" in text


@pytest.mark.parametrize("name, key, value, message", [
    ("falcon_7b", "alibi", "yes", "alibi = 'yes': expected true or false"),
    ("falcon_40b", "parallel_attn", False, "parallel_attn = False: new_decoder_architecture with sequential"),
    ("falcon_sequential", "num_kv_heads", 2, "num_kv_heads = 2: expected num_attention_heads (4)"),
    ("falcon_40b", "num_ln_in_parallel_attn", 3, "num_ln_in_parallel_attn = 3: expected 1 or 2"),
    ("falcon_7b", "rope_parameters", {"rope_type": "ntk", "factor": 2.0}, "RoPE 'ntk' is not a rope_type"),
    ("falcon_7b", "activation", "mish", "activation = 'mish': not supported"),
    ("falcon_7b", "num_experts", 8, "key num_experts not understood by the falcon importer"),
    ("falcon_7b", "num_hidden_layers", 10**30, "num_hidden_layers = 1000000000000000000000000000000: expected"),
    ("falcon_40b", "num_kv_heads", 3, "num_kv_heads = 3 does not divide num_attention_heads = 4"),
    ("falcon_7b", "ffn_hidden_size", "abc", "ffn_hidden_size = 'abc': expected a whole number"),
    ("falcon_7b", "bias", "yes", "bias = 'yes': expected true or false"),
    ("gptj", "rotary_dim", None, "rotary_dim = None: null: GPTJAttention then builds sin / cos tables"),
    ("gptj", "rotary_dim", 7, "rotary_dim = 7: expected an even number"),
    ("gptj", "rotary_dim", 32, "rotary_dim = 32: expected a whole number >= 2 (at most 16)"),
    ("gptj", "activation_function", "gelu_fast", "activation_function = 'gelu_fast': not supported"),
    ("opt_125m", "word_embed_proj_dim", 0, "word_embed_proj_dim = 0: expected a whole number >= 1"),
    ("opt_125m", "do_layer_norm_before", 1, "do_layer_norm_before = 1: expected true or false"),
    ("opt_125m", "activation_function", "gelu_fast", "activation_function = 'gelu_fast': not supported"),
    ("opt_125m", "num_attention_heads", 5, "hidden_size = 64 is not a multiple of num_attention_heads = 5"),
    ("gptj", "n_head", 3, "n_embd = 64 is not a multiple of n_head = 3"),
])
def test_refusals_name_the_key(tmp_path, capsys, name, key, value, message):
    assert_refused(tmp_path, capsys, config(name).to_dict() | {key: value}, message, key)


@pytest.mark.parametrize("model_type", ["falcon", "gptj", "opt"])
def test_every_key_of_the_default_config_hostile_is_a_spec_or_a_named_refusal(tmp_path, model_type):
    """Each key of transformers' default config, given a hostile value in turn: a spec that loads, or an
    ImportProblem naming the file (never another exception)."""
    base = transformers.AutoConfig.for_model(model_type).to_dict()
    keys = read_keys(base)
    depth = "n_layer" if "n_layer" in base else "num_hidden_layers"
    refused, _ = hostile_sweep({**base, depth: 2}, tmp_path, keys, per_key=2)
    assert refused > len(keys) // 2


# ----------------------------------------------------------------------------------------------
# random valid configs
# ----------------------------------------------------------------------------------------------
@st.composite
def falcon_configs(draw) -> dict:
    kv = draw(st.integers(1, 2))
    heads = kv * draw(st.integers(1, 3))
    new = draw(st.booleans())
    out = dict(num_hidden_layers=draw(st.integers(1, 2)), num_attention_heads=heads,
               hidden_size=heads * draw(st.sampled_from([8, 16])), ffn_hidden_size=draw(st.integers(4, 48)),
               vocab_size=draw(st.integers(8, 120)), max_position_embeddings=draw(st.integers(4, 24)),
               tie_word_embeddings=draw(st.booleans()), bias=draw(st.booleans()), new_decoder_architecture=new,
               activation=draw(st.sampled_from(["gelu", "relu", "silu"])), alibi=draw(st.booleans()))
    if new:
        out.update(num_kv_heads=kv, num_ln_in_parallel_attn=draw(st.sampled_from([1, 2])))
    else:
        out.update(multi_query=draw(st.booleans()), parallel_attn=draw(st.booleans()))
    return out


@st.composite
def gptj_configs(draw) -> dict:
    heads, head_dim = draw(st.integers(1, 3)), draw(st.sampled_from([8, 16]))
    return dict(n_layer=draw(st.integers(1, 2)), n_head=heads, n_embd=heads * head_dim,
                rotary_dim=2 * draw(st.integers(1, head_dim // 2)), n_inner=draw(st.integers(4, 48)),
                vocab_size=draw(st.integers(8, 120)), n_positions=draw(st.integers(4, 24)),
                tie_word_embeddings=draw(st.booleans()),
                activation_function=draw(st.sampled_from(["gelu_new", "gelu", "relu", "gelu_pytorch_tanh"])))


@st.composite
def opt_configs(draw) -> dict:
    heads = draw(st.integers(1, 3))
    hidden = heads * draw(st.sampled_from([8, 16]))
    return dict(num_hidden_layers=draw(st.integers(1, 2)), num_attention_heads=heads, hidden_size=hidden,
                word_embed_proj_dim=draw(st.sampled_from([hidden, 8, 24])), ffn_dim=draw(st.integers(4, 48)),
                vocab_size=draw(st.integers(8, 120)), max_position_embeddings=draw(st.integers(4, 24)),
                do_layer_norm_before=draw(st.booleans()), _remove_final_layer_norm=draw(st.booleans()),
                enable_bias=draw(st.booleans()), layer_norm_elementwise_affine=draw(st.booleans()),
                tie_word_embeddings=draw(st.booleans()),
                activation_function=draw(st.sampled_from(["relu", "gelu", "gelu_new", "silu"])))


@pytest.mark.slow
@pytest.mark.parametrize("model_type, strategy", [("falcon", falcon_configs), ("gptj", gptj_configs),
                                                  ("opt", opt_configs)])
def test_random_configs_import_and_match_transformers(tmp_path_factory, model_type, strategy):
    cls = {"falcon": "FalconConfig", "gptj": "GPTJConfig", "opt": "OPTConfig"}[model_type]

    @settings(max_examples=4, deadline=None)
    @given(strategy())
    def check(kwargs):
        folder = tmp_path_factory.mktemp(model_type)
        _, results = import_and_check(getattr(transformers, cls)(**kwargs), folder)
        assert_exact(results)

    check()


def test_import_is_deterministic(tmp_path):
    path = write_config(config("falcon_40b"), tmp_path)
    assert import_hf(path).text == import_hf(path).text
    assert json.loads(path.read_text())["model_type"] == "falcon"
