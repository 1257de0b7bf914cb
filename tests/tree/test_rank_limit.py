"""Every op refuses a value of more than MAX_RANK dims alike, however the value was made (a spec
input, a chain of reshapes): the builder checks each op's input and output, so a rank-7 value is
never accepted by one op (layernorm) and refused by another (linear)."""
from __future__ import annotations

import pytest

from costspec.core.errors import SpecError
from costspec.model import loads
from costspec.ops.opdef import MAX_RANK

OPS = ["layernorm: {}", "rmsnorm: {}", "softmax: {}", "activation: {fn: gelu}", "linear: {out: 2}",
       "mlp: {hidden: 4}", "dropout: {}", "flatten: {}", "mean: {axes: [-1]}"]


def _spec(input_: str, layers: list[str], dims: str = "{B: 2, C: 64}") -> str:
    return (f"costspec: 1\nname: r\ndims: {dims}\ninput: {input_}\nlayers:\n"
            + "".join(f"  - {layer}\n" for layer in layers))


def test_the_limit_is_six():
    assert MAX_RANK == 6


@pytest.mark.parametrize("op", OPS)
def test_a_rank_7_value_from_a_chain_of_reshapes_is_refused_where_it_is_made(op):
    text = _spec("[B, C]", ["reshape: {shape: [B, 4, 16]}", "reshape: {shape: [B, 2, 2, 2, 2, 2, 2]}", op])
    with pytest.raises(SpecError, match=r"reshape gives a value of rank 7, shape \[B, 2, 2, 2, 2, 2, 2\] "
                                        r"\(expected at most 6 dims\)"):
        loads(text)


@pytest.mark.parametrize("op", OPS)
def test_a_rank_7_input_is_refused_by_every_op_alike(op):
    kind = op.split(":")[0]
    text = _spec("[B, C, C, C, C, C, C]", [op], "{B: 2, C: 2}")
    with pytest.raises(SpecError, match=rf"{kind} reads a value of rank 7, shape \[B, C, C, C, C, C, C\] "
                                        r"\(expected at most 6 dims\)"):
        loads(text)


@pytest.mark.parametrize("op", [op for op in OPS if not op.startswith("mlp")])  # mlp: ranks 2 to 4
def test_rank_6_is_accepted(op):
    loads(_spec("[B, C, C, C, C, C]", [op], "{B: 2, C: 2}"))
