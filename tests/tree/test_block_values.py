"""Names saved inside a block are each use's own: a block that saves a value and reads it (a
squeeze-excitation's `save:` / `mul: {with: ...}`) can be used many times, each use reading its own
value (self-validation against autograd, forward and train, with the gradient sums' exact numbers); a
name saved inside a block stays readable after a single use, is refused as ambiguous after several,
and a block parameter gives each use a name of its own (`save: p` with `args: {p: NAME}`)."""
from __future__ import annotations

import pytest

import costspec
from costspec.core.errors import SpecError
from costspec.core.vocab import Phase
from costspec.tree.walk import walk

torch = pytest.importorskip("torch")

from costspec.runtime.validate import validate  # noqa: E402

HEAD = "costspec: 1\nname: blocks\ndims: {B: 2, C: 8, H: 4}\ninput: [B, C, H, H]\n"

SE = """\
blocks:
  se:
    - conv2d: {out: C, kernel: 1}
      save: x
    - mean: {axes: [2, 3], keepdim: true}
    - conv2d: {out: C/4, kernel: 1}
    - activation: {fn: silu}
    - conv2d: {out: C, kernel: 1}
    - activation: {fn: sigmoid}
    - mul: {with: x}
"""

SE_THREE_TIMES = HEAD + SE + """\
layers:
  - block: se
    name: se1
  - block: se
    name: se2
  - block: se
    name: se3
"""


def rows(model) -> dict:
    return {step.node.name: step for step in walk(model.root)}


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_a_block_that_saves_and_reads_a_value_validates_used_three_times(pass_):
    model = costspec.loads(SE_THREE_TIMES)
    result = validate(model, model.bind(), pass_)
    assert result.ok, result.failures()
    found = rows(model)
    values = model.bind()
    # each use saves its own x (read by the mean and the mul): one gradient sum per use, B*C*H*H = 256 adds
    for use in ("se1", "se2", "se3"):
        fan = found[f"{use}.x_fanout"].node
        assert fan.backward(True).pointwise["add"].xreplace(values) == 2 * 8 * 4 * 4
        mul = found[f"{use}.mul"].node
        assert mul.reads == ("x",)
        # x * gate: B*C*H*W multiplies forward; backward the gradient times the gate for x (256) and
        # times x for the gate (256), summed over H x W for the broadcast gate (256 adds)
        assert mul.forward().pointwise["mul"].xreplace(values) == 256
        assert mul.backward(True).pointwise["mul"].xreplace(values) == 512
        assert mul.backward(True).pointwise["bias_grad"].xreplace(values) == 256
    # three uses of 72 + 18 + 24 parameters (conv 8->8, 8->2, 2->8, with biases)
    assert model.evaluate().table.total.values["params"] == 3 * (72 + 18 + 24)
    if pass_ == "train":  # every use's fanout is its own row, matched by the aten adds autograd ran there
        measured = {r.name: r for r in result.rows[Phase.BACKWARD]}
        for use in ("se1", "se2", "se3"):
            assert measured[f"{use}.x_fanout"].values["pointwise"] == "PASS"
            assert measured[f"{use}.x_fanout"].values["pointwise_measured"] == {"add": 256}


def test_a_name_saved_in_a_block_used_once_is_read_after_it():
    model = costspec.loads(HEAD + SE + """\
layers:
  - block: se
    name: se1
  - conv2d: {out: C, kernel: 1}
  - add: {with: x}
""")
    found = rows(model)
    assert found["add"].node.reads == ("x",)
    assert validate(model, model.bind(), "train").ok
    # x is read by the block's mean and mul and by the add after it: two adds per element backward
    assert found["se1.x_fanout"].node.backward(True).pointwise["add"].xreplace(model.bind()) == 2 * 256


def test_a_name_saved_by_several_uses_is_refused_when_read_after_them():
    with pytest.raises(SpecError) as err:
        costspec.loads(HEAD + SE + """\
layers:
  - block: se
  - block: se
  - add: {with: x}
""")
    message = str(err.value)
    assert "$.layers[2].add.with" in message
    assert "add reads 'x', which 2 block uses save (at " in message and "cannot tell which" in message
    assert "a name per use: a block parameter given as the `save:` name" in message


def test_a_block_parameter_names_each_uses_value():
    # a U-Net's down stage used twice, each use saving its skip under the name it is given
    model = costspec.loads(HEAD + """\
blocks:
  down:
    params: {skip: s, out: 8}
    layers:
      - conv2d: {out: out, kernel: 3, padding: 1}
        save: skip
      - max_pool2d: {kernel: 2}
  up:
    params: {skip: s, out: 8}
    layers:
      - upsample: {scale: 2}
      - concat: {with: skip, axis: 1}
      - conv2d: {out: out, kernel: 3, padding: 1}
layers:
  - block: down
    name: down1
    args: {skip: s1}
  - block: down
    name: down2
    args: {skip: s2, out: 16}
  - block: up
    name: up2
    args: {skip: s2}
  - block: up
    name: up1
    args: {skip: s1}
""")
    found = rows(model)
    assert found["up2.concat"].node.reads == ("s2",) and found["up1.concat"].node.reads == ("s1",)
    assert found["up2.concat"].node.out_shape[1] == 16 + 16  # the upsampled 16 channels and s2's 16
    for pass_ in ("forward", "train"):
        result = validate(model, model.bind(), pass_)
        assert result.ok, result.failures()


def test_a_saved_name_outside_blocks_is_still_model_wide():
    with pytest.raises(SpecError) as err:
        costspec.loads(HEAD + SE + """\
layers:
  - conv2d: {out: C, kernel: 1}
    save: x
  - block: se
  - add: {with: x}
""")
    assert "value 'x' is already named (at " in str(err.value)
    assert "a name saved inside a block is each use's own" in str(err.value)


def test_a_repeat_body_may_save_a_name_block_uses_saved_before_it():
    # EfficientNet's shape: stage-first blocks used directly, then a repeat of the same pattern
    model = costspec.loads(HEAD + SE + """\
layers:
  - block: se
    name: first
  - block: se
    name: second
  - repeat: 2
    name: rest
    body: se
""")
    assert "rest.x_fanout" in rows(model)
    assert validate(model, model.bind(), "train").ok


def test_names_saved_by_nested_uses_stay_ambiguous_after_the_outer_use():
    with pytest.raises(SpecError, match="reads 'x', which 4 block uses save"):
        costspec.loads(HEAD + SE + """\
  pair:
    - block: se
    - block: se
layers:
  - block: pair
  - block: pair
  - add: {with: x}
""")
