"""SigLIP: both towers and the logits (SiglipModel, a full config's default), or one tower: the vision tower
(SiglipVisionModel: a ViT without a class token, and, with vision_use_head, the attention-pooling head (a
learned probe attending to the tokens through torch's nn.MultiheadAttention, then a LayerNorm + MLP residual),
whose output is the model's pooler_output) or, with --tower text, the text tower (SiglipTextModel: its head on
the last token is the pooler_output); with --no-pooler a tower ends at its last_hidden_state."""
from __future__ import annotations

import textwrap

from costspec.importer.config import HFConfig, ImportProblem, heads, layers, size, under
from costspec.importer.emit import SpecText
from costspec.importer.families import POOLER, TOWER, Family, Variant
from costspec.importer.families.common import GELU_NEW_NOTE, VISION_TOWER_KEYS, activation, check_divides, square_size
from costspec.importer.families.siglip_text import SIGLIP_TEXT, both_towers, text_tower
from costspec.importer.families.towers import BOTH, TEXT, pick_tower

TEXT_TOWER = "the spec is the image tower (SiglipVisionModel); --tower text for the text tower"
VISION_TOWER = "the spec is the text tower (SiglipTextModel); --tower vision for the image tower"
POOLED = "pooler_output"
_HEAD_LEFT_OUT = """\
- module: "head"
  reason: >-
    the pooler: SiglipVisionModel runs its attention-pooling head for pooler_output; with --no-pooler the
    spec ends at last_hidden_state, before it (its parameters and its forward are left out)
"""
_TEXT_HEAD_LEFT_OUT = """\
- module: "head"
  reason: >-
    the pooler: SiglipTextModel runs its head (a linear on the last token) for pooler_output; with
    --no-pooler the spec ends at last_hidden_state, before it (its parameters and its forward are left out)
"""

# nn.MultiheadAttention(need_weights=True), as SigLIP's head calls it: named differences to SDPA's math
_HEAD_IGNORE = [
    ("B*C", None, "nn.MultiheadAttention scales q (B*C multiplies for the one probe) before its QK^T bmm, "
     "forward and backward; the sdpa-eager rule finds no scale on the scores, which the flash kernel the spec "
     "charges scales"),
    ("B*heads*S", "forward", "need_weights=True returns the attention probabilities averaged over the heads (a "
     "mean of B*heads*S elements), an output SigLIP discards"),
    ("min(B - 1, 1)*min(S - 1, 1)*2*B*S*C", "forward", "nn.MultiheadAttention runs batch-first inputs as a (S, B, "
     "C) view; for B > 1 and S > 1 it is not contiguous, and F.linear adds the packed k/v projection's bias as its "
     "own add instead of in the GEMM (addmm): the same one add per element, counted as add rather than bias_add"),
    ("2*B*S*C", "backward", "k and v come out of one packed projection as kv[0] and kv[1]; autograd's backward of "
     "the two selects writes two zero-filled gradients of the whole (2, B, S, C) tensor and sums them"),
]
_HEAD_KINDS = ("scale", "mean", "bias_add", "add")


def _vision(cfg: HFConfig) -> HFConfig:
    return cfg if cfg.model_type == "siglip_vision_model" else cfg.sub("vision_config")


def _tower(cfg: HFConfig) -> str:
    return pick_tower(cfg, "siglip_vision_model", "siglip_text_model")


def _uses_head(cfg: HFConfig) -> bool:
    return _vision(cfg).get_bool("vision_use_head", True)


def siglip_variant(cfg: HFConfig) -> Variant:
    """SiglipVisionModel / SiglipTextModel; the output the spec stands for: pooler_output when it ends in
    the tower's head, else last_hidden_state (the first tensor)."""
    tower = _tower(cfg)
    if tower == BOTH:
        return Variant("SiglipModel")
    if tower == TEXT:
        return Variant("SiglipTextModel", output=POOLED if cfg.pooler else None)
    return Variant("SiglipVisionModel", output=POOLED if cfg.pooler and _uses_head(cfg) else None)


def build_siglip_text(cfg: HFConfig) -> str:
    composite = cfg.model_type != "siglip_text_model"
    text = cfg.sub("text_config") if composite else cfg
    p = "text_config." if composite else ""
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' "
                    "SiglipTextModel)")
    spec.dim("B", 1, "batch size")
    spec.precision(cfg.dtype, cfg.dtype_source)
    spec.input(["B", "T"], "input_ids")
    if cfg.pooler:
        spec.dim("E", text.get_int("projection_size", text.get_int("hidden_size")), "the head's output width",
                 p + "projection_size")
    layers = text_tower(spec, text, SIGLIP_TEXT, p, "", "E", cfg.pooler)
    if not cfg.pooler:
        spec.ignore(_TEXT_HEAD_LEFT_OUT)
    spec.doc = ("SigLIP text tower imported from a Hugging Face config: token embedding + learned positions, "
                "bidirectional pre-LN layers, final_layer_norm"
                + (", its head (a linear) on the last token (pooler_output)" if cfg.pooler
                   else "; its last_hidden_state (--no-pooler: no head)"))
    spec.header.append("# `source:` and `ignore:` name modules of transformers' SiglipTextModel; the spec's output is "
                       + ("its pooler_output" if cfg.pooler else "its last_hidden_state (imported with --no-pooler)"))
    spec.layers(layers)
    ignored = {"vision_config": VISION_TOWER} if composite else {}
    if not cfg.pooler:
        ignored[p + "projection_size"] = "the head's width: --no-pooler leaves the head out"
    cfg.check_understood(ignored)
    return spec.render()


_POSITION_IGNORE = """\
- module: embeddings.position_embedding
  extra: {scatter_add: "min(B - 1, 1)*S*C"}
  pass: backward
  reason: >-
    transformers reads the (S, C) position table with an nn.Embedding lookup of position_ids; for B > 1
    its backward sums the gradient over the batch (the spec's broadcast add does that too) and then
    scatter-adds it into the table rows (S*C adds); at B = 1 the scatter-add is the only reduction
"""


def _head_ignores() -> str:
    out = []
    for (amount, pass_, reason), kind in zip(_HEAD_IGNORE, _HEAD_KINDS):
        extra = (f'{{add: "{amount}", bias_add: "-{amount}"}}' if kind == "bias_add"
                 else f'{{{kind}: "{amount}"}}')
        lines = ["- module: head.attention", f"  extra: {extra}"]
        if pass_:
            lines.append(f"  pass: {pass_}")
        lines.append("  reason: >-")
        lines.extend("    " + line for line in textwrap.wrap(reason, 100))
        out.append("\n".join(lines) + "\n")
    return "".join(out)


def _siglip_vision(spec: SpecText, vision: HFConfig, p: str, src: str, pooled: bool) -> str:
    """The vision tower's dims, block and ignore entries on `spec`; its layers (`src`: its modules' prefix)."""
    img = square_size(vision, "image_size", 224)
    patch = square_size(vision, "patch_size", 16)
    if img % patch:
        raise ImportProblem(f"{vision.where('image_size')} = {img} is not a multiple of patch_size = {patch}")
    C = vision.get_int("hidden_size")
    heads = vision.get_int("num_attention_heads")
    check_divides(vision, "hidden_size", C, "num_attention_heads", heads)
    uses_head = vision.get_bool("vision_use_head", True)
    head = uses_head and pooled
    fn = activation(vision, "hidden_act", "gelu_pytorch_tanh")
    if vision.get("hidden_act") == "gelu_new":
        spec.note(GELU_NEW_NOTE)
    spec.dim("img", img, "image side in pixels", p + "image_size")
    spec.dim("patch", patch, "patch side in pixels", p + "patch_size")
    spec.dim("C", C, "model width", p + "hidden_size")
    spec.dim("F", vision.get_int("intermediate_size"), "MLP width", p + "intermediate_size")
    spec.dim("heads", heads, "attention heads", p + "num_attention_heads")
    spec.dim("L", vision.get_int("num_hidden_layers"), "depth (encoder layers)", p + "num_hidden_layers")
    spec.derived("S", "(img // patch)**2", "tokens (patches; no class token)")
    spec.doc = (f"SigLIP vision tower: patch {patch}, learned position embedding, no class token, {heads}-head pre-LN "
                f"layers of width {C} with a {fn} MLP, post LayerNorm"
                + (", attention-pooling head (a learned probe attending to the tokens, LayerNorm + MLP residual; "
                   "pooler_output)" if head else "; no head ("
                   + ("--no-pooler" if uses_head else "vision_use_head false") + ": last_hidden_state)"))
    spec.block("encoder_block", f"""\
- residual:
    - layernorm: {{}}
      source: layer_norm1
    - attention: {{heads: heads, fused_qkv: false}}  # q_proj, k_proj, v_proj, out_proj
      source: self_attn
- residual:
    - layernorm: {{}}
      source: layer_norm2
    - mlp: {{hidden: F, fn: {fn}}}  # fc1 -> hidden_act -> fc2
      source: mlp
""")
    spec.ignore(_POSITION_IGNORE.replace("module: embeddings.", f"module: {src}embeddings."))
    if head:
        spec.ignore(_head_ignores().replace("module: head.", f"module: {src}head."))
    elif uses_head:
        spec.ignore(_HEAD_LEFT_OUT.replace('module: "head"', f'module: "{src}head"'))
    layers = f"""\
# Conv2d(channels, C, patch, stride patch), then position_embedding(position_ids): an (S, C) table added
- patch_embed: {{patch: patch, dim: C, pos_embed: true}}
  source: {src}embeddings
- repeat: L
  name: layers
  body: encoder_block
  source: {src}encoder.layers
- layernorm: {{}}
  name: post_layernorm
  source: {src}post_layernorm
"""
    if head:
        layers += f"""\
# SiglipMultiheadAttentionPoolingHead: probe (1, 1, C) repeated over the batch, nn.MultiheadAttention(probe,
# x, x) (q from the probe; k and v from the tokens with one packed projection), then x + mlp(LN(x)), token 0
- sequence:
    - attention: {{heads: heads, queries: 1}}
      source: attention
    - residual:
        - layernorm: {{}}
          source: layernorm
        - mlp: {{hidden: F, fn: {fn}}}
          source: mlp
    - take_token: {{index: 0}}
  name: head
  source: {src}head
"""
    return layers


def build_siglip(cfg: HFConfig) -> str:
    tower = _tower(cfg)
    if tower == TEXT:
        return build_siglip_text(cfg)
    hf = "SiglipModel" if tower == BOTH else "SiglipVisionModel"
    vision = _vision(cfg)
    composite = vision is not cfg
    p = "vision_config." if composite else ""
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' {hf})")
    spec.dim("B", 1, "batch size" + (" (images and texts: the logits are B x B)" if tower == BOTH else ""))
    spec.precision(cfg.dtype, cfg.dtype_source)
    if tower == BOTH:
        return _both(cfg, spec, vision)
    spec.input(["B", str(vision.get_int("num_channels")), "img", "img"], p + "num_channels")
    spec.layers(_siglip_vision(spec, vision, p, "", cfg.pooler))
    spec.doc = "SigLIP imported from a Hugging Face config: the " + spec.doc[0].lower() + spec.doc[1:]
    head = cfg.pooler and _uses_head(cfg)
    spec.header.append("# `source:` and `ignore:` name modules of transformers' SiglipVisionModel; the spec's output "
                       "is its " + ("pooler_output" if head else "last_hidden_state")
                       + ("" if cfg.pooler else " (imported with --no-pooler)"))
    cfg.check_understood({"text_config": TEXT_TOWER} if composite else {})
    return spec.render()


def _both(cfg: HFConfig, spec: SpecText, vision: HFConfig) -> str:
    """SiglipModel: the text tower on input_ids, the vision tower on pixel_values, the logits."""
    if not vision.get_bool("vision_use_head", True):
        raise ImportProblem(f"{vision.where('vision_use_head')} = false: SiglipModel's logits read the vision tower's "
                            "pooler_output, which only its head computes (--tower vision or text imports a tower)")
    text = cfg.sub("text_config")
    C = vision.get_int("hidden_size")
    E = text.get_int("projection_size", text.get_int("hidden_size"))
    if E != C:
        raise ImportProblem(f"{text.where('projection_size')} = {E} differs from vision_config.hidden_size = {C}: "
                            "SiglipModel multiplies the text head's output with the pooled image embeddings")
    spec.input(["B", "T"], "input_ids")
    spec.dim("E", E, "the text head's output width (= the vision width C)", "text_config.projection_size")
    text_layers = text_tower(spec, text, SIGLIP_TEXT, "text_config.", "text_model.", "E", True)
    vision_layers = _siglip_vision(spec, vision, "vision_config.", "vision_model.", True)
    spec.further_input("pixel_values", ["B", str(vision.get_int("num_channels")), "img", "img"],
                       "the images (passed by name)")
    vision_doc = spec.doc
    spec.doc = ("SigLIP imported from a Hugging Face config: the text tower (token embedding + learned positions, "
                "bidirectional pre-LN layers, final_layer_norm, its head on the last token), the "
                + vision_doc[0].lower() + vision_doc[1:] + " and the logits (logits_per_image): both embeddings "
                "divided by their L2 norms, their dot products times exp(logit_scale) plus logit_bias")
    spec.header.append("# `source:` and `ignore:` name modules of transformers' SiglipModel; the spec's output is its "
                       "logits_per_image")
    spec.layers(both_towers(text_layers, vision_layers, "vision_model.embeddings", "siglip", bias=True))
    cfg.check_understood({})
    return spec.render()


SIGLIP_TEXT_KEYS = (size("hidden_size"), size("intermediate_size"), layers("num_hidden_layers"),
                    heads("num_attention_heads", "hidden_size"), size("vocab_size"), size("max_position_embeddings"),
                    size("projection_size"))
SIGLIP = Family(("siglip", "siglip_vision_model", "siglip_text_model"), "SiglipModel", build_siglip,
                "SigLIP: both towers and the logits (SiglipModel, logits_per_image: a full config's default); "
                "--tower vision: SiglipVisionModel with its attention-pooling head when vision_use_head "
                "(pooler_output); --tower text: SiglipTextModel with its head (pooler_output); with --no-pooler "
                "their last_hidden_state",
                architectures=("SiglipModel", "SiglipVisionModel", "SiglipTextModel"),
                refused=("image_size not a multiple of patch_size",
                         "both towers with vision_use_head false (SiglipModel reads the head's pooler_output)",
                         "both towers with text_config.projection_size != vision_config.hidden_size",
                         "--no-pooler with both towers (the logits need the pooled embeddings)"),
                keys=VISION_TOWER_KEYS + SIGLIP_TEXT_KEYS + under("text_config", SIGLIP_TEXT_KEYS),
                options=(TOWER, POOLER), variant=siglip_variant)

FAMILY_LIST = (SIGLIP,)
