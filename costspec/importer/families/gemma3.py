"""Gemma 3, the multimodal config (`gemma3`: Gemma3ForConditionalGeneration): its text decoder (the default,
--tower text), written by the `gemma3_text` family of the decoder template from `text_config`
(Gemma3ForCausalLM, the LM head included), or its vision tower (--tower vision: SiglipVisionModel's
last_hidden_state, written by the siglip family from `vision_config`).

The whole model is not written: Gemma3ForConditionalGeneration replaces the image placeholder tokens of the
text sequence (mm_tokens_per_image per image) with the projected vision tokens (a masked scatter by token
id), which no spec construct expresses yet; the projector (average pool to mm_tokens_per_image, RMSNorm,
linear) has no transformers class of its own to check a spec against.
"""
from __future__ import annotations

import textwrap
from dataclasses import replace

from costspec.core.errors import UsageError
from costspec.importer.config import HFConfig, under
from costspec.importer.families import FAMILIES, TOWER, Family, Variant

WHY = ("Gemma3ForConditionalGeneration puts mm_tokens_per_image projected vision tokens in place of each image's "
       "placeholder tokens (a masked scatter by token id), which no spec construct expresses yet")
MULTIMODAL = f"the spec is one part of the multimodal model: {WHY}"
# keys of the composite config that Gemma3ForCausalLM, built from it, takes over from the top level
SHARED = ("tie_word_embeddings", "torch_dtype", "dtype")


def _text(cfg: HFConfig) -> HFConfig:
    """text_config with the top-level keys transformers' tower config takes from the composite one."""
    nested = cfg.get("text_config")
    data = dict(nested) if isinstance(nested, dict) else {}
    data.update({key: cfg.get(key) for key in SHARED if cfg.get(key) is not None})
    text = HFConfig(data, cfg.path, "text_config.", dtype=cfg.dtype if cfg.dtype_source == "--dtype" else None,
                    name=cfg.name)
    text.backbone = cfg.backbone
    return text


def _vision(cfg: HFConfig) -> HFConfig:
    """vision_config as a siglip_vision_model config read without its head (Gemma 3 reads last_hidden_state)."""
    nested = cfg.get("vision_config")
    data = {**(dict(nested) if isinstance(nested, dict) else {}), "model_type": "siglip_vision_model"}
    data.update({key: cfg.get(key) for key in SHARED[1:] if cfg.get(key) is not None})
    vision = HFConfig(data, cfg.path, "vision_config.", dtype=cfg.dtype if cfg.dtype_source == "--dtype" else None,
                      name=cfg.name)
    vision.pooler = False
    return vision


def _header(spec: str, line: str) -> str:
    said = "\n".join("# " + part for part in textwrap.wrap(line, 110))
    return spec.replace("# `source:`", said + "\n# `source:`", 1)


def gemma3_variant(cfg: HFConfig) -> Variant:
    tower = _tower(cfg)
    return Variant("SiglipVisionModel" if tower == "vision" else "Gemma3ForCausalLM")


def _tower(cfg: HFConfig) -> str:
    if cfg.tower == "both":
        raise UsageError(f"--tower both: {WHY}; import --tower text (the default) and --tower vision")
    return cfg.tower or "text"


def build_gemma3(cfg: HFConfig) -> str:
    if _tower(cfg) == "vision":
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
                       "last_hidden_state, the head left out as Gemma 3 does), without the projector; " + MULTIMODAL)
    text_family = FAMILIES["gemma3_text"]
    text = _text(cfg)
    text.validate(text_family.keys)
    spec = text_family.build(text)
    cfg.sub("text_config")
    ignored = {f"text_config.{key}": why for key, why in text.ignored.items()}
    ignored.update({key: "read by the text decoder" for key in text.read_keys()})
    for key in ("vision_config", "mm_tokens_per_image", "boi_token_index", "eoi_token_index", "image_token_index"):
        ignored[key] = "--tower text (the default): " + MULTIMODAL
    cfg.check_understood(ignored)
    return _header(spec, "--tower text (the default): the spec is Gemma 3's text decoder (Gemma3ForCausalLM); "
                   + MULTIMODAL)


# the text decoder's backbone is Gemma3TextModel (transformers' Gemma3Model is the multimodal one)
_TEXT_LM = FAMILIES["gemma3_text"].lm
assert _TEXT_LM is not None
LM = replace(_TEXT_LM, backbone="Gemma3TextModel")
GEMMA3 = Family(("gemma3",), "Gemma3ForCausalLM", build_gemma3,
                "Gemma 3 from a multimodal gemma3 config: its text decoder (Gemma3ForCausalLM, LM head included; "
                "the default) or, --tower vision, its vision tower (SiglipVisionModel's last_hidden_state); not the "
                "whole model nor the projector",
                architectures=("Gemma3ForConditionalGeneration",), lm=LM,
                refused=("--tower both (the image tokens replace placeholder tokens: no spec construct)",),
                keys=under("text_config", FAMILIES["gemma3_text"].keys), options=(TOWER,), variant=gemma3_variant)

FAMILY_LIST = (GEMMA3,)
