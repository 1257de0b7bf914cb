"""attention's T5 decoder options, by their conventions: causal with a T5 bias (one-directional buckets, the
bias kept below the diagonal by a where in every layer, one float mask for the SDPA) and zero_bias (T5's
cross-attention: an all-zero position bias added to every score), against transformers' T5Attention where
the module's buckets are concerned."""
from __future__ import annotations

import pytest

import costspec
from tests.ops.helpers import builder, check, forward

torch = pytest.importorskip("torch")

B, S, C, H = 2, 6, 8, 2
spec = builder(dims=f"{{B: {B}, S: {S}, C: {C}}}", input_="[B, S, C]")
T5 = "heads: 2, rel_bias: t5, buckets: 8, max_distance: 20, scale: none"


def _pointwise(model, pass_: str) -> dict[str, int]:
    return {kind: n for kind, n in forward(model, pass_)[1].items() if n}


def test_causal_bias_is_one_where_per_layer_and_one_add_per_score():
    """Causal T5 vs the same layer bidirectional: h*S*S more selects (the where) forward and backward, no
    select per score (flash masks nothing in registers: the mask is in the bias), the same adds."""
    causal = spec(f"- attention: {{{T5}, causal: true}}")
    both = spec(f"- attention: {{{T5}}}")
    fwd_c, fwd_b = _pointwise(causal, "forward"), _pointwise(both, "forward")
    assert fwd_c.get("select", 0) - fwd_b.get("select", 0) == H * S * S
    assert fwd_c["add"] == fwd_b["add"]
    bwd_c, bwd_b = _pointwise(causal, "backward"), _pointwise(both, "backward")
    assert bwd_c.get("select", 0) - bwd_b.get("select", 0) == H * S * S


def test_one_token_runs_no_where():
    one = builder(dims=f"{{B: {B}, S: 1, C: {C}}}", input_="[B, S, C]")
    causal, both = one(f"- attention: {{{T5}, causal: true}}"), one(f"- attention: {{{T5}}}")
    assert _pointwise(causal, "forward") == _pointwise(both, "forward")


def test_causal_bias_traffic_reads_and_writes_the_bias_once_more():
    from costspec.core.vocab import Fusion, Phase

    def sdpa_traffic(model, pass_):
        node = next(model.op_nodes())
        (part,) = [t for t in node.op.traffic(node.call, pass_, True, Fusion.DEFAULT) if t.part == "sdpa"]
        return part

    causal = spec(f"- attention: {{{T5}, causal: true}}")
    both = spec(f"- attention: {{{T5}}}")
    values = causal.bind()
    for pass_ in (Phase.FORWARD, Phase.BACKWARD):
        c, b = sdpa_traffic(causal, pass_), sdpa_traffic(both, pass_)
        assert int((c.reads - b.reads).xreplace(values)) == H * S * S
        assert int((c.writes - b.writes).xreplace(values)) == H * S * S


def test_zero_bias_is_one_add_per_score_forward_only():
    T = 5

    def cross(extra: str):
        return costspec.loads(f"costspec: 1\nname: t\ndims: {{B: {B}, S: {S}, C: {C}}}\ninput: [B, S, C]\n"
                              f"inputs: {{enc: [B, {T}, {C}]}}\nlayers:\n  - layernorm: {{}}\n"
                              f"  - attention: {{heads: 2, kv: enc{extra}}}\n")

    with_bias, without = cross(", zero_bias: true"), cross("")
    assert _pointwise(with_bias, "forward")["add"] - _pointwise(without, "forward").get("add", 0) == B * H * S * T
    assert _pointwise(with_bias, "backward") == _pointwise(without, "backward")
    assert with_bias.cost().params == without.cost().params
    check(with_bias)


@pytest.mark.parametrize("buckets, distance, length", [(32, 128, 200), (8, 20, 40), (4, 3, 9)])
def test_one_directional_buckets_are_transformers(buckets, distance, length):
    """The module's bucket index for a causal layer is T5Attention's _relative_position_bucket with
    bidirectional=False (the encoder's, bidirectional=True, likewise)."""
    transformers = pytest.importorskip("transformers")
    from costspec.nn.positions import RelBiasTable

    bucket = transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket
    rel = torch.arange(length)[None, :] - torch.arange(length)[:, None]
    table = RelBiasTable(2, "t5", buckets, distance)
    for bidirectional in (False, True):
        if bidirectional and distance <= buckets // 4:
            continue
        want = bucket(rel, bidirectional=bidirectional, num_buckets=buckets, max_distance=distance)
        assert torch.equal(table.t5_index(length, bidirectional), want)


def test_causal_t5_layers_sharing_one_bias_validate():
    model = spec(f"""\
        - layernorm: {{}}
        - attention: {{{T5}, causal: true, rel_bias_readers: 1}}
        - attention: {{heads: 2, rel_bias: t5, rel_bias_shared: true, causal: true, scale: none}}
        """)
    check(model)
