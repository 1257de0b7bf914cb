"""`costspec import hf` of Jamba (costspec/importer/families/jamba.py): small configs built with JambaConfig (4
layers: attention and Mamba mixers, mixture-of-experts and dense feed-forwards, every combination across the two
layouts), imported, and checked with `validate --against hf:JambaForCausalLM` (batched_mm experts) on meta,
forward and train, at S 4 (the Mamba scan loops in python): every row PASS, matmul FLOPs (after the named rules)
and parameters exactly equal. The layer pattern, refusals naming the key, the default config's keys given hostile
values, and random valid configs (slow profile).
"""
from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from costspec.importer import import_hf  # noqa: E402
from costspec.model import loads  # noqa: E402
from tests.importer.check import assert_exact, assert_refused, hostile_sweep, import_and_check, read_keys, write_config  # noqa: E402

JAMBA = dict(num_hidden_layers=4, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
             intermediate_size=48, num_experts=4, num_experts_per_tok=2, mamba_d_state=4, mamba_dt_rank=3)
SMALL = {
    # layers: mamba+moe, attn+mlp, mamba+moe, attn+mlp
    "alternating": dict(JAMBA, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=0),
    # layers: mamba+mlp, attn+moe, mamba+mlp, mamba+moe; biased Mamba projections, tied head
    "sparse_attention": dict(JAMBA, attn_layer_period=4, attn_layer_offset=1, expert_layer_period=2,
                             expert_layer_offset=1, mamba_proj_bias=True, mamba_conv_bias=False,
                             tie_word_embeddings=True, mamba_expand=1),
}
SHORT = {"S": 4}


def real_params(cfg) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in transformers.JambaForCausalLM(cfg).parameters())


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_config_matches_its_causal_lm(tmp_path, name):
    cfg = transformers.JambaConfig(**SMALL[name])
    _, results = import_and_check(cfg, tmp_path, dims=SHORT)
    totals = assert_exact(results)
    rows = {row.name for row in results["forward"].phases["forward"].rows if row.matched}
    assert "lm_head" in rows
    assert totals["forward"]["spec_params"] == real_params(cfg)


def test_the_layer_pattern_is_the_configs(tmp_path):
    cfg = transformers.JambaConfig(**SMALL["sparse_attention"])
    text = import_hf(write_config(cfg, tmp_path)).text
    model = loads(text)
    kinds = list(zip(cfg.layers_block_type, cfg.layers_num_experts))
    ops = {n.name: n.op.name for n in model.op_nodes()}
    for i, (mixer, experts) in enumerate(kinds):
        assert ops[f"layer{i}.{'attn' if mixer == 'attention' else 'mixer'}"] == (
            "attention" if mixer == "attention" else "mamba")
        assert ops[f"layer{i}.{'moe' if experts > 1 else 'mlp'}"] == ("moe" if experts > 1 else "mlp")
    assert "inner_norms: true" in text and "rope" not in text
    assert "--against hf:JambaForCausalLM" in text and "_experts_implementation=batched_mm" in text


@pytest.mark.parametrize("key, value, message", [
    ("use_mambapy", True, "use_mambapy = True: the mambapy parallel scan"),
    ("hidden_act", "gelu", "hidden_act = 'gelu'"),
    ("attn_layer_offset", 2, "attn_layer_offset = 2: expected less than attn_layer_period = 2"),
    ("num_experts_per_tok", 5, "num_experts_per_tok = 5 is more than num_experts = 4"),
    ("num_key_value_heads", 3, "num_key_value_heads = 3"),
    ("mamba_d_state", 0, "mamba_d_state = 0: expected"),
    ("some_new_switch", 1, "key some_new_switch not understood by the jamba importer"),
])
def test_refusals_name_the_key(tmp_path, capsys, key, value, message):
    assert_refused(tmp_path, capsys, transformers.JambaConfig(**SMALL["alternating"]).to_dict() | {key: value},
                   message, key)


def test_default_config_keys_hostile(tmp_path):
    """Each key of transformers' default JambaConfig, given a hostile value in turn: a spec that loads, or an
    ImportProblem naming the file (never another exception)."""
    base = transformers.AutoConfig.for_model("jamba").to_dict()
    keys = read_keys(base)
    refused, _ = hostile_sweep({**base, "num_hidden_layers": 2}, tmp_path, keys, per_key=2)
    assert refused > len(keys) // 2


@st.composite
def jamba_configs(draw) -> dict:
    kv = draw(st.integers(1, 2))
    heads = kv * draw(st.integers(1, 2))
    experts = draw(st.integers(1, 4))
    attn_period, expert_period = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    attn_offset, layers = draw(st.integers(0, attn_period - 1)), draw(st.integers(1, 4))
    # transformers' JambaModel cannot run without an attention layer (its cache asks one for the length)
    assume(any(i % attn_period == attn_offset for i in range(layers)))
    return dict(num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                hidden_size=heads * draw(st.sampled_from([4, 8])), intermediate_size=draw(st.integers(4, 24)),
                vocab_size=draw(st.integers(8, 60)), num_experts=experts,
                num_experts_per_tok=draw(st.integers(1, experts)), attn_layer_period=attn_period,
                attn_layer_offset=attn_offset, expert_layer_period=expert_period,
                expert_layer_offset=draw(st.integers(0, expert_period - 1)), mamba_d_state=draw(st.integers(1, 4)),
                mamba_d_conv=draw(st.integers(1, 4)), mamba_expand=draw(st.integers(1, 2)),
                mamba_dt_rank=draw(st.integers(1, 4)), mamba_proj_bias=draw(st.booleans()),
                mamba_conv_bias=draw(st.booleans()), tie_word_embeddings=draw(st.booleans()))


@pytest.mark.slow
def test_random_configs_import_and_match_transformers(tmp_path_factory):
    @settings(max_examples=4, deadline=None)
    @given(jamba_configs(), st.integers(1, 4))
    def check(kwargs, s):
        folder = tmp_path_factory.mktemp("jamba")
        _, results = import_and_check(transformers.JambaConfig(**kwargs), folder, dims={"S": s})
        assert_exact(results)

    check()


def test_the_coverage_tool_measures_a_jamba_without_attention_layers(tmp_path):
    """JambaConfig's defaults at 2 layers are two Mamba layers: JambaModel's own forward on meta fails there (its
    full-attention mask asks a Mamba-only cache for a length); tools/hf_coverage.py calls it with no cache and
    its precomputed mask mapping, and its FLOPs and parameters equal the spec's."""
    import json
    import sys

    from tests.common import ROOT

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import hf_coverage
    finally:
        sys.path.pop(0)
    config = transformers.JambaConfig(**{**JAMBA, "num_hidden_layers": 2, "attn_layer_offset": 4,
                                         "attn_layer_period": 8, "expert_layer_offset": 1, "expert_layer_period": 2})
    path = write_config(config, tmp_path)
    imported = import_hf(path)
    spec = tmp_path / "jamba.yaml"
    spec.write_text(imported.text)
    model = loads(imported.text)
    with torch.device("meta"), pytest.raises(ValueError, match="get_seq_length"):
        transformers.JambaForCausalLM(config)(torch.zeros(1, 4, dtype=torch.long))
    info = json.loads(hf_coverage.cli("import", "hf", str(path), "-o", str(tmp_path / "again.yaml"),
                                      "--format", "json").stdout)
    flops, params = hf_coverage.transformers_counts(spec, path, info)
    report = model.report("forward", model.bind(1))
    assert (flops, params) == (report.tc, report.params) and flops > 0
    assert "attention: {heads" not in imported.text and "no layer is attention" in imported.text
