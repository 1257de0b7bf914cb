"""costspec.ops.embed: token embeddings, the tied LM head and the position table."""
from __future__ import annotations

import pytest

from costspec.core.errors import SpecError
from tests.ops.helpers import builder, check, rows

torch = pytest.importorskip("torch")

spec = builder(dims="{B: 2, S: 6, C: 8}", input_="[B, S, C]")

LM = """\
    - embedding: {vocab: 11, dim: C}
    - position_embedding: {length: 9}
    - layernorm: {}
    - lm_head: {vocab: 11, tied: TIED}
    """


def test_embedding_input_is_token_ids_in_range():
    model = spec(LM.replace("TIED", "true"), input_="[B, S]")
    _, make_input = model.to_torch()
    ids = make_input("cpu")
    assert ids.dtype == torch.int64 and ids.shape == (2, 6) and 0 <= int(ids.min()) and int(ids.max()) < 11
    assert rows(model)["embed"].tc_flops == rows(model)["embed"].cuda_flops == 0  # a lookup: bytes, no FLOPs


def test_tied_lm_head_shares_the_table_and_counts_it_once():
    tied, untied = (spec(LM.replace("TIED", t), input_="[B, S]") for t in ("true", "false"))
    vocab, c = 11, 8
    assert rows(tied)["lm_head"].params == 0
    assert untied.evaluate().params - tied.evaluate().params == vocab * c
    module, _ = tied.to_torch()
    assert module.lm_head.weight is module.embed.weight
    assert sum(p.numel() for p in module.parameters()) == tied.evaluate().params
    result = check(tied)
    moved = [a for a in result.reconciliations if a.rule == "tied-weight-grad-sum"]
    assert {(a.row, a.pointwise["add"]) for a in moved} == {("lm_head", -vocab * c), ("embed", vocab * c)}
    check(tied, device="cpu")


def test_tied_lm_head_needs_an_embedding():
    model = spec("- lm_head: {vocab: 11, tied: true}")
    with pytest.raises(SpecError, match="tied to the model's embedding layer, but the model has none"):
        model.to_torch()


def test_position_table_must_cover_the_sequence():
    with pytest.raises(SpecError, match="position table length 4 is shorter than the 6 tokens"):
        spec("- position_embedding: {length: 4}")
