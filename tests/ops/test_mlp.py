"""costspec.ops.mlp: the gated MLP (three projections, one product)."""
from __future__ import annotations

from tests.ops.helpers import builder, check, rows

spec = builder(dims="{B: 2, S: 6, C: 8}", input_="[B, S, C]")


def test_gated_mlp_has_three_projections_and_one_product():
    model = spec("""\
        - layernorm: {}
        - mlp: {hidden: 5, gated: true, fn: silu, bias: false}
        """)
    m, c, f = 2 * 6, 8, 5
    r = rows(model)
    assert [n for n in r if n.startswith("mlp.")] == ["mlp.gate", "mlp.up", "mlp.act", "mlp.mul", "mlp.down"]
    assert r["mlp"].tc_flops == 3 * 2 * m * c * f and r["mlp"].params == 3 * c * f
    assert r["mlp.mul"].cuda_flops == m * f and r["mlp.act"].cuda_flops == 5 * m * f  # silu: 5 FLOPs per element
    check(model)
