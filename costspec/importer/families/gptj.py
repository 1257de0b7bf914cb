"""GPT-J (transformers' GPTJForCausalLM), imported whole with its LM head: one LayerNorm feeding attention
and MLP side by side (x + attn(ln_1(x)) + mlp(ln_1(x))), q/k/v/out projections without biases, interleaved
partial RoPE on the first rotary_dim dims of each head, eager attention (GPT-J has no SDPA path), a plain
biased MLP (fc_in, activation, fc_out) and a biased LM head (untied unless the config ties its weight): a row of
the GPT-like template (gpt_template.py), the reader of its switches and its rules.
"""
from __future__ import annotations

from costspec.importer.config import HFConfig, heads, layers, size
from costspec.importer.families.common import gelu_new_rule
from costspec.importer.families.gpt_template import PARALLEL_ONE_NORM, GptLike, Keys, Layer, Paths, Sizes, family

HF_CLASS = "GPTJForCausalLM"


def rotary(cfg: HFConfig, head_dim: int, h: int) -> int:
    """rotary_dim: the rotated dims of each head (even, at most the head dim)."""
    if cfg.get("rotary_dim") is None:
        if h > 1:
            raise cfg.refuse("rotary_dim", "null: GPTJAttention then builds sin / cos tables as wide as the whole "
                             "hidden size and applies them to each head (transformers cannot run it with more than "
                             "one head); expected the rotated dims per head")
        return head_dim
    R = cfg.get_int("rotary_dim", minimum=2, maximum=head_dim)
    if R % 2:
        raise cfg.refuse("rotary_dim", "expected an even number (rotate_every_two pairs the dims)")
    return R


def rules() -> str:
    """How GPT-J runs its interleaved partial RoPE and its eager attention's mask, where the spec's ops run
    otherwise (each with its formula)."""
    return """\
- module: "transformer.h.*.attn"
  extra: {scale: "L*B*S*2*heads*R/2"}
  reason: >-
    rotate_every_two builds [-x2, x1] from the odd and even dims with a neg (a multiplication by -1: the
    `scale` kind) of half of the rotary dims of q and k, B*S*2h*r/2 elements per layer, forward and
    backward; the spec's RoPE folds the sign into the sin table (2 mul + 1 add per element)
- module: "transformer.h.*.attn"
  extra: {add: "L*B*S*2*heads*(D + R)"}
  pass: backward
  reason: >-
    q and k are sliced into a rotary and a pass-through part, and rotate_every_two slices the rotary part into
    its odd and even dims: autograd adds the slices' gradients back into one tensor, one add per element of q
    and k (B*S*2h*d) and per rotary element (B*S*2h*r); the spec's partial RoPE rotates its slice in place
- module: "transformer"
  extra: {select: "B*S*S"}
  pass: forward
  reason: >-
    for its eager attention GPTJModel builds the causal mask once per forward, a boolean [B, 1, S, S]
    turned into an additive float mask with one where per element (B*S*S selects)
"""


def read(cfg: HFConfig, dims: Sizes) -> Layer:
    """GPT-J's switches: interleaved partial RoPE on R dims, q/k/v/out without biases, attention and MLP in
    parallel on one LayerNorm, eager attention, a biased LM head."""
    R = rotary(cfg, dims.C // dims.heads, dims.heads)
    gelu_new = cfg.get("activation_function", "gelu_new") == "gelu_new"
    tied = cfg.get_bool("tie_word_embeddings", False)
    return Layer(attn=("attention: {heads: heads, fused_qkv: false, qkv_bias: false, proj_bias: false, rope: true, "
                       "rope_dims: R, causal: true, backend: eager}"),
                 layout=PARALLEL_ONE_NORM, norms=("ln_1",), dims=(("R", R, "rotated dims per head", "rotary_dim"),),
                 notes=("GPTJForCausalLM runs eager attention (no SDPA path): the attention is written with backend: "
                        "eager, as it runs; drop it for the cost of a flash kernel",),
                 ignore=rules() + (gelu_new_rule("transformer.h.*.mlp", "L*B*S*F") if gelu_new else ""),
                 head_bias=True, head_note=" (the weight; the bias is its own)" if tied else "",
                 blocks=(f"embedding, {dims.L} blocks (attention and MLP in parallel on one LayerNorm; hidden "
                         f"{dims.C}, {dims.heads} heads of {dims.C // dims.heads}, RoPE on {R} dims, causal; {dims.fn} "
                         "MLP), final LayerNorm"))


TABLE = GptLike(
    "gptj", HF_CLASS, "GPT-J causal LM with its biased LM head: attention and MLP in parallel on one LayerNorm, "
    "interleaved partial RoPE (rotary_dim), eager attention, biased MLP",
    Keys(width=("n_embd",), heads="n_head", layers="n_layer", mlp="n_inner", positions=("n_positions",),
         activation="activation_function", activation_default="gelu_new"),
    Paths("transformer", "wte", "h", "ln_f", "attn", "mlp"), read, "gptj_block", tied_default=False,
    declared=(size("vocab_size"), size("n_embd"), layers("n_layer"), heads("n_head", "n_embd"), size("n_inner"),
              size("n_positions"), size("rotary_dim", even=True)),
    architectures=(HF_CLASS,), doc_name="GPT-J causal LM",
    refused=("rotary_dim null with more than one head (transformers cannot run it)",
             "an odd rotary_dim or one above the head dim"))
GPTJ = family(TABLE)
FAMILY_LIST = (GPTJ,)
