"""`costspec import hf`: a readable, commented spec from a Hugging Face `config.json`.

The config is read as JSON (never through transformers, never torch); its `model_type` (or, when
absent, a class in `architectures`) picks a family in `families.FAMILIES`, whose `build` writes the
spec text. Every key of the config must be read by the family or listed as not changing the cost
(`HFConfig.check_understood`); the text is loaded and checked before anything is written.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from costspec.core.errors import CostspecError, UsageError
from costspec.core.safeio import HF_CONFIG, read_json, write_text
from costspec.core.text import for_terminal
from costspec.importer import head, rope
from costspec.importer.config import HFConfig, ImportProblem
from costspec.importer.families import FAMILIES, POOLER, TOWER, Family
from costspec.importer.quant import quantisation, quantised
from costspec.importer.starter import schema_line, schema_path, schema_ref
from costspec.spec.load import parse_spec

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Imported:
    """An imported spec: its text, the family that wrote it and the config it came from."""

    text: str
    family: Family
    config_path: str
    output: str | None = None  # the real model's output the spec's output stands for (--output-field)
    hf_class: str = ""  # the transformers class the spec describes (the family's, or its backbone's)
    config: HFConfig | None = None  # the config as read: its keys read, defaulted and ignored (--format json)
    sets: tuple[tuple[str, str], ...] | None = None  # the class's --config-set values (None: the family's)

    @property
    def hf_kwargs(self) -> dict[str, str]:
        return dict(self.family.hf_kwargs) if self.sets is None else dict(self.sets)

    @property
    def described(self) -> str:
        return self.hf_class or self.family.hf_class


def config_file(source: str | os.PathLike) -> Path:
    """SOURCE as a config file: the file itself, DIR/config.json, or in a Hugging Face hub cache folder
    (models--org--name) the config.json of the snapshot refs/main names (or of its only snapshot)."""
    path = Path(source)
    if not path.is_dir():
        return path
    if (path / "config.json").exists():
        return path / "config.json"
    snapshots = path / "snapshots"
    if snapshots.is_dir():
        ref = path / "refs" / "main"
        named = ref.read_text(encoding="utf-8").strip() if ref.is_file() else ""
        found = sorted(p for p in snapshots.iterdir() if (p / "config.json").exists())
        chosen = [p for p in found if p.name == named] or (found if len(found) == 1 else [])
        if chosen:
            return chosen[0] / "config.json"
        if found:
            raise ImportProblem(f"{source}: a hub cache folder with {len(found)} snapshots and no refs/main naming "
                                f"one of them (pass the snapshot folder: {for_terminal(str(found[0]))})")
    raise ImportProblem(f"{source}: a directory without config.json (expected a Hugging Face model folder, a hub "
                        "cache folder models--org--name, or a config.json file)")


# files of a model folder beside config.json: listed by --format json, never read (no cost in them)
FOLDER_FILES = {"generation_config.json": "generation settings (sampling, lengths): no cost in them",
                "README.md": "the model card: not read"}


def read_config(source: str | os.PathLike, dtype: str | None = None) -> HFConfig:
    """The config at SOURCE (a config.json or a folder holding one), as an HFConfig."""
    path = config_file(source)
    data = read_json(path, HF_CONFIG)
    if not isinstance(data, dict):
        raise ImportProblem(f"{path}: expected a JSON object (a Hugging Face config.json)")
    return HFConfig(data, os.fspath(path), dtype=dtype, name=_spec_name(data, path))


def _spec_name(data: dict, path: Path) -> str:
    named = data.get("_name_or_path")
    if isinstance(named, str) and named.strip("/"):
        stem = named.strip("/").rsplit("/", 1)[-1]
    elif path.parent.parent.name == "snapshots" and path.parent.parent.parent.name.startswith("models--"):
        stem = path.parent.parent.parent.name.rsplit("--", 1)[-1]  # models--org--name/snapshots/<hash>
    elif path.name == "config.json" and path.parent.name not in ("", "."):
        stem = path.resolve().parent.name
    elif path.name != "config.json":
        stem = path.stem
    else:
        stem = str(data.get("model_type") or "imported")
    return _NAME_CHARS.sub("_", stem).strip("_") or "imported"


def supported() -> list[str]:
    return sorted(FAMILIES)


def pick_family(cfg: HFConfig) -> Family:
    """The family of the config's model_type, else of the first known class in `architectures`."""
    model_type = cfg.model_type
    if model_type:
        if model_type in FAMILIES:
            return FAMILIES[model_type]
        raise ImportProblem(f"{cfg.where('model_type')} = {model_type!r}: no importer for it (supported: "
                            f"{', '.join(supported())})")
    archs = cfg.get("architectures") or []
    for arch in archs if isinstance(archs, list) else []:
        for family in FAMILIES.values():
            if arch == family.hf_class or arch in family.architectures:
                return family
    raise ImportProblem(f"{cfg.path}: no model_type and no known class in architectures ({archs!r}); supported "
                        f"model types: {', '.join(supported())}")


def check_command(family: Family, spec: str, config: str, output: str | None = None, hf_class: str = "",
                  train: bool = True, sets: dict[str, str] | None = None) -> str:
    """The `costspec validate --against` command that checks an imported spec against its model (`hf_class`:
    the class it describes, when not the family's: its backbone); `train` False: the forward only (quantised
    weights are inference weights: transformers builds the dense model from the config, the same GEMMs)."""
    given = "".join(f" --config-set {k}={v}" for k, v in (family.hf_kwargs if sets is None else sets).items())
    field = f" --output-field {output}" if output else ""
    return (f"costspec validate {spec} --against hf:{hf_class or family.hf_class} --config {config}{given}{field} "
            f"--pass {'train' if train else 'forward'}")


def import_hf(source: str | os.PathLike, dtype: str | None = None, output: str | os.PathLike | None = None,
              backbone: bool = False, tower: str | None = None, pooler: bool = True) -> Imported:
    """The spec text for the config at SOURCE; `output` (the file it will be written to) only sets
    the schema reference and the check command printed in its header; `backbone`: a causal LM without
    its LM head (its `*Model` class); `tower`: the towers of a dual-tower model (vision, text, both; None:
    the family's default); `pooler` False: the spec ends before the model's pooler. The text is
    schema-checked here; the CLI also builds it (`costspec.model` is the facade above this package)."""
    cfg = read_config(source, dtype)
    cfg.backbone, cfg.tower, cfg.pooler = backbone, tower, pooler
    family = pick_family(cfg)
    for option, given in ((TOWER, tower is not None), (POOLER, not pooler)):
        if given and option not in family.options:
            raise UsageError(f"{option}: the {cfg.model_type or family.model_types[0]} importer does not take it "
                             f"(it writes {family.hf_class}; {option} is for dual-tower models and models with a "
                             "pooler: docs/import.md)")
    if tower is not None and tower not in family.towers:
        raise UsageError(f"--tower {tower}: the {cfg.model_type or family.model_types[0]} importer takes --tower "
                         f"{' | '.join(family.towers)} (docs/import.md)")
    lm = family.lm or head.inferred(family.hf_class)  # a family that does not declare its classes: by name
    if backbone and lm is None:
        raise UsageError(f"--backbone: the {cfg.model_type or family.model_types[0]} importer writes "
                         f"{family.hf_class}, which has no LM head to drop (--backbone is for causal LMs)")
    cfg.validate(family.keys)  # every numeric key the family reads: type, range, divisibility (the key named)
    weights = quantisation(cfg)  # read before the family checks that every key was understood
    text = family.build(cfg)
    field = family.hf_output(cfg) if family.hf_output is not None else None
    if not cfg.checked:
        raise RuntimeError(f"importer family {family.hf_class} never called check_understood")
    hf_class, sets = family.hf_class, None
    if family.variant is not None:
        variant = family.variant(cfg)
        hf_class, field, sets = variant.hf_class, variant.output, tuple(variant.sets.items())
    if lm is not None and hf_class in (lm.whole, lm.backbone):  # a variant may pick a class without the LM
        hf_class = lm.described(backbone)
        if lm.writes == "backbone" and not backbone:
            text = head.whole(text, lm, cfg)
        elif lm.writes == "whole" and backbone:
            text = head.backbone(text, lm)
    if weights is not None:
        text = quantised(text, weights)
    spec_name = os.fspath(output) if output is not None else f"{cfg.name}.yaml"
    schema = schema_ref(Path(output)) if output is not None else schema_path().as_uri()
    # every path in a comment has its control characters escaped: a newline would end the comment
    check = check_command(family, spec_name, cfg.path, field, hf_class, weights is None,
                          None if sets is None else dict(sets))
    header = [schema_line(schema),
              f"# Imported by `costspec import hf` from {for_terminal(cfg.path)} (model_type {cfg.model_type or '-'}).",
              f"# Check it against transformers' {hf_class} (built on meta, no weights):",
              f"#   {for_terminal(check)}",
              *rope.header(cfg.data), *_assumed_header(cfg)]
    lines = text.splitlines()
    text = "\n".join(header + lines[1:]) + "\n"
    try:
        parse_spec(text, spec_name)
    except CostspecError as exc:  # the importer wrote a spec that does not load: a bug, not bad input
        raise RuntimeError(f"the {family.hf_class} importer wrote a spec that does not load: {exc}") from None
    return Imported(text, family, cfg.path, field, hf_class, cfg, sets)


def _assumed_header(cfg: HFConfig) -> list[str]:
    """The header's lines for the keys the config does not set, read as transformers does: the class default."""
    assumed = cfg.assumed()
    if not assumed:
        return []
    return ["# Keys the config does not set, read as transformers does (the config class's default):",
            *(f"#   {key}: {for_terminal(said)}" for key, said in assumed.items())]


CHOSEN = ("B", "S")  # the batch and the sequence length: choices for a run (--set), whatever key gave a default
_DIM = re.compile(r"^  (\w+): \{value: (\S+?), doc: (.*?)\}(?:  # (.*))?$")
_PRECISION_LINE = re.compile(r"^precision: (\{.*?\})(?:  # (.*))?$")


def described(imported: Imported, check: str) -> dict:
    """What an import read and assumed (`import hf --format json`): the config's keys the family read, the
    ones it lacked and the defaults taken for them, the keys it ignored (why), the spec's dims (each with the
    config key it came from, or none: an assumption) and precision, the folder's other files, the check."""
    cfg = imported.config
    assert cfg is not None
    dims, assumed = {}, {}
    precision: dict[str, str] = {}
    for line in imported.text.splitlines():
        match = _DIM.match(line)
        if match:
            name, value, doc, key = match.groups()
            dims[name] = {"value": int(value) if value.isdigit() else value.strip('"'), "doc": doc.strip('"'),
                          "key": key}
            if key is None or name in CHOSEN:
                assumed[name] = f"{value} ({doc.strip(chr(34))})"
        match = _PRECISION_LINE.match(line)
        if match and not precision:
            precision = {"precision": match.group(1), "from": match.group(2) or ""}
            if not any(cfg.has(k) for k in ("torch_dtype", "dtype")) and cfg.dtype_source != "--dtype":
                assumed["dtype"] = f"{match.group(1)} ({match.group(2) or 'the config names no dtype'})"
    assumed.update(cfg.assumed())
    folder = Path(imported.config_path).parent
    return {"family": imported.family.model_types[0], "hf_class": imported.described, "config": imported.config_path,
            "read": cfg.read_keys(), "defaults": cfg.defaulted(), "ignored": cfg.ignored, "assumed": assumed,
            "dims": dims, **precision, "check": check,
            "folder": {name: why for name, why in FOLDER_FILES.items() if (folder / name).exists()}}


def write_import(imported: Imported, output: str | os.PathLike) -> None:
    """Write an imported spec to `output` (atomically; never over the config itself)."""
    write_text(output, imported.text, inputs=[imported.config_path])


__all__ = ["FAMILIES", "Family", "HFConfig", "ImportProblem", "Imported", "described", "import_hf", "read_config",
           "supported", "write_import"]
