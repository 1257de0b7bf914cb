"""The named rules of the decoder template's families (modern_template.py): how transformers runs RoPE,
its masks, gpt-oss's sinks and Phi-3's fused projections, where the spec's ops run otherwise; each an
`ignore:` entry with its formula and reason."""
from __future__ import annotations

from typing import TYPE_CHECKING

from costspec.importer.config import HFConfig
from costspec.importer.families.modern_moe import DEEPSEEK_V2_ROPE_RULE, deepseek_v3_rope_rule

if TYPE_CHECKING:
    from costspec.importer.families.modern_switches import Dims, Template


def rotate_rule(t: Template, dims: Dims) -> str:
    n = "R" if "R" in dims.extra else "D"
    if dims.extra_rope == 0:
        return ""
    layers = "L" if dims.extra_rope in (-1, dims.layers) else str(dims.extra_rope)
    return f"""\
- module: "model.layers.*.self_attn"
  extra: {{scale: "{layers}*B*S*(heads + KV)*{n}/2"}}
  reason: >-
    transformers' rotate_half builds [-x2, x1] with a neg (a multiplication by -1: the `scale` kind) of
    half of the rotated dims of q and k, B*S*(h+kv)*{n.lower()}/2 elements per layer, forward and backward; the
    spec's RoPE folds the sign into the sin table (2 mul + 1 add per element)
- module: "model.layers.*.self_attn"
  extra: {{add: "{layers}*B*S*(heads + KV)*{n}"}}
  pass: backward
  reason: >-
    rotate_half's backward: the gradients of the two halves it slices from q and k are added back into
    one tensor, one add per rotated element of q and k that the spec's RoPE does not run
"""


def mask_rule(dims: Dims) -> str:
    """Eager attention: transformers builds the model's two masks once per forward, where the spec's modules add
    a float mask built once."""
    if dims.eager:
        return """\
- module: "model"
  extra: {select: "2*B*S*S"}
  pass: forward
  reason: >-
    for eager attention transformers builds the model's two masks once per forward (causal for the global
    layers, sliding-window causal for the local ones), each a boolean [B, 1, S, S] turned into an additive
    float mask with one where per element (2*B*S*S selects)
"""
    return ""  # under SDPA, validate --against reads the sliding-window mask's where from what ran


def rules(cfg: HFConfig, t: Template, dims: Dims) -> str:
    """The named rules of the family's attention (RoPE as transformers runs it, masks, sinks) and its own."""
    if t.mla == "v2":
        out = DEEPSEEK_V2_ROPE_RULE
    elif t.mla == "v3":
        out = deepseek_v3_rope_rule(cfg.get_bool("rope_interleave", True))
    elif t.sinks:
        out = GPT_OSS_RULES
    else:
        out = rotate_rule(t, dims)
    out += FUSED_QKV_RULE if t.fused_qkv else ""
    out += ROTARY_SLICE_RULE if t.partial_rotary else ""
    out += FUSED_GATE_UP_RULE if t.fused_gate_up else ""
    return out + mask_rule(dims)


GPT_OSS_RULES = """\
- module: "model.layers.*.self_attn"
  extra: {"unknown:aten.max": "L*B*heads*S", add: "L*B*heads*S*(S + 1)"}
  pass: forward
  reason: >-
    gpt-oss's eager attention subtracts each row's max from the S + 1 logits before its softmax (an overflow
    guard): a row max (aten.max, B*h*S values: a reduction the cost table has no kind for) and a subtraction
    per logit (B*h*S*(S+1)); the softmax subtracts the row max itself, and the spec counts that once
- module: "model.layers.*.self_attn"
  extra: {add: "L*B*heads*S*(S + 1)", bias_grad: "L*B*heads*S*(S + 1)", scale: "L*B*heads*S*(S + 1)"}
  pass: backward
  reason: >-
    the row max's backward: the subtraction's gradient for the max is negated (scale) and summed over the row
    (bias_grad), and the logits' two gradients, direct and through the max, added (B*h*S*(S+1) each)
- module: "model.layers.*.self_attn"
  extra: {scale: "L*B*S*(heads + KV)*D/2"}
  pass: backward
  reason: >-
    gpt-oss rotates the halves as [x1*cos - x2*sin, x2*cos + x1*sin] (the same 2 mul + 1 add per element as
    the spec's RoPE forward); in the backward the subtraction's gradient is negated, B*S*(h+kv)*d/2 scale
"""


FUSED_QKV_RULE = """\
- module: "model.layers.*.self_attn"
  extra: {add: "2*L*B*S*(heads + 2*KV)*D"}
  pass: backward
  reason: >-
    transformers slices q, k and v out of qkv_proj's output: autograd adds the three slices' gradients back
    into one tensor, 2 adds per element of the (heads + 2*KV)*D wide output; the spec's fused qkv runs none
"""
ROTARY_SLICE_RULE = """\
- module: "model.layers.*.self_attn"
  extra: {add: "L*B*S*(heads + KV)*D"}
  pass: backward
  reason: >-
    apply_rotary_pos_emb always slices q and k into a rotary and a pass-through part (even when the rotary
    part is the whole head): autograd adds the two slices' gradients back into one tensor, one add per element
    of q and k; the spec's RoPE runs none
"""
FUSED_GATE_UP_RULE = """\
- module: "model.layers.*.mlp"
  extra: {add: "-L*B*S*C"}
  pass: backward
  reason: >-
    gate and up are one gate_up_proj: the backward's dX is one product, where the spec's gated MLP adds the dX
    of its gate and up projections (B*S*C adds per layer)
"""
