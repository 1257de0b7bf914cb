"""The text towers of the dual-tower families (CLIP's and SigLIP's text encoders), and the layers of both towers
with the logits that join them (`similarity`).

A text tower is token embedding + learned positions, pre-LN layers (causal attention in CLIP, bidirectional in
SigLIP), a final LayerNorm, one token pooled (CLIP: the EOS token, SigLIP: the last) and a projection (CLIP's
text_projection without bias, SigLIP's head with one). Its dims carry a `t` (Ct, Ht, Lt, Ft): the vision
tower's are C, heads, L, F.
"""
from __future__ import annotations

from dataclasses import dataclass

from costspec.importer.config import HFConfig
from costspec.importer.emit import SpecText
from costspec.importer.families.common import GELU_NEW_NOTE, activation, check_divides


@dataclass(frozen=True)
class TextTower:
    """How one family's text tower differs: `causal` attention, the default activation, the pooled token
    (`eos`: CLIP's argmax of the ids), the projection (module, bias, the key of its width)."""

    name: str  # CLIP | SigLIP
    causal: bool
    fn: str
    eos: bool
    projection: str  # the projection's module (relative to the class's root)
    bias: bool
    defaults: tuple[int, int, int, int, int, int]  # hidden, heads, layers, intermediate, vocab, positions


CLIP_TEXT = TextTower("CLIP", True, "quick_gelu", True, "text_projection", False, (512, 8, 12, 2048, 49408, 77))
SIGLIP_TEXT = TextTower("SigLIP", False, "gelu_pytorch_tanh", False, "head", True, (768, 12, 12, 3072, 32000, 64))

_CLIP_EOS = """\
- module: "{src}"
  extra: {{{found}"unknown:aten.argmax": "B"}}
  pass: forward
  reason: >-
    CLIPTextModel finds the pooled token with argmax over each row of the ids{eq_reason}; it reads
    no activation, and where the token sits changes no cost (the spec takes the last)
"""
_CLIP_GATHER = """\
- module: "{src}"
  extra: {{scatter_add: "B*Ct"}}
  pass: backward
  reason: >-
    the pooled token is gathered with an index tensor (last_hidden_state[arange(B), eos]): its backward
    scatter-adds the B*Ct gradients into a zero tensor (index_put with accumulate)
"""
_POSITIONS = """\
- module: "{src}embeddings.position_embedding"
  extra: {{scatter_add: "min(B - 1, 1)*T*Ct"}}
  pass: backward
  reason: >-
    the position table is read with an nn.Embedding lookup of position_ids; for B > 1 its backward sums
    the gradient over the batch (the spec's broadcast add does that too) and then scatter-adds it into the
    table rows (T*Ct adds); at B = 1 the scatter-add is the only reduction
"""


def text_tower(spec: SpecText, text: HFConfig, tower: TextTower, p: str, src: str, out: str, pooled: bool) -> str:
    """Add the text tower's dims, block and ignore entries to `spec`; return its layers (YAML, unindented).

    `p`: the config keys' prefix (`text_config.` in a composite config); `src`: the tower's module prefix in
    the class the spec describes; `out`: the projection's width (an expression of the dims); `pooled` False:
    the layers end at the final LayerNorm's [B, T, Ct] (the model's last_hidden_state)."""
    hidden, heads, depth, inner, vocab, positions = tower.defaults
    C = text.get_int("hidden_size", hidden)
    H = text.get_int("num_attention_heads", heads)
    check_divides(text, "hidden_size", C, "num_attention_heads", H)
    P = text.get_int("max_position_embeddings", positions)
    fn = activation(text, "hidden_act", tower.fn)
    if text.get("hidden_act") == "gelu_new":
        spec.note(GELU_NEW_NOTE)
    spec.dim("V", text.get_int("vocab_size", vocab), "text vocabulary", p + "vocab_size")
    spec.dim("P", P, "text positions (the position table's rows)", p + "max_position_embeddings")
    spec.dim("T", P, f"text tokens (at most P = {P}; the tokenizers pad to it)")
    spec.dim("Ct", C, "text width", p + "hidden_size")
    spec.dim("Ht", H, "text attention heads", p + "num_attention_heads")
    spec.dim("Lt", text.get_int("num_hidden_layers", depth), "text depth (encoder layers)", p + "num_hidden_layers")
    spec.dim("Ft", text.get_int("intermediate_size", inner), "text MLP width", p + "intermediate_size")
    causal = ", causal: true" if tower.causal else ""
    spec.block("text_block", f"""\
- residual:
    - layernorm: {{}}
      source: layer_norm1
    - attention: {{heads: Ht, fused_qkv: false{causal}}}  # q_proj, k_proj, v_proj, out_proj
      source: self_attn
- residual:
    - layernorm: {{}}
      source: layer_norm2
    - mlp: {{hidden: Ft, fn: {fn}}}  # fc1 -> hidden_act -> fc2
      source: mlp
""")
    spec.ignore(_POSITIONS.format(src=src))
    if tower.eos:
        eos = text.get("eos_token_id", 2)
        found = "" if eos == 2 else 'select: "B*T", '
        spec.ignore(_CLIP_EOS.format(src=src.rstrip("."), found=found, eq_reason="" if eos == 2 else (
            " == eos_token_id (one compare per id: select, B*T)")))
        if pooled:
            spec.ignore(_CLIP_GATHER.format(src=src.rstrip(".")))
    attention = "causal " if tower.causal else ""
    layers = f"""\
- embedding: {{vocab: V, dim: Ct}}  # token_embedding
  name: token_embedding
  source: {src}embeddings.token_embedding
- position_embedding: {{length: P}}  # learned, its first T rows
  name: text_positions
  source: {src}embeddings.position_embedding
- repeat: Lt  # pre-LN layers, {attention}attention
  name: text_layers
  body: text_block
  source: {src}encoder.layers
- layernorm: {{}}
  name: final_layer_norm
  source: {src}final_layer_norm
"""
    if pooled:
        token = ("the EOS token (argmax of the ids; its place changes no cost)" if tower.eos
                 else "the last token")
        projection = f"{src}head" if tower.projection == "head" else tower.projection
        bias = "" if tower.bias else ", bias: false"
        layers += f"""\
- take_token: {{index: -1}}  # pooled: {token}
  name: text_pool
- linear: {{out: {out}{bias}}}
  name: {"text_head" if tower.projection == "head" else tower.projection}
  source: {projection}
"""
    return layers



def both_towers(text_layers: str, vision_layers: str, first_source: str, form: str, bias: bool = False) -> str:
    """The layers of both towers and the logits: the text tower on the model input (input_ids) saved as
    text_embeds, the vision tower on the further input pixel_values (its first layer, `first_source`, reads it),
    then `similarity` (the model's own forward: logit_scale and logit_bias are the root's parameters)."""
    marker = f"  source: {first_source}\n"
    if marker not in vision_layers:
        raise RuntimeError(f"the vision tower has no layer with source {first_source}")
    vision_layers = vision_layers.replace(marker, marker + "  input: pixel_values\n", 1)
    name = "CLIPModel" if form == "clip" else "SiglipModel"
    return text_layers.rstrip("\n") + "\n  save: text_embeds\n" + vision_layers + f"""\
# {name}: both embeddings divided by their L2 norms, logits_per_text = text @ image^T * exp(logit_scale)
# {"+ logit_bias " if bias else ""}and logits_per_image, its transpose (the model's first output)
- similarity: {{with: text_embeds, form: {form}{", bias: true" if bias else ""}}}
  name: logits
"""
