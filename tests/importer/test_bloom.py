"""`costspec import hf` of BLOOM (costspec/importer/families/bloom.py) and of Falcon with ALiBi: small configs
built with their transformers config classes (2 layers, small widths, S 8), imported, and checked with
`validate --against hf:BloomForCausalLM` / `hf:FalconForCausalLM` on meta, forward and train: every row PASS,
matmul FLOPs (after the named rules) and parameters exactly equal. BLOOM's counts by hand, its refusals naming
the key, its default config's keys given hostile values, and random valid configs (slow profile).
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from costspec.importer import FAMILIES, import_hf  # noqa: E402
from costspec.model import loads  # noqa: E402
from tests.importer.check import assert_exact, assert_refused, hostile_sweep, import_and_check, read_keys, write_config  # noqa: E402

BLOOM = dict(n_layer=2, hidden_size=64, n_head=4, vocab_size=100)
FALCON_RW = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=100,
                 max_position_embeddings=16, ffn_hidden_size=96, alibi=True)
SHORT = {"S": 8}  # ALiBi has no maximum length: the import's S is 4096
SMALL = {
    "bloom": ("BloomConfig", BLOOM),  # pre-LN, tied head
    "bloom_post_residual": ("BloomConfig", dict(BLOOM, apply_residual_connection_post_layernorm=True, n_head=3,
                                                hidden_size=48, tie_word_embeddings=False, dtype="float16")),
    "falcon_rw": ("FalconConfig", dict(FALCON_RW, multi_query=False, parallel_attn=False, bias=True)),  # Falcon-RW
    "falcon_alibi_mq": ("FalconConfig", FALCON_RW),  # multi-query, parallel on one LayerNorm
    "falcon_alibi_new": ("FalconConfig", dict(FALCON_RW, new_decoder_architecture=True, num_kv_heads=2)),
}


def config(name: str, **changes):
    cls, small = SMALL[name]
    return getattr(transformers, cls)(**{**small, **changes})


def real_params(hf_class: str, cfg) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in getattr(transformers, hf_class)(cfg).parameters())


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_config_matches_its_causal_lm(tmp_path, name):
    cfg = config(name)
    _, results = import_and_check(cfg, tmp_path, dims=SHORT)
    totals = assert_exact(results)
    assert any(row.name == "lm_head" and row.matched for row in results["forward"].phases["forward"].rows)
    hf_class = FAMILIES[cfg.model_type].hf_class
    assert totals["forward"]["spec_params"] == real_params(hf_class, cfg)


def test_bloom_counts_by_hand_and_header(tmp_path):
    """S 8, C 64, 4 heads of 16, F 4C, L 2, V 100, tied head: the projections, QK^T and AV, the LM head; ALiBi
    one add per score (the causal mask folded in), no parameters."""
    text = import_hf(write_config(config("bloom"), tmp_path)).text
    model = loads(text)
    values = model.bind(1, SHORT)
    report = model.report("forward", values)
    S, C, h, d, L, V = 8, 64, 4, 16, 2, 100
    F = 4 * C
    per_layer = 2 * S * C * 3 * C + 2 * S * C * C + 2 * 2 * S * C * F + 2 * 2 * h * S * S * d
    assert report.tc == L * per_layer + 2 * S * C * V
    assert report.params == V * C + 2 * C + L * (3 * C * C + 3 * C + C * C + C + 2 * C * F + F + C + 4 * C) + 2 * C
    assert "alibi: true" in text and "backend: eager" in text
    assert "costspec validate" in text and "--against hf:BloomForCausalLM" in text
    assert "precision: {dtype: bf16}  # the config names no dtype: bf16" in text


def test_falcon_alibi_replaces_rope(tmp_path):
    text = import_hf(write_config(config("falcon_rw"), tmp_path)).text
    assert "alibi: true" in text and "rope: true" not in text and "rotate_half" not in text


@pytest.mark.parametrize("key, value, message", [
    ("slow_but_exact", True, "slow_but_exact = True: with pretraining_tp > 1"),
    ("n_head", 5, "hidden_size = 64 is not a multiple of n_head = 5"),
    ("num_experts", 8, "key num_experts not understood by the bloom importer"),
    ("apply_residual_connection_post_layernorm", "yes", "apply_residual_connection_post_layernorm = 'yes': expected"),
    ("n_layer", 0, "n_layer = 0: expected"),
])
def test_bloom_refusals_name_the_key(tmp_path, capsys, key, value, message):
    assert_refused(tmp_path, capsys, config("bloom", pretraining_tp=2).to_dict() | {key: value}, message, key)


def test_bloom_default_config_keys_hostile(tmp_path):
    """Each key of transformers' default BloomConfig, given a hostile value in turn: a spec that loads, or an
    ImportProblem naming the file (never another exception)."""
    base = transformers.AutoConfig.for_model("bloom").to_dict()
    keys = read_keys(base)
    refused, _ = hostile_sweep({**base, "n_layer": 2}, tmp_path, keys, per_key=2)
    assert refused > len(keys) // 2


@st.composite
def bloom_configs(draw) -> dict:
    heads = draw(st.integers(1, 5))
    return dict(n_layer=draw(st.integers(1, 2)), n_head=heads, hidden_size=heads * draw(st.sampled_from([4, 8])),
                vocab_size=draw(st.integers(8, 120)), tie_word_embeddings=draw(st.booleans()),
                apply_residual_connection_post_layernorm=draw(st.booleans()),
                pretraining_tp=draw(st.integers(1, 4)))


@pytest.mark.slow
def test_random_bloom_configs_import_and_match_transformers(tmp_path_factory):
    @settings(max_examples=4, deadline=None)
    @given(bloom_configs(), st.integers(1, 12))
    def check(kwargs, s):
        folder = tmp_path_factory.mktemp("bloom")
        _, results = import_and_check(transformers.BloomConfig(**kwargs), folder, dims={"S": s})
        assert_exact(results)

    check()
