"""`costspec import hf` for the state-space causal LMs (costspec/importer/families/ssm.py): mamba and mamba2, each
imported as its whole *ForCausalLM with its LM head and checked with `validate --against` on meta, forward and
train (every row PASS, matmul FLOPs after the named rules and parameters exactly equal, the parameters equal to
the class's own count). The imported S is 4096 (no maximum); the checks bind S = 8 (transformers loops in python
over the sequence or its chunks). Hypothesis draws random valid configs (slow profile); refusals name the key.
"""
from __future__ import annotations

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from costspec.against.check import validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.importer import import_hf  # noqa: E402
from costspec.model import loads  # noqa: E402
from tests.importer.check import assert_exact, assert_refused, hostile_sweep, read_keys, write_config  # noqa: E402

# one config keeps Mamba2Config's default time_step_limit (0, inf), written by json.dumps as Infinity; the other
# clamps dt to a finite range (the same cost: a clamp either way)
LIMIT = (0.0, 100.0)
SMALL = {
    "mamba": ("MambaConfig", dict(num_hidden_layers=2, hidden_size=16, state_size=4, vocab_size=100)),
    "mamba_biases_untied": ("MambaConfig", dict(num_hidden_layers=2, hidden_size=16, state_size=3, expand=1,
                                                conv_kernel=2, time_step_rank=2, use_bias=True, use_conv_bias=False,
                                                vocab_size=100, tie_word_embeddings=False)),
    "mamba2": ("Mamba2Config", dict(num_hidden_layers=2, hidden_size=32, vocab_size=100, state_size=8, head_dim=16,
                                    num_heads=4, n_groups=2, chunk_size=4)),
    "mamba2_biases_tied": ("Mamba2Config", dict(num_hidden_layers=2, hidden_size=32, vocab_size=100, state_size=2,
                                                head_dim=16, num_heads=4, n_groups=4, chunk_size=2, use_bias=True,
                                                use_conv_bias=False, conv_kernel=3, time_step_limit=LIMIT,
                                                tie_word_embeddings=True)),
}
FAST = ("mamba", "mamba2")


def config(name: str, **changes):
    cls, small = SMALL[name]
    return getattr(transformers, cls)(**{**small, **changes})


def check(cfg, folder, S: int = 8, batch: int = 2):
    """Import `cfg`, bind B and S, validate against the family's class on meta: {pass: AgainstResult}."""
    path = write_config(cfg, folder)
    imported = import_hf(path)
    model = loads(imported.text)
    values = model.bind(sets={"B": batch, "S": S})
    results = {}
    for pass_ in ("forward", "train"):
        real = load_target(f"hf:{imported.family.hf_class}", model, values, "meta", str(path), {})
        results[pass_] = validate_against(model, values, real, pass_)
    return imported, results


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in sorted(SMALL)])
def test_small_config_matches_its_causal_lm(tmp_path, name):
    cfg = config(name)
    imported, results = check(cfg, tmp_path, S=10 if name == "mamba2" else 8)  # S 10: the last chunk padded
    totals = assert_exact(results)
    assert any(row.name == "lm_head" and row.matched for row in results["forward"].phases["forward"].rows)
    with torch.device("meta"):
        real = getattr(transformers, imported.family.hf_class)(cfg)
    assert totals["forward"]["spec_params"] == sum(p.numel() for p in real.parameters())


def test_defaults_bf16_s_4096_and_the_check_command(tmp_path):
    text = import_hf(write_config(config("mamba"), tmp_path)).text
    assert "precision: {dtype: bf16}  # the config names no dtype: bf16" in text
    assert "S: {value: 4096, " in text and "--against hf:MambaForCausalLM" in text
    assert "lm_head: {vocab: V, tied: true}" in text
    assert "lm_head: {vocab: V}" in import_hf(write_config(config("mamba2"), tmp_path)).text


def test_mamba_counts_by_hand(tmp_path):
    """MambaForCausalLM's parameters: embedding, per layer norm + in_proj + conv + x_proj + dt_proj + A, D +
    out_proj, final norm; the tied head adds none."""
    model = loads(import_hf(write_config(config("mamba"), tmp_path)).text)
    C, E, N, R, K, V, L = 16, 32, 4, 1, 4, 100, 2
    layer = C + C * 2 * E + E * K + E + E * (R + 2 * N) + R * E + E + E * N + E + E * C
    assert model.report("forward", model.bind()).params == V * C + L * layer + C


@pytest.mark.parametrize("name, key, value, message", [
    ("mamba", "use_mambapy", True, "use_mambapy = True: the mambapy parallel scan"),
    ("mamba", "hidden_act", "gelu", "hidden_act = 'gelu': not supported by this importer"),
    ("mamba", "expand", 1.5, "expand = 1.5: expected a whole number from 1 to 64"),
    ("mamba", "time_step_rank", "big", "time_step_rank = 'big': expected a whole number"),
    ("mamba", "state_size", 0, "state_size = 0: expected a whole number >= 1"),
    ("mamba2", "num_heads", 3, "num_heads = 3: num_heads x head_dim = 48 is not expand x hidden_size = 64"),
    ("mamba2", "n_groups", 3, "n_groups = 3 does not divide num_heads = 4"),
    ("mamba2", "state_size", 1, "state_size = 1: expected 2 or more: the SSD einsums contract"),
    ("mamba2", "time_step_limit", "wide", "time_step_limit = 'wide': expected [min, max]"),
    ("mamba2", "chunk_size", 10**30, "chunk_size = 1000000000000000000000000000000: expected a whole number"),
    ("mamba2", "num_experts", 4, "key num_experts not understood by the mamba2 importer"),
])
def test_refusals_name_the_key(tmp_path, capsys, name, key, value, message):
    assert_refused(tmp_path, capsys, config(name).to_dict() | {key: value}, message, key)


@pytest.mark.parametrize("model_type", ["mamba", "mamba2"])
def test_every_key_of_the_default_config_hostile_is_a_spec_or_a_named_refusal(tmp_path, model_type):
    base = transformers.AutoConfig.for_model(model_type).to_dict()
    if model_type == "mamba2":
        base["time_step_limit"] = list(LIMIT)
    keys = read_keys(base)
    refused, _ = hostile_sweep({**base, "num_hidden_layers": 2}, tmp_path, keys, per_key=2)
    assert refused > len(keys) // 2


# ----------------------------------------------------------------------------------------------
# random valid configs
# ----------------------------------------------------------------------------------------------
@st.composite
def ssm_configs(draw) -> tuple[str, dict]:
    model_type = draw(st.sampled_from(["mamba", "mamba2"]))
    common = dict(num_hidden_layers=draw(st.integers(1, 2)), vocab_size=draw(st.integers(8, 120)),
                  use_bias=draw(st.booleans()), use_conv_bias=draw(st.booleans()),
                  conv_kernel=draw(st.integers(2, 4)), tie_word_embeddings=draw(st.booleans()),
                  expand=draw(st.integers(1, 2)))
    if model_type == "mamba":
        hidden = draw(st.integers(4, 24))
        return "MambaConfig", dict(common, hidden_size=hidden, state_size=draw(st.integers(1, 6)),
                                   time_step_rank=draw(st.sampled_from(["auto", 1, 3])))
    groups = draw(st.sampled_from([1, 2]))
    heads = groups * draw(st.integers(1, 2))
    head_dim = draw(st.sampled_from([4, 8]))
    hidden = heads * head_dim
    return "Mamba2Config", dict(common, expand=1, hidden_size=hidden, num_heads=heads, head_dim=head_dim,
                                n_groups=groups, state_size=draw(st.integers(2, 6)), chunk_size=draw(st.integers(2, 5)),
                                time_step_limit=LIMIT)


@pytest.mark.slow
def test_random_configs_import_and_match_transformers(tmp_path_factory):
    @settings(max_examples=6, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
    @given(ssm_configs(), st.integers(4, 9))  # S >= conv_kernel (at most 4)
    def run(drawn, S):
        cls, kwargs = drawn
        _, results = check(getattr(transformers, cls)(**kwargs), tmp_path_factory.mktemp("ssm"), S=S)
        assert_exact(results)

    run()


def test_keys_of_the_original_mamba2_configs_are_understood(tmp_path):
    """Mamba-2 configs converted from mamba_ssm carry norm_before_gate and rms_norm, which transformers 5 does not
    read: cost-free, with the reason in the family's list."""
    data = {**config("mamba2").to_dict(), "norm_before_gate": False, "rms_norm": True, "time_step_rank": 256}
    model = loads(import_hf(write_config(data, tmp_path)).text)
    assert model.report("forward", model.bind()).params > 0
