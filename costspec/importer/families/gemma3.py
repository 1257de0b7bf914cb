"""Gemma 3, the multimodal config (`gemma3`): the whole model by default (Gemma3ForConditionalGeneration, or
Gemma3Model with --backbone: the SigLIP vision tower, the multimodal projector and the text decoder with its LM
head, joined by `gemma3_model`), or one tower: --tower text, the text decoder written by the `gemma3_text`
family of the decoder template from `text_config` (Gemma3ForCausalLM, the LM head included); --tower vision,
the vision tower (SiglipVisionModel's last_hidden_state, written by the siglip family from `vision_config`).

A config whose projector cannot pool the patch grid to mm_tokens_per_image tokens (transformers' default
Gemma3Config: a 14 x 14 grid and 256 tokens, an AvgPool2d kernel of 0: the class itself fails) imports its
text decoder by default, the header saying why; --tower both refuses it with that reason.
"""
from __future__ import annotations

import textwrap
from dataclasses import replace

from costspec.core.errors import UsageError
from costspec.importer import head
from costspec.importer.config import HFConfig, ImportProblem, size, under
from costspec.importer.families import FAMILIES, TOWER, Family, Variant
from costspec.importer.families.common import ENCODER_KEYS, square_size
from costspec.importer.families.gemma3_model import TOWERS, join, projector, sections
from costspec.importer.head import CausalLM

WHOLE = "both"
PART = ("the spec is one tower of the multimodal model (the default, or --tower both, imports the whole "
        "Gemma3ForConditionalGeneration)")
# keys of the composite config that Gemma3ForCausalLM, built from it, takes over from the top level
SHARED = ("tie_word_embeddings", "torch_dtype", "dtype")


def _text(cfg: HFConfig) -> HFConfig:
    """text_config with the top-level keys transformers' tower config takes from the composite one."""
    nested = cfg.get("text_config")
    data = dict(nested) if isinstance(nested, dict) else {}
    data.update({key: cfg.get(key) for key in SHARED if cfg.get(key) is not None})
    text = cfg.view(data, "text_config")
    text.backbone = cfg.backbone
    return text


def _vision(cfg: HFConfig) -> HFConfig:
    """vision_config as a siglip_vision_model config read without its head (Gemma 3 reads last_hidden_state)."""
    nested = cfg.get("vision_config")
    data = {**(dict(nested) if isinstance(nested, dict) else {}), "model_type": "siglip_vision_model"}
    data.update({key: cfg.get(key) for key in SHARED[1:] if cfg.get(key) is not None})
    vision = cfg.view(data, "vision_config")
    vision.pooler = False
    return vision


def _header(spec: str, line: str) -> str:
    said = "\n".join("# " + part for part in textwrap.wrap(line, 110))
    return spec.replace("# `source:`", said + "\n# `source:`", 1)


def gemma3_variant(cfg: HFConfig) -> Variant:
    tower = _tower(cfg)
    if tower == WHOLE:
        return Variant("Gemma3Model" if cfg.backbone else "Gemma3ForConditionalGeneration")
    return Variant("SiglipVisionModel" if tower == "vision" else "Gemma3ForCausalLM")


def _tower(cfg: HFConfig) -> str:
    """--tower, else the whole model when its projector can pool the patch grid to mm_tokens_per_image tokens
    (`whole_refusal` None), else the text decoder."""
    if cfg.tower is not None:
        return cfg.tower
    return WHOLE if whole_refusal(cfg) is None else "text"


def whole_refusal(cfg: HFConfig) -> str | None:
    """Why the whole model cannot be written for this config (the projector's pooling), or None."""
    vision = _vision(cfg)
    try:
        img, patch = square_size(vision, "image_size", 224), square_size(vision, "patch_size", 16)
        if img % patch:
            return (f"{vision.where('image_size')} = {img} is not a multiple of patch_size = {patch}: the whole "
                    "model's projector reshapes the patches to a square grid")
        projector(cfg, vision, img, patch)
        image_token = cfg.get_int("image_token_index", minimum=0)
        vocab = _text(cfg).get_int("vocab_size")
        if image_token >= vocab:
            return (f"{cfg.where('image_token_index')} = {image_token} is not below text_config.vocab_size = {vocab}: "
                    "Gemma3Model then clones the ids and sets the placeholders to 0 before the lookup (an index_put "
                    f"the spec does not write); {TOWERS}")
    except ImportProblem as exc:
        return str(exc)
    return None


def build_gemma3(cfg: HFConfig) -> str:
    tower = _tower(cfg)
    if tower == WHOLE:
        return _whole(cfg)
    if tower == "vision":
        if cfg.backbone:
            raise UsageError("--backbone: --tower vision writes SiglipVisionModel, which has no LM head")
        siglip = FAMILIES["siglip_vision_model"]
        vision = _vision(cfg)
        vision.validate(siglip.keys)
        spec = siglip.build(vision)
        cfg.sub("vision_config")
        ignored = {f"vision_config.{key}": why for key, why in vision.ignored.items()}
        ignored.update({key: "read by the vision tower" for key in vision.read_keys()})
        for key in ("text_config", "mm_tokens_per_image", "boi_token_index", "eoi_token_index", "image_token_index",
                    "tie_word_embeddings"):
            ignored[key] = "--tower vision: the text decoder and the projector are left out"
        cfg.check_understood(ignored)
        spec = spec.replace(" (imported with --no-pooler)", " (what Gemma 3 reads: no head)")
        return _header(spec, "--tower vision: the spec is Gemma 3's vision tower (SiglipVisionModel, its "
                       "last_hidden_state, the head left out as Gemma 3 does), without the projector; " + PART)
    text = _text(cfg)
    spec = _text_spec(text)
    cfg.sub("text_config")
    ignored = {f"text_config.{key}": why for key, why in text.ignored.items()}
    ignored.update({key: "read by the text decoder" for key in text.read_keys()})
    alone = ("--tower text: the text decoder alone" if cfg.tower == "text" else "the text decoder alone: the whole "
             "model's projector cannot pool this config's patch grid to mm_tokens_per_image tokens")
    for key in ("vision_config", "mm_tokens_per_image", "boi_token_index", "eoi_token_index", "image_token_index"):
        ignored[key] = alone
    cfg.check_understood(ignored)
    if cfg.tower == "text":
        return _header(spec, "--tower text: the spec is Gemma 3's text decoder (Gemma3ForCausalLM); " + PART)
    reason = str(whole_refusal(cfg)).removesuffix(f"; {TOWERS}")
    return _header(spec, "the spec is Gemma 3's text decoder (Gemma3ForCausalLM): the default falls back to it "
                   f"because the whole model cannot be written for this config: {reason}")


def _decoder_doc(spec: str) -> str:
    """What the decoder family's doc says of its blocks: the text in its parentheses after `N blocks`."""
    doc = " ".join(line.strip() for line in sections(spec)["doc"])
    start = doc.find(" blocks (")
    if start < 0:
        return "its blocks"
    depth, end = 0, start + len(" blocks ")
    for end in range(start + len(" blocks "), len(doc)):
        depth += {"(": 1, ")": -1}.get(doc[end], 0)
        if depth == 0:
            break
    return doc[doc.rfind(", ", 0, start) + 2 if doc.rfind(", ", 0, start) >= 0 else 0:end + 1]


def _text_spec(text: HFConfig) -> str:
    family = FAMILIES["gemma3_text"]
    text.validate(family.keys)
    return family.build(text)


def _whole(cfg: HFConfig) -> str:
    """Gemma3ForConditionalGeneration (Gemma3Model with --backbone): the vision tower, the projector and the
    text decoder on S tokens, M of them the image's (gemma3_model.join)."""
    reason = whole_refusal(cfg)
    if reason is not None:
        raise ImportProblem(reason)
    text, vision = _text(cfg), _vision(cfg)
    img, patch = square_size(vision, "image_size", 224), square_size(vision, "patch_size", 16)
    M, K = projector(cfg, vision, img, patch)
    decoder = head.whole(head.backbone(_text_spec(text), LM), DECODER_LM, cfg)
    siglip = FAMILIES["siglip_vision_model"]
    vision.validate(siglip.keys)
    depth = vision.get_int("num_hidden_layers")
    doc = (f"Gemma 3 imported from a Hugging Face config: the SigLIP vision tower on one {img}x{img} image a "
           f"sequence (patch {patch}, {depth} layer{'' if depth == 1 else 's'} of width "
           f"{vision.get_int('hidden_size')}, its last_hidden_state), the multimodal projector (average pool to "
           f"M = {M} tokens, RMSNorm, a matmul to the text width), the image features written over M of the S "
           "tokens, then the text decoder, " + _decoder_doc(decoder) + ", and the LM head"
           + (" (tied to the embedding)" if cfg.get_bool("tie_word_embeddings", True) else ""))
    spec = join(decoder, siglip.build(vision), M, K, vision.get_int("num_channels"), doc)
    cfg.sub("text_config")
    cfg.sub("vision_config")
    ignored = {f"text_config.{key}": why for key, why in text.ignored.items()}
    ignored.update({f"vision_config.{key}": why for key, why in vision.ignored.items()})
    ignored.update({key: "read by the text decoder" for key in text.read_keys()})
    ignored.update({key: "read by the vision tower" for key in vision.read_keys()})
    for key in ("boi_token_index", "eoi_token_index"):
        ignored[key] = "the begin / end-of-image tokens are text tokens among the S: no cost of their own"
    cfg.check_understood(ignored)
    if cfg.backbone:
        spec = head.backbone(spec, WHOLE_LM)
    said = ("the whole model: the image's M placeholder tokens are among the S tokens (the decoder's cost depends "
            "on S alone); the masked scatter of the image features over them is a copy (no FLOPs), written as slice "
            "+ concat")
    if vision.get_bool("vision_use_head", True):
        said += ("; vision_config.vision_use_head is true: the class runs SiglipVisionModel's head, whose output it "
                 "discards, in every forward; the spec leaves it out (its forward and parameters, named in ignore:)")
    return _header(spec, said)


# the text decoder's backbone is Gemma3TextModel (transformers' Gemma3Model is the multimodal one)
_TEXT_LM = FAMILIES["gemma3_text"].lm
assert _TEXT_LM is not None
LM = replace(_TEXT_LM, backbone="Gemma3TextModel")
# the whole model: the decoder's sources under model.language_model and its head beside `model` (head.whole);
# with --backbone, Gemma3Model: the head cut and every source moved out of `model` (head.backbone)
DECODER_LM = CausalLM("Gemma3ForConditionalGeneration", "Gemma3TextModel", "model.language_model", tied_default=True)
WHOLE_LM = CausalLM("Gemma3ForConditionalGeneration", "Gemma3Model", "model", writes="whole", tied_default=True)
GEMMA3 = Family(("gemma3",), "Gemma3ForConditionalGeneration", build_gemma3,
                "Gemma 3 from a multimodal gemma3 config: the whole model (Gemma3ForConditionalGeneration: vision "
                "tower, projector, text decoder and LM head; --backbone: Gemma3Model), or --tower text its text "
                "decoder (Gemma3ForCausalLM, LM head included), --tower vision its vision tower "
                "(SiglipVisionModel's last_hidden_state)",
                architectures=("Gemma3ForConditionalGeneration",), lm=LM,
                refused=("the whole model (--tower both) when mm_tokens_per_image is not a square whose side divides "
                         "the patch grid (image_size // patch_size): the projector's AvgPool2d cannot give that many "
                         "tokens; or when image_token_index >= text_config.vocab_size (the ids are cloned and the "
                         "placeholders set to 0 first); the default then imports the text decoder",),
                keys=under("text_config", FAMILIES["gemma3_text"].keys) + under("vision_config", ENCODER_KEYS)
                + (size("mm_tokens_per_image"),),
                options=(TOWER,), variant=gemma3_variant)

FAMILY_LIST = (GEMMA3,)
