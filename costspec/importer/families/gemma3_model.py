"""Gemma 3's whole multimodal model (Gemma3ForConditionalGeneration): one spec joined from the two specs the
towers' families write, the text decoder (`gemma3_text`) and the SigLIP vision tower (`siglip_vision_model`,
its last_hidden_state), with the multimodal projector between them.

The model runs: input_ids -> embed_tokens (x sqrt(C)); pixel_values -> the vision tower -> the projector
(average pool of the patch grid to mm_tokens_per_image tokens, Gemma's RMSNorm, a matmul to the text width);
the image features written over the image placeholder tokens of the embedded ids (a masked scatter: a copy,
no FLOPs); the decoder layers over all S tokens; the LM head. The spec writes the scatter as a copy too: the
embedded ids without their first M tokens, joined after the M image features (`slice` + `concat`: where the
placeholders sit changes no cost). The vision tower's dims that share a name with the decoder's are renamed
(C -> Cv, F -> Fv, heads -> Hv, L -> Lv; its patch tokens S -> N).
"""
from __future__ import annotations

import math
import re
import textwrap

from costspec.importer.config import HFConfig, ImportProblem

TOWERS = "--tower text or --tower vision imports one tower"
VISION_PREFIX = "model.vision_tower."
PROJECTOR = "model.multi_modal_projector"
# the vision tower's dims as the joined spec names them (the decoder keeps its own)
RENAMED = {"C": "Cv", "F": "Fv", "heads": "Hv", "L": "Lv", "S": "N"}
_WORD = re.compile(r"\b(" + "|".join(RENAMED) + r")\b(?![.(:])")  # not an attribute's key, F.interpolate
_VALUE = re.compile(r'value: ("[^"]*"|[^,]*)')
_TOP_KEY = re.compile(r"^[A-Za-z_]+:")
_SOURCE = re.compile(r"^(\s*)source: (.+)$")
_MODULE = re.compile(r'^(\s*- module: )"?([^"\s]+)"?(.*)$')


# Gemma3Model's own forward around the masked scatter: work on the ids and the copy the spec's slice + concat
# (no FLOPs) stand for
_MERGE = """\
  - module: "model"
    extra: {select: "B*S + 1", sum: "B*S", scale: 1, "unknown:aten.masked_scatter": "B*S*C"}
    pass: forward
    reason: >-
      Gemma3Model finds the image placeholders by comparing every id with image_token_id (B*S compares:
      select), counts them (a sum of B*S) and checks the count times the width against the image features
      (one multiply, one compare), then writes the image features over the placeholders' embeddings with
      masked_scatter (B*S*C elements read); the spec's slice + concat is the same copy without arithmetic
  - module: "model"
    extra: {select: "B*S*C", "unknown:aten.masked_scatter_backward": "B*M*C"}
    pass: backward
    reason: >-
      masked_scatter's backward: the embeddings' gradient zeroed at the placeholders (a masked_fill of
      B*S*C elements: select) and the image features' gradient gathered from them (masked_scatter_backward,
      B*M*C elements); the spec's concat and slice split and pad the gradient without arithmetic
""".splitlines()


def sections(spec: str) -> dict[str, list[str]]:
    """The rendered spec's top-level sections by key, each its lines after the key's own line (the key's line
    itself under '<key>:line'); the comment lines before `costspec:` under 'header'."""
    out: dict[str, list[str]] = {"header": []}
    key = "header"
    for line in spec.rstrip("\n").split("\n"):
        if _TOP_KEY.match(line):
            key = line.split(":", 1)[0]
            out[key + ":line"] = [line]
            out[key] = []
        else:
            out[key].append(line)
    return out


def _rename(line: str) -> str:
    return _WORD.sub(lambda m: RENAMED[m.group(1)], line)


def _vision_line(line: str, top: bool) -> str:
    """A line of the vision tower's blocks / ignore / layers: dims renamed, top-level sources and ignored
    modules under the vision tower's path."""
    if top and (match := _SOURCE.match(line)) and match.group(1) == "    ":
        return f"{match.group(1)}source: {VISION_PREFIX}{match.group(2).strip(chr(34))}"
    if top and line.startswith("    name: "):  # beside the decoder's layer names
        return "    name: vision_" + line[len("    name: "):]
    if top and (match := _MODULE.match(line)):
        return f'{match.group(1)}"{VISION_PREFIX}{match.group(2)}"{match.group(3)}'
    return _rename(line)


_HEAD = """\
  - module: "model.vision_tower.head"
    reason: >-
      vision_use_head: SiglipVisionModel runs its attention-pooling head in every forward, for a
      pooler_output that Gemma3Model overwrites with the projector's output (no loss reads it: no backward);
      the spec, which Gemma 3's checkpoints match (vision_use_head false), leaves its forward and its
      parameters out: the totals of eval are below the class's by them
""".splitlines()


def _vision_ignore(lines: list[str]) -> list[str]:
    """The vision tower's ignore entries under its path; its head's (left out) with the reason Gemma 3 gives."""
    out: list[str] = []
    skipping = False
    for line in lines:
        if line.startswith("  - "):
            skipping = line.strip() == '- module: "head"'
            if skipping:
                out.extend(_HEAD)
        if not skipping:
            out.append(_vision_line(line, True))
    return out


def projector(cfg: HFConfig, vision: HFConfig, img: int, patch: int) -> tuple[int, int]:
    """mm_tokens_per_image M and the pooling kernel K: Gemma3MultiModalProjector pools the G x G patch grid
    (G = image_size // patch_size) with AvgPool2d(K, K), K = G // sqrt(M), and the model writes the pooled
    tokens over exactly M placeholder tokens: M a square whose side divides G (else the class itself fails:
    a kernel of 0, or a token count the placeholders do not match)."""
    M = cfg.get_int("mm_tokens_per_image", 256)
    side = math.isqrt(M)
    grid = img // patch
    if side * side != M:
        raise ImportProblem(f"{cfg.where('mm_tokens_per_image')} = {M} is not a square: Gemma3MultiModalProjector "
                            "pools the patch grid to int(sqrt(mm_tokens_per_image)) tokens a side, and the model "
                            f"writes them over exactly mm_tokens_per_image placeholders; {TOWERS}")
    if grid % side:
        raise ImportProblem(
            f"{cfg.where('mm_tokens_per_image')} = {M} ({side} tokens a side) does not divide the {grid} patches a "
            "side (vision_config.image_size // patch_size): the whole model's Gemma3MultiModalProjector pools "
            f"with AvgPool2d(kernel {grid} // {side} = {grid // side}), which "
            + ("fails (a kernel of 0)" if grid < side else f"gives {(grid // (grid // side)) ** 2} tokens, not {M}")
            + f"; {TOWERS}")
    return M, grid // side


def join(text_spec: str, vision_spec: str, M: int, K: int, channels: int, doc: str) -> str:
    """The whole model's spec from the decoder's (Gemma3ForConditionalGeneration's sources already: under
    model.language_model, the LM head last) and the vision tower's (SiglipVisionModel's sources)."""
    text, vision = sections(text_spec), sections(vision_spec)
    dims = list(text["dims"])
    for line in vision["dims"]:
        name, rest = line[2:].split(":", 1)
        if name != "B":
            dims.append(f"  {RENAMED.get(name, name)}:" + _VALUE.sub(lambda m: _rename(m.group(0)), rest, count=1))
    dims.append(f"  M: {{value: {M}, doc: \"image tokens: the placeholders of the image among the S tokens, "
                "written over by its pooled features (S > M)\"}  # mm_tokens_per_image")
    dims.append('  K: {value: ' + str(K) + ', doc: "the projector\'s average-pool kernel (patches a side // '
                'sqrt(M))"}  # (image_size // patch_size) // sqrt(mm_tokens_per_image)')
    dims.append('  G: {value: "img // patch", doc: "patches a side"}')
    blocks = text.get("blocks", []) + [_vision_line(line, False) for line in vision.get("blocks", [])]
    ignore = text.get("ignore", []) + _vision_ignore(vision.get("ignore", [])) + _MERGE
    layers = text["layers"]
    cut = next(i for i, line in enumerate(layers) if line.startswith("  - ") and "scale:" not in line
               and "embedding:" not in line)
    while layers[cut - 1].startswith("  #"):
        cut -= 1
    vision_layers = [_vision_line(line, True) for line in vision["layers"]]
    first = next(i for i, line in enumerate(vision_layers) if line.startswith("    source: "))
    vision_layers.insert(first + 1, "    input: pixel_values")
    joined = layers[:cut] + [
        "  # the image placeholders: M of the S tokens (the spec puts them first: their place changes no cost)",
        "  - slice: {axis: 1, start: M}",
        "    name: text_tokens",
        "    save: text_tokens",
    ] + vision_layers + [
        "  # Gemma3MultiModalProjector: the patch grid average-pooled to sqrt(M) x sqrt(M) tokens, RMSNorm (1 + w),",
        "  # times mm_input_projection_weight (Cv x C): the image features",
        "  - sequence:",
        "      - transpose: {axis0: 1, axis1: 2}",
        "      - reshape: {shape: [B, Cv, G, G]}",
        "      - avg_pool2d: {kernel: K}",
        "        source: avg_pool",
        "      - flatten: {start: 2}",
        "      - transpose: {axis0: 1, axis1: 2}  # [B, M, Cv]",
        "      - rmsnorm: {}",
        "        source: mm_soft_emb_norm",
        "      - linear: {out: C, bias: false}  # mm_input_projection_weight",
        "    name: multi_modal_projector",
        f"    source: {PROJECTOR}",
        "  # masked_scatter: the image features in place of the placeholders (a copy, no FLOPs)",
        "  - concat: {with: text_tokens, axis: 1}  # [B, S, C]",
        "    name: merge_image_tokens",
    ] + layers[cut:]
    out = text["header"] + text["costspec:line"] + text["name:line"] + ["doc: >-"]
    out += textwrap.wrap(doc, 106, initial_indent="  ", subsequent_indent="  ")
    out += text["source:line"] + [line.replace("model_type gemma3_text", "model_type gemma3", 1)
                                  for line in text["source"]]
    out += [line for line in vision["source"] if line.startswith("#")]  # its notes, not its source
    out += ["dims:"] + dims + text["precision:line"] + text["input:line"]
    out += ["inputs:", f"  pixel_values: [B, {channels}, img, img]  # the images, one a sequence (passed by name)"]
    out += ["blocks:"] + blocks + (["ignore:"] + ignore if ignore else []) + ["layers:"] + joined
    return "\n".join(out) + "\n"
