"""The dataflow of the layer tree (costspec.tree.build): branches and joins (`parallel`, a residual's `shortcut`), named values
(`save:`, `input:`, `with:`), further model inputs (`inputs:`), and the gradient sums where a value
fans out. Every spec here is checked row by row against autograd on its generated module
(`validate`: FlopCounterMode + the aten pointwise counter), forward and train."""
from __future__ import annotations

import pytest

import costspec
from costspec.core.errors import SpecError
from costspec.tree.walk import walk

torch = pytest.importorskip("torch")

from costspec.runtime.validate import validate  # noqa: E402

HEAD = "costspec: 1\nname: flow\n"

PARALLEL_RESIDUAL = HEAD + """\
dims: {B: 2, S: 8, C: 16, heads: 2, F: 64}
input: [B, S, C]
layers:
  - linear: {out: C}
  - parallel:
      branches:
        - []
        - [{layernorm: {}}, {attention: {heads: heads, backend: math}}]
        - [{layernorm: {}}, {mlp: {hidden: F}}]
"""

SHORTCUT = HEAD + """\
dims: {B: 2, C: 8, H: 8}
input: [B, C, H, H]
layers:
  - conv2d: {out: C, kernel: 3, padding: 1}
  - residual:
      body:
        - conv2d: {out: 2*C, kernel: 3, padding: 1, stride: 2, bias: false}
        - batchnorm: {}
        - activation: {fn: relu}
        - conv2d: {out: 2*C, kernel: 3, padding: 1, bias: false}
      shortcut:
        - conv2d: {out: 2*C, kernel: 1, stride: 2, bias: false}
        - batchnorm: {}
  - activation: {fn: relu}
"""

SQUEEZE_EXCITE = HEAD + """\
dims: {B: 2, C: 16, H: 8}
input: [B, C, H, H]
layers:
  - conv2d: {out: C, kernel: 3, padding: 1}
  - parallel:
      join: mul
      branches:
        - []
        - [{mean: {axes: [2, 3], keepdim: true}}, {conv2d: {out: C/4, kernel: 1}}, {activation: {fn: relu}},
           {conv2d: {out: C, kernel: 1}}, {activation: {fn: sigmoid}}]
"""

UNET = HEAD + """\
dims: {B: 2, H: 16}
input: [B, 3, H, H]
layers:
  - conv2d: {out: 8, kernel: 3, padding: 1}
    save: skip1
  - max_pool2d: {kernel: 2}
  - conv2d: {out: 16, kernel: 3, padding: 1}
  - upsample: {scale: 2}
  - concat: {with: skip1, axis: 1}
  - conv2d: {out: 8, kernel: 3, padding: 1}
  - add: {with: skip1}
"""

CROSS_INPUT = HEAD + """\
dims: {B: 2, S: 8, T: 6, C: 16, V: 50}
input: [B, S, C]
inputs: {tokens: [B, T]}
layers:
  - linear: {out: C}
    save: enc
  - embedding: {vocab: V, dim: C}
    input: tokens
  - concat: {with: enc, axis: 1}
  - linear: {out: C}
"""


@pytest.mark.parametrize("spec", [PARALLEL_RESIDUAL, SHORTCUT, SQUEEZE_EXCITE, UNET, CROSS_INPUT],
                         ids=["parallel_residual", "shortcut", "squeeze_excite", "unet", "inputs"])
@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_every_row_matches_autograd(spec, pass_):
    model = costspec.loads(spec)
    result = validate(model, model.bind(), pass_)
    assert result.ok, result.failures()


def test_parallel_residual_costs_two_adds_forward_and_two_at_the_fork():
    model = costspec.loads(PARALLEL_RESIDUAL)
    B, S, C = 2, 8, 16
    add = next(s.node for s in walk(model.root) if s.node.name == "add")
    values = model.bind()
    fwd = add.forward().pointwise["add"].xreplace(values)
    assert fwd == 2 * B * S * C  # x + attn + mlp: two adds per element
    # the fork's input (linear's output) needs a gradient: autograd sums three branch gradients
    assert add.backward(True).pointwise["add"].xreplace(values) == 2 * B * S * C
    assert add.backward(False).pointwise == {}


def test_a_value_read_twice_gets_one_gradient_sum_row():
    model = costspec.loads(UNET)
    names = [s.node.name for s in walk(model.root)]
    assert names[:2] == ["conv1", "skip1_fanout"]  # saved, then read by concat and add
    fan = next(s.node for s in walk(model.root) if s.node.name == "skip1_fanout")
    values = model.bind()
    # three consumers (max_pool, concat, add): two adds per element of [B, 8, H, H]
    assert fan.backward(True).pointwise["add"].xreplace(values) == 2 * 2 * 8 * 16 * 16


def test_a_model_input_needs_no_gradient():
    model = costspec.loads(CROSS_INPUT)
    concat = next(s.node for s in walk(model.root) if s.node.name == "concat")
    # the embedding's output needs a gradient (its table), the saved `enc` too (linear before it)
    assert concat.call.wiring.grads == ("input", "yes")
    # the embedding reads `tokens`, a model input: its backward computes dW only
    emb = next(s for s in walk(model.root) if s.node.name == "embed")
    assert emb.grad.first is False


def test_shortcut_shape_and_params():
    model = costspec.loads(SHORTCUT)
    values = model.bind()
    assert [int(d.xreplace(values)) for d in model.out_shape] == [2, 16, 4, 4]
    C = 8
    conv1 = C * C * 9 + C
    body = 2 * C * C * 9 + 2 * (2 * C) + 2 * C * 2 * C * 9
    shortcut = 2 * C * C + 2 * (2 * C)
    assert model.cost("forward").params.xreplace(values) == conv1 + body + shortcut


@pytest.mark.parametrize("layers, message", [
    ("  - linear: {out: 4}\n  - add: {}\n", "add needs 'with'"),
    ("  - linear: {out: 4}\n  - add: {with: nope}\n", "not a saved value"),
    ("  - linear: {out: 4}\n    save: a\n  - linear: {out: 4}\n    save: a\n", "already named"),
    ("  - linear: {out: 4}\n    save: a\n  - parallel:\n      branches:\n        - [{linear: {out: 4}, input: a}]\n"
     "        - []\n", "first layer of a parallel"),
    ("  - repeat: 2\n    body:\n      - linear: {out: 4}\n        save: a\n  - add: {with: a}\n", "not a saved value"),
    ("  - linear: {out: 4}\n    save: a\n  - linear: {out: 5}\n  - add: {with: a}\n", "cannot broadcast"),
])
def test_bad_dataflow_is_a_clear_error(layers, message):
    with pytest.raises(SpecError, match=message):
        costspec.loads(HEAD + "input: [3, 4]\nlayers:\n" + layers)


ENCODER_DECODER = HEAD + """\
dims: {B: 2, S: 8, T: 6, C: 16, heads: 2, V: 50}
input: [B, S, C]
inputs: {tokens: [B, T]}
layers:
  - sequence:
      - residual: [{layernorm: {}}, {attention: {heads: heads}}]
      - layernorm: {}
        save: enc
    name: encoder
  - embedding: {vocab: V, dim: C}
    input: tokens
  - repeat: 2
    name: decoder
    body:
      - residual: [{layernorm: {}}, {attention: {heads: heads, causal: true}}]
      - residual: [{layernorm: {}}, {attention: {heads: heads, kv: enc, fused_qkv: false}}]
      - residual: [{layernorm: {}}, {mlp: {hidden: 4*C}}]
"""


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_encoder_decoder_with_cross_attention_matches_autograd(pass_):
    model = costspec.loads(ENCODER_DECODER)
    result = validate(model, model.bind(), pass_)
    assert result.ok, result.failures()


def test_cross_attention_projects_keys_and_values_from_the_saved_value():
    model = costspec.loads(ENCODER_DECODER)
    values = model.bind()
    B, S, T, C = 2, 8, 6, 16
    rows = {s.node.name: s for s in walk(model.root)}
    assert "encoder.enc_fanout" in rows  # enc is read by both decoder layers: one gradient sum
    fan = rows["encoder.enc_fanout"].node
    assert fan.backward(True).pointwise["add"].xreplace(values) == (2 - 1) * B * S * C
    attn = rows["decoder.attn2"].node
    fwd = attn.forward().matmul
    # q and proj on the decoder's B*T rows, k and v on the encoder's B*S rows; scores T x S
    gemm = 2 * B * T * C * C * 2 + 2 * B * S * C * C * 2
    sdpa = 2 * 2 * B * T * S * C
    assert fwd["gemm"].xreplace(values) == gemm and fwd["sdpa"].xreplace(values) == sdpa


def test_a_value_saved_at_the_end_of_a_named_sequence_can_be_left_for_a_model_input():
    # the encoder's output is saved inside its scope; the decoder scope starts from the token input
    spec = HEAD + """\
dims: {B: 2, S: 8, T: 6, C: 16, V: 50}
input: [B, S, C]
inputs: {tokens: [B, T]}
layers:
  - sequence: [{linear: {out: C}}, {layernorm: {}, save: enc}]
    name: encoder
  - sequence:
      - embedding: {vocab: V, dim: C}
        input: tokens
      - attention: {heads: 2, kv: enc}
    name: decoder
"""
    model = costspec.loads(spec)
    result = validate(model, model.bind(), "train")
    assert result.ok, result.failures()


PARAM_FREE_REPEAT_SAVE = HEAD + """\
input: [2, 4]
layers:
  - repeat: 2
    body:
      - activation: {fn: relu}
        save: a
      - add: {with: a}
"""


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_a_value_saved_and_read_in_a_parameter_free_repeat_is_accepted(pass_):
    """Found by the fuzzer: refused as 'cannot yet tell which instances need a gradient', though in a body
    without parameters no instance needs one."""
    model = costspec.loads(PARAM_FREE_REPEAT_SAVE)
    values = model.bind()
    # per instance: relu 8 elements, add 8 elements; two instances
    assert model.cost("forward").cuda.xreplace(values) == 2 * (8 + 8)
    result = validate(model, values, pass_)
    assert result.ok, result.failures()


def test_a_value_saved_before_the_parameters_of_a_repeat_body_is_still_refused():
    """The first instance's value needs no gradient, the later ones' do: costspec cannot count that yet."""
    with pytest.raises(SpecError, match="cannot yet tell"):
        costspec.loads(PARAM_FREE_REPEAT_SAVE.replace("      - add: {with: a}\n",
                                                      "      - linear: {out: 4}\n      - add: {with: a}\n"))


JOIN_GIVES_GRADIENT = HEAD + """\
input: [2, 3, 4]
inputs: {x1: [2, 3, 4]}
layers:
  - layernorm: {}
    save: v
  - activation: {fn: relu}
    input: x1
  - mul: {with: v}
  - softmax: {}
"""


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_a_join_with_a_value_that_needs_a_gradient_passes_it_on(pass_):
    """Found by the fuzzer: the running value read from a model input needs no gradient, but after `mul` with
    a value saved after a layernorm (parameters) it does; the softmax after it runs its backward."""
    model = costspec.loads(JOIN_GIVES_GRADIENT)
    values = model.bind()
    softmax = next(s for s in walk(model.root) if s.node.name == "softmax")
    assert softmax.node.backward(softmax.grad.first).pointwise["softmax_backward"].xreplace(values) == 2 * 3 * 4
    result = validate(model, values, pass_)
    assert result.ok, result.failures()
