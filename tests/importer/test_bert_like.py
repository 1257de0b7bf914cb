"""The BERT-like template's newer families against their transformers classes on meta: XLM-RoBERTa (with the
pooler XLMRobertaModel builds), ELECTRA (embedding_size projected to hidden_size) and DistilBERT. Forward and
train: no failing row, matmul FLOPs and parameters exactly equal. Then refusals, hostile values, and random
valid configs (hypothesis, slow)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from costspec.importer import FAMILIES, import_hf
from costspec.model import loads
from tests.importer.check import assert_exact, assert_refused, hostile_sweep, import_and_check, write_config

transformers = pytest.importorskip("transformers")
pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96,
         "vocab_size": 100}
DISTIL = {"dim": 64, "n_layers": 2, "n_heads": 4, "hidden_dim": 96, "vocab_size": 100, "max_position_embeddings": 40}
# batch 1: the models look their learned positions up in an nn.Embedding (see test_encoders.py's ENCODERS)
FAST = {
    "xlm-roberta": lambda: transformers.XLMRobertaConfig(**SMALL, max_position_embeddings=42),
    "electra": lambda: transformers.ElectraConfig(**SMALL, max_position_embeddings=40, embedding_size=32),
}
SLOW = {
    "electra_same_width": lambda: transformers.ElectraConfig(**SMALL, max_position_embeddings=40, embedding_size=64),
    "distilbert": lambda: transformers.DistilBertConfig(**DISTIL),
    "distilbert_sines_relu": lambda: transformers.DistilBertConfig(**DISTIL, sinusoidal_pos_embds=True,
                                                                   activation="relu"),
}


@pytest.mark.parametrize("name", sorted(FAST))
def test_import_matches_the_transformers_model(name, tmp_path):
    _, results = import_and_check(FAST[name](), tmp_path, batch=1)
    totals = assert_exact(results)
    assert totals["forward"]["spec_matmul"] > 0 and totals["backward"]["spec_matmul"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW))
def test_import_matches_the_transformers_model_slow(name, tmp_path):
    _, results = import_and_check(SLOW[name](), tmp_path, batch=1)
    assert_exact(results)


def test_xlm_roberta_is_its_automodel_with_the_pooler(tmp_path):
    """XLMRobertaModel as AutoModel builds it: the pooler's C x C dense + tanh on the first token, checked on
    pooler_output (the printed command says so)."""
    path = write_config(FAST["xlm-roberta"](), tmp_path)
    imported = import_hf(path)
    assert imported.output == "pooler_output" and imported.family.hf_kwargs == {}
    assert "--against hf:XLMRobertaModel" in imported.text and "--output-field pooler_output" in imported.text
    model = loads(imported.text)
    rows = {row.name: row for row in model.report("forward", model.bind(1)).rows}
    C = 64
    assert rows["pooler"].params == C * C + C and rows["pooler"].tc_flops == 2 * C * C
    assert model.precision.dtype == "bf16"  # no dtype in the config: bf16


def test_electra_projects_the_embeddings(tmp_path):
    model = loads(import_hf(write_config(FAST["electra"](), tmp_path)).text)
    rows = {row.name: row for row in model.report("forward", model.bind(1)).rows}
    E, C, S = 32, 64, 40
    assert rows["embeddings_project"].params == E * C + C and rows["embeddings_project"].tc_flops == 2 * S * E * C
    same = loads(import_hf(write_config(SLOW["electra_same_width"](), tmp_path)).text)
    assert "embeddings_project" not in {row.name for row in same.report("forward", same.bind(1)).rows}


def test_bert_like_families_are_one_template():
    from costspec.importer.families.bert import ENCODERS

    assert {e.model_type for e in ENCODERS} == {"bert", "roberta", "xlm-roberta", "electra", "distilbert"}
    assert {FAMILIES[e.model_type].hf_class for e in ENCODERS} == {
        "BertModel", "RobertaModel", "XLMRobertaModel", "ElectraModel", "DistilBertModel"}


@pytest.mark.parametrize("model_type, key, value, says", [
    ("electra", "is_decoder", True, "is_decoder = True: ELECTRA as a causal decoder"),
    ("xlm-roberta", "position_embedding_type", "relative_key", "only absolute position embeddings"),
    ("xlm-roberta", "max_position_embeddings", 2, "max_position_embeddings = 2: XLM-RoBERTa numbers positions"),
    ("distilbert", "activation", "gelu_fast", "activation = 'gelu_fast': not supported by this importer"),
    ("distilbert", "n_heads", 5, "dim = 768 is not a multiple of n_heads = 5"),
    ("distilbert", "embedding_size", 32, "key embedding_size not understood by the distilbert importer"),
    ("electra", "embedding_size", 0, "embedding_size = 0: expected a whole number >= 1"),
])
def test_refusals_name_the_key(tmp_path, capsys, model_type, key, value, says):
    assert_refused(tmp_path, capsys, transformers.AutoConfig.for_model(model_type).to_dict() | {key: value}, says, key)


@pytest.mark.parametrize("model_type", ["xlm-roberta", "electra", "distilbert"])
def test_every_key_mutated_is_a_spec_or_a_named_refusal(tmp_path, model_type):
    """As test_hostile_configs.py does for the zoo configs: each key of the default config gets a hostile
    value in turn; the import writes a spec that loads or is a CostspecError, never another exception."""
    base = transformers.AutoConfig.for_model(model_type).to_dict()
    refused, _ = hostile_sweep(base, tmp_path, [k for k, v in base.items() if not isinstance(v, dict)],
                               offset=len(model_type))
    assert refused > 0


# ----------------------------------------------------------------------------------------------
# Random valid configs (hypothesis)
# ----------------------------------------------------------------------------------------------
def _check(config) -> None:
    with tempfile.TemporaryDirectory() as folder:
        _, results = import_and_check(config, Path(folder), batch=1)
        assert_exact(results)


@st.composite
def shapes(draw) -> dict:
    heads = draw(st.integers(1, 4))
    return {"heads": heads, "width": heads * draw(st.sampled_from([4, 8, 12])), "layers": draw(st.integers(1, 2)),
            "ffn": draw(st.integers(4, 48)), "vocab": draw(st.integers(8, 200)), "positions": draw(st.integers(8, 40)),
            "act": draw(st.sampled_from(["gelu", "relu", "gelu_pytorch_tanh"]))}


@pytest.mark.slow
@settings(max_examples=5, deadline=None)
@given(s=shapes(), kind=st.sampled_from(["xlm-roberta", "electra", "distilbert"]), embed=st.integers(4, 40),
       types=st.integers(1, 3))
def test_random_bert_like(s, kind, embed, types):
    if kind == "distilbert":
        config = transformers.DistilBertConfig(dim=s["width"], n_heads=s["heads"], n_layers=s["layers"],
                                               hidden_dim=s["ffn"], vocab_size=s["vocab"],
                                               max_position_embeddings=s["positions"],
                                               activation=s["act"] if s["act"] != "gelu_pytorch_tanh" else "gelu")
    else:
        common = {"hidden_size": s["width"], "num_attention_heads": s["heads"], "num_hidden_layers": s["layers"],
                  "intermediate_size": s["ffn"], "vocab_size": s["vocab"], "type_vocab_size": types,
                  "hidden_act": s["act"]}
        config = (transformers.XLMRobertaConfig(**common, max_position_embeddings=s["positions"] + 2, pad_token_id=1)
                  if kind == "xlm-roberta" else
                  transformers.ElectraConfig(**common, max_position_embeddings=s["positions"], embedding_size=embed))
    _check(config)

