"""CLIP (CLIPModel: both towers, their projections and the logits; or one tower: --tower vision | text, without
its pooler with --no-pooler) and SAM's image encoder."""
from __future__ import annotations

from costspec.core.errors import UsageError
from costspec.importer.config import HFConfig, ImportProblem, count, heads, layers, size, under
from costspec.importer.emit import SpecText
from costspec.importer.families import POOLER, TOWER, Family, Variant
from costspec.importer.families.common import (
    GELU_NEW_NOTE,
    VISION_TOWER_KEYS,
    activation,
    check_divides,
    check_whole_patches,
    qkv_grad_ignore,
    square_size,
)
from costspec.importer.families.siglip_text import CLIP_TEXT, both_towers, text_tower

SAM_PROMPT = "the spec is SAM's image encoder (SamVisionModel); the prompt encoder and mask decoder run per prompt"
VISION, TEXT, BOTH = "vision", "text", "both"


def _tower(cfg: HFConfig, key: str, own_type: str) -> HFConfig:
    """The vision config: the config itself (model_type `own_type`) or its nested `key`."""
    return cfg if cfg.model_type == own_type else cfg.sub(key)


def pick_tower(cfg: HFConfig, vision_type: str, text_type: str) -> str:
    """The towers an import describes: --tower, else both for a composite config, else the config's own; a
    tower the config does not hold, or --no-pooler with both (the logits need the pooled embeddings), refused."""
    own = VISION if cfg.model_type == vision_type else TEXT if cfg.model_type == text_type else BOTH
    tower = cfg.tower or own
    if own != BOTH and tower != own:
        raise UsageError(f"--tower {tower}: {cfg.path} is a {cfg.model_type} config (the {own} tower alone); pass "
                         "the model's full config for the other tower or both")
    if tower == BOTH and not cfg.pooler:
        raise UsageError("--no-pooler with both towers: the model's logits are products of the pooled embeddings "
                         "(pass --tower vision or --tower text to end a tower at its last_hidden_state)")
    return tower


# ----------------------------------------------------------------------------------------------
# CLIP
# ----------------------------------------------------------------------------------------------
_POST_LN = """\
- module: "{src}post_layernorm"
  reason: >-
    the pooler: CLIPVisionModel runs post_layernorm on the class token for pooler_output; with --no-pooler
    the spec ends at last_hidden_state, before it (its 2*C parameters and its forward are left out)
"""


_VISION_POSITIONS = """\
- module: "{src}embeddings.position_embedding"
  extra: {{scatter_add: "min(B - 1, 1)*S*C"}}
  pass: backward
  reason: >-
    CLIPVisionEmbeddings reads the (S, C) position table with an nn.Embedding lookup of position_ids; for
    B > 1 its backward sums the gradient over the batch (the spec's broadcast add does that too) and then
    scatter-adds it into the table rows (S*C adds); at B = 1 the scatter-add is the only reduction
"""


def _clip_vision(spec: SpecText, vision: HFConfig, p: str, src: str, pooled: bool) -> str:
    """The vision tower's dims, block and ignore entries on `spec`; its layers (ending at the projection to E,
    or, not `pooled`, at the encoder's last_hidden_state)."""
    img = square_size(vision, "image_size", 224)
    patch = square_size(vision, "patch_size", 32)
    check_whole_patches(vision, img, patch)
    C = vision.get_int("hidden_size", 768)
    heads = vision.get_int("num_attention_heads", 12)
    check_divides(vision, "hidden_size", C, "num_attention_heads", heads)
    spec.dim("img", img, "image side in pixels", p + "image_size")
    spec.dim("patch", patch, "patch side in pixels", p + "patch_size")
    spec.dim("C", C, "width", p + "hidden_size")
    spec.dim("heads", heads, "attention heads", p + "num_attention_heads")
    spec.dim("L", vision.get_int("num_hidden_layers", 12), "depth (encoder layers)", p + "num_hidden_layers")
    spec.dim("F", vision.get_int("intermediate_size", 3072), "MLP hidden width", p + "intermediate_size")
    spec.derived("S", "(img // patch)**2 + 1", "tokens (patches + class token)")
    fn = activation(vision, "hidden_act", "quick_gelu")
    if vision.get("hidden_act") == "gelu_new":
        spec.note(GELU_NEW_NOTE)
    spec.block("clip_block", f"""\
- residual:
    - layernorm: {{}}  # layer_norm1
      source: layer_norm1
    - attention: {{heads: heads}}  # q/k/v/out projections, all with bias
      source: self_attn
- residual:
    - layernorm: {{}}  # layer_norm2
      source: layer_norm2
    - mlp: {{hidden: F, fn: {fn}}}  # fc1 -> hidden_act -> fc2
      source: mlp
""")
    spec.ignore(qkv_grad_ignore(f"{src}encoder.layers.*.self_attn"))
    spec.ignore(_VISION_POSITIONS.format(src=src))
    layers = f"""\
- patch_embed: {{patch: patch, dim: C, cls_token: true, pos_embed: true, bias: false}}  # patch_embedding: no bias
  source: {src}embeddings
- layernorm: {{}}  # CLIP's extra LayerNorm before the encoder
  name: ln_pre
  source: {src}pre_layrnorm
- repeat: L
  name: blocks
  body: clip_block
  source: {src}encoder.layers
"""
    if not pooled:
        spec.ignore(_POST_LN.format(src=src))
        return layers
    return layers + f"""\
- take_token: {{index: 0}}  # pooled output: the class token
- layernorm: {{}}
  name: ln_post
  source: {src}post_layernorm
- linear: {{out: E, bias: false}}
  name: proj
  source: visual_projection
"""


def _clip_classes(tower: str, pooled: bool) -> str:
    if tower == BOTH:
        return "CLIPModel"
    name = "CLIPVisionModel" if tower == VISION else "CLIPTextModel"
    return name + "WithProjection" if pooled else name


def clip_variant(cfg: HFConfig) -> Variant:
    return Variant(_clip_classes(pick_tower(cfg, "clip_vision_model", "clip_text_model"), cfg.pooler))


def build_clip(cfg: HFConfig) -> str:
    tower = pick_tower(cfg, "clip_vision_model", "clip_text_model")
    hf = _clip_classes(tower, cfg.pooler)
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' {hf})")
    spec.dim("B", 1, "batch size" + (" (images and texts: the logits are B x B)" if tower == BOTH else ""))
    # CLIPModel projects with the top-level projection_dim; a tower's class alone with its config's own
    E = cfg.get_int("projection_dim", 512)
    for key, used in (("vision_config", VISION), ("text_config", TEXT)):
        if key in cfg.data and tower in (used, BOTH):
            cfg.sub(key).get("projection_dim")  # read: the composite's projection_dim is the one CLIPModel uses
    if cfg.pooler:
        which = {VISION: "visual_projection", TEXT: "text_projection", BOTH: "visual_projection, text_projection"}
        spec.dim("E", E, f"output embedding dim ({which[tower]})", "projection_dim")
    spec.precision(cfg.dtype, cfg.dtype_source)
    composite = cfg.model_type not in ("clip_vision_model", "clip_text_model")
    layers, ignored = "", {"initializer_factor": "initialisation only",
                           "logit_scale_init_value": "initialisation only (logit_scale's starting value)"}
    if tower in (TEXT, BOTH):
        text = cfg.sub("text_config") if composite else cfg
        src = "" if hf == "CLIPTextModel" else "text_model."
        layers = text_tower(spec, text, CLIP_TEXT, "text_config." if composite else "", src, "E", cfg.pooler)
        spec.input(["B", "T"], "input_ids")
    else:
        ignored["text_config"] = f"the spec is the image tower ({hf}); --tower text or both for the text tower"
    if tower in (VISION, BOTH):
        vision = cfg.sub("vision_config") if composite else cfg
        p = "vision_config." if composite else ""
        vision_layers = _clip_vision(spec, vision, p, "" if hf == "CLIPVisionModel" else "vision_model.", cfg.pooler)
        shape = ["B", str(vision.get_int("num_channels", 3)), "img", "img"]
        if tower == BOTH:
            spec.further_input("pixel_values", shape, "the images (passed by name)")
            layers = both_towers(layers, vision_layers, "vision_model.embeddings", "clip")
        else:
            spec.input(shape, p + "num_channels")
            layers = vision_layers
    else:
        ignored["vision_config"] = f"the spec is the text tower ({hf}); --tower vision or both for the image tower"
    spec.doc = _clip_doc(tower, cfg.pooler)
    output = {"CLIPModel": "logits_per_image", "CLIPVisionModelWithProjection": "image_embeds",
              "CLIPTextModelWithProjection": "text_embeds"}.get(hf, "last_hidden_state")
    spec.header.append(f"# `source:` and `ignore:` name modules of transformers' {hf}; the spec's output is its "
                       f"{output}" + ("" if cfg.pooler else " (imported with --no-pooler)"))
    spec.layers(layers)
    cfg.check_understood(ignored)
    return spec.render()


def _clip_doc(tower: str, pooled: bool) -> str:
    vision = ("the vision tower (patch embedding without bias, class token, learned positions, pre_layrnorm, pre-LN "
              "layers with a quick_gelu MLP" + (", post_layernorm on the class token and visual_projection)"
                                                 if pooled else "; its last_hidden_state, no pooler)"))
    text = ("the text tower (token embedding + learned positions, causal pre-LN layers, final_layer_norm"
            + (", the EOS token and text_projection)" if pooled else "; its last_hidden_state, no pooler)"))
    parts = {VISION: vision, TEXT: text, BOTH: f"{text}, {vision}"}[tower]
    return (f"CLIP imported from a Hugging Face config: {parts}" + (
        " and the logits (logits_per_image): both embeddings divided by their L2 norms, their dot products times "
        "exp(logit_scale)" if tower == BOTH else ""))


SAM_KEYS = (size("hidden_size"), size("output_channels"), layers("num_hidden_layers"),
            heads("num_attention_heads", "hidden_size"), size("num_channels"), size("image_size", items=True),
            size("patch_size", items=True), count("window_size"), count("global_attn_indexes", items=True),
            size("mlp_dim"))
CLIP_TEXT_KEYS = (size("hidden_size"), size("intermediate_size"), layers("num_hidden_layers"),
                  heads("num_attention_heads", "hidden_size"), size("vocab_size"), size("max_position_embeddings"),
                  size("projection_dim"))
CLIP = Family(("clip", "clip_vision_model", "clip_text_model"), "CLIPModel", build_clip,
              "CLIP: both towers, their projections and the logits (CLIPModel, logits_per_image: a full config's "
              "default); --tower vision / text: CLIPVisionModelWithProjection / CLIPTextModelWithProjection; with "
              "--no-pooler CLIPVisionModel / CLIPTextModel (last_hidden_state)",
              refused=("--no-pooler with both towers (the logits need the pooled embeddings)",),
              architectures=("CLIPVisionModel", "CLIPTextModel"),
              keys=VISION_TOWER_KEYS + under("text_config", CLIP_TEXT_KEYS), options=(TOWER, POOLER),
              variant=clip_variant)


# ----------------------------------------------------------------------------------------------
# SAM
# ----------------------------------------------------------------------------------------------
def build_sam(cfg: HFConfig) -> str:
    vision = _tower(cfg, "vision_config", "sam_vision_model")
    p = "vision_config." if vision is not cfg else ""
    spec = SpecText(cfg.name, "", f"Hugging Face config {cfg.path} (model_type {cfg.model_type}, transformers' "
                    "SamVisionModel)")
    img = square_size(vision, "image_size", 1024)
    patch = square_size(vision, "patch_size", 16)
    check_whole_patches(vision, img, patch)
    C = vision.get_int("hidden_size", 768)
    heads = vision.get_int("num_attention_heads", 12)
    check_divides(vision, "hidden_size", C, "num_attention_heads", heads)
    L = vision.get_int("num_hidden_layers", 12)
    ratio = vision.get("mlp_ratio", 4.0)
    mlp = vision.get("mlp_dim")
    if mlp is None:  # SamVisionConfig: mlp_dim = int(hidden_size * mlp_ratio)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 0:
            raise ImportProblem(f"{vision.where('mlp_ratio')} = {ratio!r}: expected a positive number")
        mlp = int(C * ratio)
    mlp = vision.get_int("mlp_dim", mlp)
    win = vision.get_int("window_size", 14, minimum=0)
    glob = vision.get("global_attn_indexes", [])
    if not isinstance(glob, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < L
                                             for i in glob) or len(set(glob)) != len(glob):
        raise ImportProblem(f"{vision.where('global_attn_indexes')} = {glob!r}: expected distinct block indices "
                            f"0 .. {L - 1} (num_hidden_layers = {L})")
    rel_pos = vision.get_bool("use_rel_pos", True)
    abs_pos = vision.get_bool("use_abs_pos", True)
    N = vision.get_int("output_channels", 256)
    spec.dim("B", 1, "batch size")
    spec.dim("img", img, "image side in pixels", p + "image_size")
    spec.dim("patch", patch, "patch side in pixels", p + "patch_size")
    spec.dim("C", C, "model width", p + "hidden_size")
    spec.dim("heads", heads, "attention heads", p + "num_attention_heads")
    spec.dim("L", L, "depth (encoder blocks)", p + "num_hidden_layers")
    spec.dim("F", mlp, "MLP hidden width", p + "mlp_dim")
    windowed = win > 0 and len(glob) < L
    if windowed:
        spec.dim("win", win, "window side in tokens (windowed blocks)", p + "window_size")
    spec.dim("N", N, "neck channels", p + "output_channels")
    spec.derived("G", "img // patch", "token grid side")
    spec.derived("S", "G**2", "tokens (the G x G grid; no class token)")
    fn = activation(vision, "hidden_act", "gelu")
    spec.precision(cfg.dtype, cfg.dtype_source)
    spec.input(["B", str(vision.get_int("num_channels", 3)), "img", "img"], p + "num_channels")
    where = (f"{win}x{win} windowed attention" + (f" and global attention at blocks {', '.join(map(str, glob))}"
                                                  if glob else "") if windowed else "global attention")
    spec.doc = (f"SAM image encoder imported from a Hugging Face config: patch {patch}, width {C}, {L} pre-LN "
                f"blocks with {where}" + (", decomposed relative positions" if rel_pos else "")
                + f", {fn} MLP; neck conv1x1 -> LayerNorm2d -> conv3x3 -> LayerNorm2d to {N} channels")
    qkv = "" if vision.get_bool("qkv_bias", True) else ", qkv_bias: false"
    rel = ", rel_pos: true" if rel_pos else ""
    attention = (f"- attention: {{heads: heads, window: window, grid: [G, G]{rel}{qkv}}}  # window_size, use_rel_pos"
                 if windowed else f"- attention: {{heads: heads, grid: [G, G]{rel}{qkv}}}  # use_rel_pos")
    body = f"""\
- residual:
    - layernorm: {{}}  # layer_norm1
      source: layer_norm1
    # with a window, SAM pads the grid to a multiple of it and runs qkv, the attention and proj on the
    # padded windows: charged as executed
    {attention}
      source: attn
- residual:
    - layernorm: {{}}  # layer_norm2
      source: layer_norm2
    - mlp: {{hidden: F, fn: {fn}}}  # lin1 -> hidden_act -> lin2
      source: mlp
"""
    if windowed:
        spec.block("sam_block", "params: {window: win}  # window side; 0 = global attention\nlayers:\n"
                   + "\n".join("  " + line if line else "" for line in body.splitlines()) + "\n")
    else:
        spec.block("sam_block", body)
    spec.header.append("# `source:` and `ignore:` name modules of transformers' SamVisionModel")
    if rel_pos:
        spec.ignore("""\
- module: "vision_encoder.layers.*.attn"
  kinds: [unknown:aten.upsample_linear1d, unknown:aten.upsample_linear1d_backward]
  reason: >-
    transformers' get_rel_pos always resizes the relative-position tables with F.interpolate (to
    2*size-1 rows, the size they already have); the spec reads the tables as they are
""")
    pos = ", pos_embed: true" if abs_pos else ""
    at = (f"\n  at:\n    - {{indices: [{', '.join(map(str, glob))}], name: global, args: {{window: 0}}}}"
          "  # global_attn_indexes" if windowed and glob else "")
    spec.layers(f"""\
- patch_embed: {{patch: patch, dim: C{pos}}}  # use_abs_pos: a (G, G, C) table added on the grid
  source: vision_encoder.patch_embed
- repeat: L
  name: blocks
  body: sam_block
  source: vision_encoder.layers{at}
""")
    spec.layers("""\
- transpose: {axis0: 1, axis1: 2}  # [B, C, S]
- reshape: {shape: [B, C, G, G]}
- sequence:
    - conv2d: {out: N, kernel: 1, bias: false}  # conv1
    - layernorm2d: {}  # layer_norm1
    - conv2d: {out: N, kernel: 3, padding: 1, bias: false}  # conv2
    - layernorm2d: {}  # layer_norm2
  name: neck
  source: vision_encoder.neck
""")
    cfg.check_understood({
        "num_pos_feats": SAM_PROMPT, "scale": SAM_PROMPT, "prompt_encoder_config": SAM_PROMPT,
        "mask_decoder_config": SAM_PROMPT, "tie_word_embeddings": SAM_PROMPT,
        **({} if mlp is None else {}),
    })
    return spec.render()


SAM = Family(("sam", "sam_vision_model"), "SamVisionModel", build_sam,
             "SAM's image encoder: windowed and global attention, relative positions, the neck "
             "(a full SAM config: its vision_config)", architectures=("SamModel",),
             refused=("global_attn_indexes that are not distinct block indices below num_hidden_layers",),
             keys=SAM_KEYS + under("vision_config", SAM_KEYS))

FAMILY_LIST = (CLIP, SAM)
