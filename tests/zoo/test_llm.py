"""specs/mistral_7b.yaml and specs/mixtral_8x7b.yaml against transformers' MistralModel / MixtralModel.

Each spec is checked on `meta` (no weights), forward and train: matmul FLOPs (after the named rules)
and parameters exactly, every pointwise kind exactly. The fast cases run the same spec at a small
size (`--set` on the spec, `--config-set` on the real model); the full-size ones are marked slow.

Mixtral's experts: transformers 5 runs them one of three ways (`experts_implementation`): `eager`
loops over the experts a data-dependent `nonzero()` picks (it cannot run on meta), `grouped_mm`
(the default where it can dispatch, what a GPU runs) is a kernel FlopCounterMode has no formula
for (it would count 0), and `batched_mm` gathers each (token, expert) row's weights for one bmm:
T*K rows of GEMVs, counted exactly. The check uses batched_mm; its gather's backward is the spec's
named `scatter_add` rule.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from costspec.against.check import summary, validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.analysis.evaluation import build_report  # noqa: E402
from costspec.model import load, loads  # noqa: E402
from tests.common import ROOT  # noqa: E402

BATCHED_MM = {"_experts_implementation": "batched_mm"}


def against(name: str, target: str, pass_: str, dims: dict | None = None, config: dict | None = None):
    model = load(ROOT / f"specs/{name}.yaml")
    values = model.bind(sets=dims or {})
    real = load_target(target, model, values, "meta", None, {k: str(v) for k, v in (config or {}).items()})
    return validate_against(model, values, real, pass_)


def assert_exact(result) -> dict:
    assert result.ok, "\n".join(result.failures())
    totals = summary(result)
    for phase in totals.values():
        assert phase["real_reconciled"] == phase["spec_matmul"] and phase["real_params"] == phase["spec_params"]
    assert not result.rowmap.unmatched_real
    return totals


def rules(result) -> set[str]:
    return {a.rule for a in result.reconciliations}


# A small Mistral: 2 layers, C 256, 8 heads and 2 KV heads of 32, MLP 384, S 64 with a window of 16
SMALL_MISTRAL = ({"S": 64, "W": 16, "L": 2, "C": 256, "F": 384, "heads": 8, "KV": 2, "V": 1000},
                 {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 384, "num_attention_heads": 8,
                  "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 1000, "sliding_window": 16})
SMALL_MIXTRAL = ({"S": 64, "L": 2, "C": 256, "F": 384, "heads": 8, "KV": 2, "V": 1000, "E": 4},
                 {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 384, "num_attention_heads": 8,
                  "num_key_value_heads": 2, "vocab_size": 1000, "num_local_experts": 4, **BATCHED_MM})


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_small_mistral_matches_mistral_model(pass_):
    dims, config = SMALL_MISTRAL
    totals = assert_exact(against("mistral_7b", "hf:MistralModel", pass_, dims, config))
    # per layer: q, o 2*S*C*C each; k, v 2*S*C*(KV*d) each; gate, up, down 2*S*C*F each;
    # SDPA (executed, the full S x S scores) 2*h*S*S*d*2 = 4*S*S*C
    S, C, F, kvd, L = 64, 256, 384, 2 * 32, 2
    per_layer = 2 * S * C * C * 2 + 2 * S * C * kvd * 2 + 3 * 2 * S * C * F + 4 * S * S * C
    assert totals["forward"]["spec_matmul"] == L * per_layer == 125_829_120
    assert totals["forward"]["spec_params"] == 1000 * C + L * (2 * C * C + 2 * C * kvd + 3 * C * F + 2 * C) + C


def test_small_mistral_names_the_boolean_mask_where():
    """transformers hands SDPA a boolean [B, 1, S, S] sliding-window mask; the math SDPA's where over it
    is read from what ran (the decomposition rule), with no hand-written extra in the spec."""
    dims, config = SMALL_MISTRAL
    result = against("mistral_7b", "hf:MistralModel", "forward", dims, config)
    (rule,) = [a for a in result.reconciliations if a.rule == "sdpa-math-decomposition"]
    assert "a where over the boolean mask passed, [1, 1, Sq, Sk]" in rule.text
    S, h, L = 64, 8, 2
    assert rule.pointwise["select"] == L * (S * S - h * S * S)  # the mask's where, not flash's select per score


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_small_mixtral_matches_mixtral_model(pass_):
    dims, config = SMALL_MIXTRAL
    result = against("mixtral_8x7b", "hf:MixtralModel", pass_, dims, config)
    totals = assert_exact(result)
    S, C, F, E, K, L = 64, 256, 384, 4, 2, 2
    experts = 2 * (S * K) * 3 * C * F  # the T*K rows through gate_up (C -> 2F) and down (F -> C)
    moe = [r for r in result.phases["forward"].rows if r.name == "layers.moe"][0]
    assert moe.real_matmul == moe.spec_matmul == L * (2 * S * C * E + experts) == 151_257_088
    assert moe.real_params == L * (C * E + E * 3 * C * F) == 2_361_344
    if pass_ == "train":
        assert "ignore: layers.*.mlp.experts" in rules(result)
        assert totals["backward"]["spec_matmul"] == 407_371_776


def test_mixtral_default_experts_are_not_countable_on_meta():
    """Why the check names batched_mm: the default (grouped_mm) is refused on meta in fp32, and it has no
    FlopCounterMode formula; eager needs the routing's data."""
    from torch.utils.flop_counter import flop_registry

    assert not any("grouped_mm" in str(op) for op in flop_registry)
    dims, config = SMALL_MIXTRAL
    config = dict(config, _experts_implementation="eager")
    from costspec.against.target import UserCodeError

    with pytest.raises(UserCodeError, match="forward raised NotImplementedError: .*nonzero"):
        against("mixtral_8x7b", "hf:MixtralModel", "forward", dims, config)


def test_mixtral_active_parameters_are_reported():
    model = load(ROOT / "specs/mixtral_8x7b.yaml")
    result = build_report(model, "forward", model.bind())
    C, F, E, L, V, d = 4096, 14336, 8, 32, 32000, 128
    attention = 2 * C * C + 2 * C * 8 * d
    assert result.params == V * C + C + L * (2 * C + attention + C * E + E * 3 * C * F) == 46_571_720_704
    notes = " ".join(n for n in result.notes if "active" in n)
    assert "C*E + 3*C*F*K active per token" in notes


def test_mistral_sliding_window_counted_as_executed_and_useful():
    """S = 8192, W = 4096: executed counts the full S x S scores; useful the W*(W+1)/2 + (S-W)*W pairs."""
    model = load(ROOT / "specs/mistral_7b.yaml")
    executed = build_report(model, "forward", model.bind()).tc
    S, W, C, L = 8192, 4096, 4096, 32
    pairs = W * (W + 1) // 2 + (S - W) * W  # 25,167,872 of S*S = 67,108,864
    assert pairs == 25_167_872
    sdpa_executed = L * 4 * S * S * C
    sdpa_useful = L * 4 * pairs * C
    text = (ROOT / "specs/mistral_7b.yaml").read_text().replace("sliding_window: W}", "sliding_window: W, "
                                                                 "causal_flops: useful}")
    useful_model = loads(text)
    useful = build_report(useful_model, "forward", useful_model.bind()).tc
    assert executed - useful == sdpa_executed - sdpa_useful


@pytest.mark.slow
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_mistral_7b_full_size_matches_mistral_model(pass_):
    """S = 8192 on meta: MistralConfig()'s defaults are Mistral-7B-v0.1's (sliding_window 4096). ~25 s."""
    totals = assert_exact(against("mistral_7b", "hf:MistralModel", pass_))
    assert totals["forward"]["spec_params"] == 7_110_660_096


@pytest.mark.slow
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_mixtral_8x7b_full_size_matches_mixtral_model(pass_):
    """S = 8192 on meta: MixtralConfig()'s defaults are Mixtral-8x7B-v0.1's; batched_mm experts."""
    totals = assert_exact(against("mixtral_8x7b", "hf:MixtralModel", pass_, config=BATCHED_MM))
    assert totals["forward"]["spec_params"] == 46_571_720_704


def test_eval_reports_the_active_parameters_next_to_the_total():
    """Mixtral: 32 layers x (router + 2 of 8 SwiGLU experts) + everything else; 12.75 B of 46.57 B."""
    from costspec.analysis.evaluation import build_report
    from costspec.model import load

    model = load(ROOT / "specs" / "mixtral_8x7b.yaml")
    values = model.bind()
    report = build_report(model, "forward", values)
    C, F, E, K, L = 4096, 14336, 8, 2, 32
    total = report.table.total.values["params"]
    unused = L * (E - K) * 3 * C * F  # the experts a token does not visit
    line = next(n for n in report.notes if n.startswith("active parameters per token"))
    assert f"{total - unused:,} of {total:,}" in line and total - unused == 12_748_853_248
