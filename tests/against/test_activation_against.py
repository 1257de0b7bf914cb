"""Activations against transformers' own (`validate --against`): each ACT2FN activation (and torch's
Hardsigmoid / Hardtanh) in a tiny model, forward and train, every pointwise kind exact; GPT-2 with its
real activation (gelu_new, eight python-level ops) instead of the one-op gelu_tanh stand-in."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from costspec.against.check import summary, validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.model import loads  # noqa: E402
from tests.common import ROOT  # noqa: E402

from .activation_models import ACTIVATIONS  # noqa: E402

TINY = """\
costspec: 1
name: tiny
dims: {{B: 3, C: 8}}
precision: {{dtype: fp32}}
input: [B, C]
layers:
  - linear: {{out: C}}
    source: fc1
  - activation: {{fn: {fn}}}
    source: act
  - linear: {{out: 2}}
    source: fc2
"""


def check(model, target: str, pass_: str):
    values = model.bind()
    result = validate_against(model, values, load_target(target, model, values, "meta"), pass_)
    assert result.ok, "\n".join(result.failures())
    assert not result.unknown
    return result


@pytest.mark.parametrize("pass_", ["forward", "train"])
@pytest.mark.parametrize("key", sorted(ACTIVATIONS))
def test_activation_matches_transformers(key, pass_):
    result = check(loads(TINY.format(fn=ACTIVATIONS[key])), f"tests.against.activation_models:{key}", pass_)
    (act,) = [r for r in result.phases["forward"].rows if r.name == "act"]
    assert act.status == "PASS" and act.real_pointwise == act.spec_pointwise
    if pass_ == "train":
        (back,) = [r for r in result.phases["backward"].rows if r.name == "act"]
        assert back.status == "PASS" and back.real_pointwise == back.spec_pointwise


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_gpt2_with_gelu_new_matches_gpt2_as_transformers_builds_it(pass_):
    """specs/gpt2_small.yaml keeps the one-op gelu_tanh (its numbers are the zoo's); with fn: gelu_new the
    same spec matches GPT2LMHeadModel with its default activation, no --config-set needed."""
    text = (ROOT / "specs/gpt2_small.yaml").read_text().replace("fn: gelu_tanh}", "fn: gelu_new}")
    model = loads(text)
    values = model.bind(sets={"S": 16, "C": 64, "heads": 4, "L": 2, "V": 100, "P": 32})
    config = {"n_embd": "64", "n_layer": "2", "n_head": "4", "vocab_size": "100", "n_positions": "32",
              "bos_token_id": "0", "eos_token_id": "0"}
    real = load_target("hf:GPT2LMHeadModel", model, values, "meta", None, config)
    result = validate_against(model, values, real, pass_)
    assert result.ok, "\n".join(result.failures())
    for totals in summary(result).values():
        assert totals["real_reconciled"] == totals["spec_matmul"] and totals["real_params"] == totals["spec_params"]
    (mlp,) = [r for r in result.phases["forward"].rows if r.name == "h.mlp"]
    L, S, F = 2, 16, 256
    assert mlp.real_pointwise["cube"] == mlp.spec_pointwise["cube"] == L * S * F  # torch.pow(x, 3.0)
    assert mlp.real_pointwise["tanh"] == L * S * F
