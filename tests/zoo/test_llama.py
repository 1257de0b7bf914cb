"""specs/llama_1b.yaml (Llama-3.2-1B, tied LM head) and specs/llama3_8b.yaml (Llama-3.1-8B, untied LM head)
against transformers' LlamaForCausalLM built on `meta` from the models' config.json
(tests/data/hf_configs/, written by tools/make_hf_configs.py).

`validate --against` at 2 layers (the real widths and vocabulary), forward and train, through the CLI as a
user runs it; the full-size models, forward and train, through the API (the 8B marked slow): matmul FLOPs
and parameters exactly, every other difference a named rule; the parameters equal what transformers' model
holds.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from costspec.against.check import summary, validate_against  # noqa: E402
from costspec.against.target import load_target  # noqa: E402
from costspec.model import load  # noqa: E402
from tests.common import ROOT, invoke  # noqa: E402

CONFIGS = ROOT / "tests/data/hf_configs"
LLAMAS = ["llama_1b", "llama3_8b"]


def hf_model(name: str, **changes):
    """LlamaForCausalLM on meta from the model's config.json (with `changes`)."""
    import json

    config = transformers.LlamaConfig(**{**json.loads((CONFIGS / f"{name}.json").read_text()), **changes})
    with torch.device("meta"):
        return transformers.LlamaForCausalLM(config)


@pytest.mark.parametrize("pass_", ["forward", "train"])
@pytest.mark.parametrize("name", LLAMAS)
def test_two_layers_validate_against_llama_for_causal_lm(name, pass_):
    out = invoke("validate", f"specs/{name}.yaml", "--set", "L=2", "--set", "S=64", "--pass", pass_,
                 "--against", "hf:LlamaForCausalLM", "--config", f"tests/data/hf_configs/{name}.json",
                 "--config-set", "num_hidden_layers=2", "--device", "meta")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "structure: exact" in out.stdout and "result: PASS" in out.stdout
    assert "unmatched real modules: none" in out.stdout


# the 8B at full size takes 10-20 s a pass on 2 cores: slow (its 2-layer check above is the fast variant)
FULL_SIZE = [pytest.param(name, pass_, marks=(pytest.mark.slow,) if name == "llama3_8b" else ())
             for name in LLAMAS for pass_ in ("forward", "train")]


@pytest.mark.parametrize("name, pass_", FULL_SIZE)
def test_full_size_matches_llama_for_causal_lm(name, pass_):
    model = load(ROOT / f"specs/{name}.yaml")
    values = model.bind()
    real = load_target("hf:LlamaForCausalLM", model, values, "meta", str(CONFIGS / f"{name}.json"))
    result = validate_against(model, values, real, pass_)
    assert result.ok, "\n".join(result.failures())
    assert not result.rowmap.unmatched_real
    for phase in summary(result).values():
        assert phase["real_reconciled"] == phase["spec_matmul"] and phase["real_params"] == phase["spec_params"]
    (head,) = [r for r in result.phases["forward"].rows if r.name == "lm_head"]
    dims = {str(symbol): int(value) for symbol, value in values.items()}
    assert head.real_matmul == head.spec_matmul == 2 * dims["B"] * dims["S"] * dims["C"] * dims["V"]


@pytest.mark.parametrize("name, params, tied", [("llama_1b", 1_235_814_400, True),
                                                ("llama3_8b", 8_030_261_248, False)])
def test_parameters_are_transformers_count(name, params, tied):
    """The published sizes (1.24 B and 8.03 B): every parameter LlamaForCausalLM holds, the tied head once."""
    real = hf_model(name)
    assert (real.lm_head.weight is real.model.embed_tokens.weight) is tied
    assert sum(p.numel() for p in real.parameters()) == params
    assert load(ROOT / f"specs/{name}.yaml").evaluate().params == params
