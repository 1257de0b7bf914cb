"""costspec.ops.embed: token embeddings, the tied LM head and the position table."""
from __future__ import annotations

import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import costspec
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


# an encoder-decoder's two lookups of one table (T5, BART): the decoder's embedding is tied to the encoder's
SHARED = """\
    - embedding: {vocab: V, dim: C, segments: SEG}
      name: enc_embed
    - layernorm: {}
      save: enc
    - embedding: {vocab: V, dim: C, tied: true}
      name: dec_embed
      input: dec
    - attention: {heads: 2, kv: enc}
      name: cross
    HEAD"""
HEAD = "- lm_head: {vocab: V, tied: true}\n      name: head"


def two_inputs(layers: str, dims: str):
    """A spec of `layers` reading token ids [B, S] and a second input `dec` [B, T]."""
    return costspec.loads(f"costspec: 1\nname: t\ndims: {dims}\ninput: [B, S]\ninputs:\n  dec: [B, T]\nlayers:\n"
                          + textwrap.indent(textwrap.dedent(layers), "  "))


def shared(vocab: int = 11, c: int = 8, b: int = 2, s: int = 5, t: int = 3, head: bool = True, segments: int = 0):
    text = SHARED.replace("SEG", str(segments)).replace("HEAD", HEAD if head else "")
    return two_inputs(text, f"{{B: {b}, S: {s}, T: {t}, V: {vocab}, C: {c}}}")


def test_a_tied_embedding_shares_the_table_counted_once_and_trains_it():
    vocab, c = 11, 8
    model = shared()
    untied = two_inputs(SHARED.replace("SEG", "0").replace(", tied: true", "").replace("HEAD", ""),
                        f"{{B: 2, S: 5, T: 3, V: {vocab}, C: {c}}}")
    assert rows(model)["dec_embed"].params == 0 and rows(model)["enc_embed"].params == vocab * c
    assert untied.evaluate().params - shared(head=False).evaluate().params == vocab * c
    # each lookup after the first adds its gradient of the table into the sum: one add per table element
    back = rows(model, "backward")
    b, s, t = 2, 5, 3
    assert (back["enc_embed"].cuda_flops, back["dec_embed"].cuda_flops) == (b * s * c, b * t * c + vocab * c)
    module, _ = model.to_torch()
    assert module.dec_embed.weight is module.enc_embed.weight is module.head.weight
    assert sum(p.numel() for p in module.parameters()) == model.evaluate().params
    result = check(model)
    moved = {(a.row, a.pointwise["add"]) for a in result.reconciliations if a.rule == "tied-weight-grad-sum"}
    # the head's sum runs in the decoder embedding's backward, the decoder's in the encoder's
    assert moved == {("head", -vocab * c), ("dec_embed", vocab * c), ("dec_embed", -vocab * c),
                     ("enc_embed", vocab * c)} or moved == {("head", -vocab * c), ("enc_embed", vocab * c)}
    check(shared(head=False))
    check(model, device="cpu")


def test_a_tied_embedding_needs_the_untied_one_before_it():
    first = """\
    - embedding: {vocab: 11, dim: C, tied: true}
      name: dec_embed
      save: d
    - embedding: {vocab: 11, dim: C}
      name: enc_embed
      input: dec
    - add: {with: d}
    """
    model = two_inputs(first, "{B: 2, S: 5, T: 5, C: 8}")
    with pytest.raises(SpecError, match="is tied to embedding 'enc_embed', which comes after it"):
        model.to_torch()
    alone = spec("- embedding: {vocab: 11, dim: C, tied: true}", input_="[B, S]")
    with pytest.raises(SpecError, match="tied to the model's embedding layer, but the model has none"):
        alone.to_torch()
    wider = two_inputs(SHARED.replace("SEG", "0").replace("HEAD", "").replace("dim: C, tied", "dim: 2*C, tied"),
                       "{B: 2, S: 5, T: 3, V: 11, C: 8}")
    with pytest.raises(SpecError, match=r"needs a weight of shape \[11, 16\] to tie to embedding 'enc_embed'"):
        wider.to_torch()


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(vocab=st.integers(2, 9), c=st.sampled_from([2, 4, 6]), b=st.integers(1, 3), s=st.integers(1, 4),
       t=st.integers(1, 4), head=st.booleans(), segments=st.integers(0, 2))
def test_random_shared_tables_match_torch(vocab, c, b, s, t, head, segments):
    """Forward and train on meta: every row of random shared-table models (with or without a tied head, an
    owner with segment rows or not) equals the generated module's counts; the table counted once."""
    model = shared(vocab, c, b, s, t, head, segments)
    module, _ = model.to_torch()
    assert sum(p.numel() for p in module.parameters()) == model.evaluate().params
    check(model, "forward")
    check(model)
