"""position_embedding at batch 1: a (1, S, C) table added to the tokens gets no batch reduction of its
gradient when B = 1 (autograd's sum_to_size has nothing to sum), B*S*C elements when B > 1. DeiT holds
its table so; BERT, GPT-2 and CLIP look theirs up in an nn.Embedding, whose backward also scatter-adds
the S*C rows at every batch size (the `position-lookup` rule, read from the lookup that ran)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from costspec.model import loads  # noqa: E402
from costspec.runtime.validate import validate  # noqa: E402
from tests.importer.check import assert_exact, import_and_check  # noqa: E402

SPEC = """
costspec: 1
name: positions
dims: {B: 1, S: 8, C: 16}
precision: {dtype: fp32}
input: [B, S, C]
layers:
  - linear: {out: C}
    name: proj
  - position_embedding: {length: 12}
    name: pos
"""


def backward_bias_grad(model, batch: int):
    """The pos layer's backward bias_grad elements: symbolic (batch None) or at a batch."""
    elements = model.node("pos").backward(True).pointwise.get("bias_grad", 0)
    return elements if batch is None else int(elements.xreplace(model.bind(batch)))


def test_the_batch_reduction_runs_only_above_batch_1():
    model = loads(SPEC)
    assert "Min(1, B - 1)" in str(backward_bias_grad(model, None))
    S, C = 8, 16
    assert backward_bias_grad(model, 1) == 0
    assert backward_bias_grad(model, 2) == 2 * S * C and backward_bias_grad(model, 5) == 5 * S * C


@pytest.mark.parametrize("batch", [1, 2])
def test_generated_module_runs_what_the_op_charges(batch):
    model = loads(SPEC)
    assert validate(model, model.bind(batch), "train").ok


SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96}


@pytest.mark.parametrize("batch", [1, 2])
def test_deit_passes_at_batch_1_and_2(batch, tmp_path):
    """DeiT adds its (1, S + 2, C) position table directly: no reduction at batch 1."""
    _, results = import_and_check(transformers.DeiTConfig(**SMALL, image_size=32, patch_size=8), tmp_path,
                                  batch=batch)
    assert_exact(results)


@pytest.mark.parametrize("batch", [1, 2])
def test_bert_lookup_passes_at_batch_1_and_2(batch, tmp_path):
    """BERT looks its positions up: the lookup's S*C scatter-add at every batch, named by the rule."""
    _, results = import_and_check(transformers.BertConfig(**SMALL, vocab_size=100, max_position_embeddings=40),
                                  tmp_path, batch=batch)
    assert_exact(results)
    train = results["train"]
    (rule,) = [a for a in train.reconciliations if a.rule == "position-lookup"]
    assert rule.pointwise == {"scatter_add": 40 * 64}  # S*C, S = max_position_embeddings for the imported BERT
