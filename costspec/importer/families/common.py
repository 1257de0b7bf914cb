"""Pieces several families share: activations, image sizes, the q/k/v gradient-add ignore rule, the gelu_new
rule of the GPT-like decoders."""
from __future__ import annotations

import textwrap

from costspec.importer.config import HFConfig, ImportProblem, count, heads, layers, ratio, size, under

# the numeric keys of a ViT / BERT-style encoder (declared to HFConfig.validate)
ENCODER_KEYS = (size("hidden_size"), size("intermediate_size"), layers("num_hidden_layers"),
                heads("num_attention_heads", "hidden_size"), size("image_size", items=True),
                size("patch_size", items=True), size("num_channels"), size("vocab_size"),
                size("max_position_embeddings"), count("type_vocab_size"), size("projection_dim"), ratio("mlp_ratio"))
VISION_TOWER_KEYS = ENCODER_KEYS + under("vision_config", ENCODER_KEYS)  # a tower alone or in a full config

# hidden_act / activation_function -> the `fn` of mlp / activation, and why where it is not 1:1
ACTIVATIONS = {
    "gelu": "gelu",  # erf form
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",  # the same tanh form; transformers runs it as python-level ops (see the note)
    "quick_gelu": "quick_gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
    "sigmoid": "sigmoid",
    "tanh": "tanh",
}
GELU_NEW_NOTE = ("hidden activation gelu_new: the tanh GELU, priced as one gelu_tanh op; transformers runs it "
                 "as 8 python-level ops (pow, mul, add, tanh ...), so validate --against names those kinds in "
                 "the MLP rows unless the model is built with gelu_pytorch_tanh (the same function, one op)")

# transformers projects q, k and v with three Linear layers; the zoo specs keep a fused qkv GEMM
QKV_GRAD_ADD_REASON = (
    "transformers projects q, k and v with three Linear layers that read one input, so autograd adds "
    "their three input gradients (2 adds per element of the input, 2*B*S*C per layer); the spec's fused "
    "qkv GEMM reads its input once")


def activation(cfg: HFConfig, key: str, default: str) -> str:
    """The costspec activation name for cfg[key]; an activation it does not know is an error."""
    return ACTIVATIONS[cfg.choice(key, default, ACTIVATIONS)]


def square_size(cfg: HFConfig, key: str, default: int | None = None) -> int:
    """image_size / patch_size: an int, or a [h, w] pair with h == w (a non-square one is refused)."""
    value = cfg.get(key, default)
    if isinstance(value, list) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ImportProblem(f"{cfg.where(key)} = {value!r}: expected a positive whole number (square images and "
                            "patches only)")
    return value


def qkv_grad_ignore(module: str) -> str:
    reason = "\n".join("    " + line for line in textwrap.wrap(QKV_GRAD_ADD_REASON, 100))
    return f"""\
- module: "{module}"
  kinds: [add]
  pass: backward
  reason: >-
{reason}
"""


def check_divides(cfg: HFConfig, width_key: str, width: int, heads_key: str, heads: int) -> None:
    if width % heads:
        raise ImportProblem(f"{cfg.where(width_key)} = {width} is not a multiple of {heads_key} = {heads} "
                            "(expected head_dim = width / heads, a whole number)")


def check_whole_patches(cfg: HFConfig, img: int, patch: int) -> None:
    """transformers' patch conv drops a partial patch; costspec's patch_embed needs whole patches."""
    if img % patch:
        raise ImportProblem(f"{cfg.where('image_size')} = {img} is not a multiple of patch_size = {patch} (costspec's "
                            "patch_embed needs whole patches)")


def gelu_new_rule(module: str, elements: str) -> str:
    """transformers' gelu_new (NewGELUActivation) as the python-level ops it runs, against the one gelu_tanh op
    the spec prices (the same function): per element of its input, forward 0.5*x*(1 + tanh(sqrt(2/pi)*(x +
    0.044715*x^3))), backward through each of them."""
    return f"""\
- module: "{module}"
  extra: {{gelu_tanh: "-{elements}", cube: "{elements}", scale: "3*{elements}", add: "2*{elements}",
          tanh: "{elements}", mul: "{elements}"}}
  pass: forward
  reason: >-
    gelu_new runs as python-level ops, per element: x^3 (cube), 0.044715*x^3, sqrt(2/pi)*(...) and 0.5*x (3
    scale), x + ... and 1 + tanh (2 add), tanh, and the final product (mul); the spec prices the same
    function as one gelu_tanh
- module: "{module}"
  extra: {{gelu_tanh_backward: "-{elements}", square: "{elements}", scale: "4*{elements}", add: "2*{elements}",
          tanh_backward: "{elements}", mul: "3*{elements}"}}
  pass: backward
  reason: >-
    the backward of those ops, per element: the cube's 3*x^2 (square and scale), the three constant scales,
    tanh's backward, the product's two gradients and the chain's multiplications (3 mul), and the two sums of
    x's gradients (2 add); the spec prices one gelu_tanh_backward
"""
