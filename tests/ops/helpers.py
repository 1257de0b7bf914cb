"""Builders shared by the op tests: a one-layer-list spec, and its costs at the bound dims."""
from __future__ import annotations

import textwrap

import costspec


def builder(dims: str, input_: str):
    """spec(layers, dims=dims, input_=input_) -> the model of `layers` (YAML list items) with these defaults."""

    def spec(layers: str, dims: str = dims, input_: str = input_) -> costspec.Model:
        return costspec.loads(textwrap.dedent(f"""\
            costspec: 1
            name: t
            dims: {dims}
            input: {input_}
            layers:
            """) + textwrap.indent(textwrap.dedent(layers), "  "))

    return spec


def forward(model, pass_="forward"):
    """({matmul kind: FLOPs}, {pointwise kind: count}) of the whole model in `pass_`, at the bound dims."""
    cost = model.cost(pass_)
    values = model.bind()
    return ({k: int(v.xreplace(values)) for k, v in cost.matmul.items()},
            {k: int(v.xreplace(values)) for k, v in cost.pointwise.items()})


def params(model) -> int:
    return int(model.cost().params.xreplace(model.bind()))


def out_shape(model) -> tuple:
    values = model.bind()
    return tuple(int(d.xreplace(values)) for d in model.out_shape)


def rows(model, pass_="forward", **dims):
    return {r.name: r for r in model.evaluate(pass_, **dims).rows}


def matmul(model, name, pass_="forward"):
    """The matmul FLOPs of the row `name` in `pass_` (forward, or backward with the input's gradient)."""
    node = next(n for n, *_ in model.walk() if n.name == name)
    cost = node.forward() if pass_ == "forward" else node.backward(True)
    return int(sum(cost.matmul.values()).xreplace(model.bind()))


def check(model, pass_="train", device="meta"):
    """validate(): the model's formulas against its generated module (needs torch)."""
    from costspec.runtime.validate import render_table, validate

    result = validate(model, model.bind(), pass_, device)
    assert result.ok, render_table(result)
    return result
