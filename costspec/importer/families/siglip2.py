"""SigLIP 2 (transformers' Siglip2Model, Siglip2VisionModel, Siglip2TextModel): the text tower is imported
(a `siglip2_text_model` config, or `--tower text` of a full `siglip2` config: Siglip2TextModel, the same modules,
config keys and forward as SiglipTextModel, written by the siglip family's text builder); the vision tower and
the whole model are refused, with the reasons. The vision tower is a NaFlex tower: flattened patches of any
grid, a per-image resize of the position table to that grid, and a model that does not run on meta, so no
spec of it could be checked (`SIGLIP2_GAPS`; docs/import.md says the same)."""
from __future__ import annotations

from costspec.importer.config import HFConfig, ImportProblem, under
from costspec.importer.families import POOLER, TOWER, Family, Variant
from costspec.importer.families.siglip import SIGLIP_TEXT_KEYS, build_siglip_text

SIGLIP2_GAPS = (
    "Siglip2VisionModel does not run on meta: its position-embedding resize reads spatial_shapes as data "
    "(spatial_shapes[i].tolist() for each image: 'Cannot copy out of meta tensor'), so `validate --against` "
    "cannot count it",
    "its NaFlex patch embedding has no spec construct: pixel_values come as flattened patches "
    "(B, max_num_patches, channels * patch**2) with a mask, each image with its own grid (spatial_shapes), and "
    "the (sqrt(num_patches), sqrt(num_patches), C) position table is resized to every image's grid by a "
    "bilinear, antialiased interpolation per image before it is added",
)
TEXT_TOWER = "--tower text imports the text tower (Siglip2TextModel)"
# keys of the composite config its text config takes over from the top level
SHARED = ("torch_dtype", "dtype")


def _text_only(cfg: HFConfig) -> bool:
    return cfg.model_type == "siglip2_text_model" or (cfg.model_type == "siglip2" and cfg.tower == "text")


def siglip2_variant(cfg: HFConfig) -> Variant:
    return Variant("Siglip2TextModel", output="pooler_output" if cfg.pooler else None)


def _as_siglip_text(cfg: HFConfig) -> HFConfig:
    """The text config as a siglip_text_model config (the same keys and defaults: SiglipTextConfig's)."""
    nested = cfg.model_type == "siglip2"
    source = cfg.get("text_config") if nested else cfg.data
    data = {**(dict(source) if isinstance(source, dict) else {}), "model_type": "siglip_text_model"}
    if nested:
        data.update({key: cfg.get(key) for key in SHARED if cfg.get(key) is not None and key not in data})
    text = cfg.view(data, "text_config" if nested else "")
    text.pooler = cfg.pooler
    return text


def build_siglip2(cfg: HFConfig) -> str:
    if not _text_only(cfg):
        gaps = "; ".join(f"({i}) {gap}" for i, gap in enumerate(SIGLIP2_GAPS, 1))
        where = f" --tower {cfg.tower}" if cfg.tower else ""
        raise ImportProblem(f"{cfg.where('model_type')} = {cfg.model_type!r}{where}: SigLIP 2's vision tower (and so "
                            f"the whole model) is not imported: {gaps}"
                            + (f"; {TEXT_TOWER}" if cfg.model_type == "siglip2" else ""))
    text = _as_siglip_text(cfg)
    spec = build_siglip_text(text)
    own = cfg.sub("text_config") if cfg.model_type == "siglip2" else cfg
    prefix = "text_config." if own is not cfg else ""
    for key in text.read_keys():  # the keys the builder read, read here too (the import lists them)
        if own.has(key.removeprefix(prefix)):
            own.get(key.removeprefix(prefix))
    ignored = {prefix + key: why for key, why in text.ignored.items()}
    if own is not cfg:
        ignored["vision_config"] = "--tower text: the spec is the text tower (Siglip2TextModel)"
        ignored["initializer_factor"] = "initialisation only"
    cfg.check_understood(ignored)
    spec = spec.replace("SiglipTextModel", "Siglip2TextModel")  # the class named in the header and reasons
    spec = spec.replace("(model_type siglip_text_model,", f"(model_type {cfg.model_type},", 1)
    return spec.replace("SigLIP text tower imported", "SigLIP 2 text tower imported", 1)


SIGLIP2 = Family(("siglip2", "siglip2_vision_model", "siglip2_text_model"), "Siglip2TextModel", build_siglip2,
                 "SigLIP 2: the text tower (Siglip2TextModel: a siglip2_text_model config, or --tower text of a full "
                 "config; its head's pooler_output, --no-pooler last_hidden_state); the vision tower and the whole "
                 "model refused (the NaFlex vision tower does not run on meta and has no spec construct)",
                 architectures=("Siglip2Model", "Siglip2VisionModel", "Siglip2TextModel",
                                "Siglip2ForImageClassification"),
                 refused=tuple(f"siglip2, siglip2_vision_model: {gap}" for gap in SIGLIP2_GAPS),
                 keys=SIGLIP_TEXT_KEYS + under("text_config", SIGLIP_TEXT_KEYS), options=(TOWER, POOLER),
                 variant=siglip2_variant)

FAMILY_LIST = (SIGLIP2,)
