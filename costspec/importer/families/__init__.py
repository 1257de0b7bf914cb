"""The registry of importer families: one module per family group, each exporting `Family` objects.

To add a group: write `families/<group>.py` with its `Family` objects in a tuple `FAMILY_LIST`,
and add one import line below (the only shared edit).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import import_module

from costspec.importer.config import HFConfig, Key
from costspec.importer.head import CausalLM


@dataclass(frozen=True)
class Family:
    """How one kind of Hugging Face config becomes a spec.

    `model_types`: the config's `model_type` values it takes. `hf_class`: the transformers class whose
    module tree the spec's `source:` paths name (`validate --against hf:<hf_class>`). `build`: the
    spec text from the config. `hf_kwargs`: constructor arguments of `hf_class` the spec assumes
    (ViTModel's add_pooling_layer=false), passed as `--config-set` in the printed check command.
    `architectures`: class names in `architectures` that pick this family when `model_type` is absent.
    `keys`: the numeric keys `build` reads, declared to the shared validation (`HFConfig.validate`, run
    before `build`): type, range and divisibility, each error naming the key.
    """

    model_types: tuple[str, ...]
    hf_class: str
    build: Callable[[HFConfig], str]
    doc: str
    hf_kwargs: Mapping[str, str] = field(default_factory=dict)
    architectures: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()  # what the family refuses (an ImportProblem), for docs/import.md
    # the output of hf_class that the spec's output stands for, from the config (`validate --against
    # --output-field`: pooler_output for a spec ending in the model's pooling head); None: its first tensor
    hf_output: Callable[[HFConfig], str | None] | None = None
    keys: tuple[Key, ...] = ()
    # a causal LM: its whole and backbone classes and what `build` writes; `import hf` describes the whole
    # model (hf_class: lm.whole) unless --backbone (importer/head.py adds or drops the head on the text)
    lm: CausalLM | None = None
    # the import options the family takes (TOWER: --tower, POOLER: --no-pooler; `build` reads them as
    # HFConfig.tower / .pooler) and what the spec then describes (a Variant of the config); None: hf_class
    options: tuple[str, ...] = ()
    variant: Callable[[HFConfig], Variant] | None = None
    # the values --tower takes (a dual tower's vision | text | both; an encoder-decoder's encoder)
    towers: tuple[str, ...] = ("vision", "text", "both")


TOWER, POOLER = "--tower", "--no-pooler"


@dataclass(frozen=True)
class Variant:
    """The transformers class an import describes when its options pick one (a tower, no pooler): the
    class, the `--config-set` values it is built with and the output field the spec's output stands for."""

    hf_class: str
    sets: Mapping[str, str] = field(default_factory=dict)
    output: str | None = None


FAMILIES: dict[str, Family] = {}


def _register(module_name: str) -> None:
    """Add the FAMILY_LIST of families/<module_name>.py to FAMILIES."""
    module = import_module(f".{module_name}", __name__)
    for family in module.FAMILY_LIST:
        for model_type in family.model_types:
            if model_type in FAMILIES:
                raise RuntimeError(f"importer family {model_type!r} registered twice")
            FAMILIES[model_type] = family


# One line per family group (keep this list additive: each group's owner appends its line).
_register("vision")  # the ViT-like template: vit, deit, dinov2, beit, yolos
_register("towers")  # clip, clip_vision_model, sam, sam_vision_model
_register("bert")  # the BERT-like template: bert, roberta, xlm-roberta, electra, distilbert
_register("deberta")  # deberta-v2: disentangled attention
_register("modernbert")  # modernbert: global and local layers
_register("decoders")  # gpt2
_register("t5")  # t5: T5ForConditionalGeneration (--tower encoder: T5EncoderModel)
_register("whisper")  # whisper: the whole encoder-decoder with its LM head
_register("bart")  # bart, mbart, pegasus, marian: whole encoder-decoders, one token table shared
_register("resnet")  # resnet
_register("neox")  # gpt_neox, phi
_register("stages")  # convnext, convnextv2, swin
_register("siglip")  # siglip, siglip_vision_model
_register("modern")  # the decoder template: llama, mistral, qwen2(_moe), gemma, mixtral, qwen3(_moe), gemma2/3, ...
_register("falcon")  # falcon: FalconForCausalLM, LM head included
_register("gptj")  # gptj: GPTJForCausalLM, LM head included
_register("opt")  # opt: OPTForCausalLM, LM head included
_register("ssm")  # mamba, mamba2: MambaForCausalLM, Mamba2ForCausalLM, LM head included
_register("mobilenet")  # mobilenet_v2
_register("efficientnet")  # efficientnet
_register("bloom")  # bloom: BloomForCausalLM (ALiBi), LM head included
_register("jamba")  # jamba: JambaForCausalLM (attention / Mamba, MoE / dense layers), LM head included
_register("segformer")  # segformer: SegformerModel (the MiT encoder)
_register("detr")  # detr: DetrModel, refused with the reasons (timm backbone; what is not modelled)
_register("gemma3")  # gemma3 (multimodal config): the whole model, or its text decoder / vision tower
_register("siglip2")  # siglip2: the text tower; the NaFlex vision tower refused with the reasons (not on meta)
