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

from costspec.core.errors import CostspecError
from costspec.core.safeio import HF_CONFIG, read_json, write_text
from costspec.core.text import for_terminal
from costspec.importer.config import HFConfig, ImportProblem
from costspec.importer.families import FAMILIES, Family
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


def config_file(source: str | os.PathLike) -> Path:
    """SOURCE as a config file: the file itself, or DIR/config.json."""
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
        if not path.exists():
            raise ImportProblem(f"{source}: a directory without config.json (expected a Hugging Face model folder "
                                "or a config.json file)")
    return path


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


def check_command(family: Family, spec: str, config: str, output: str | None = None) -> str:
    """The `costspec validate --against` command that checks an imported spec against its model."""
    sets = "".join(f" --config-set {k}={v}" for k, v in family.hf_kwargs.items())
    field = f" --output-field {output}" if output else ""
    return f"costspec validate {spec} --against hf:{family.hf_class} --config {config}{sets}{field} --pass train"


def import_hf(source: str | os.PathLike, dtype: str | None = None, output: str | os.PathLike | None = None) -> Imported:
    """The spec text for the config at SOURCE; `output` (the file it will be written to) only sets
    the schema reference and the check command printed in its header. The text is schema-checked
    here; the CLI also builds it (`costspec.model` is the facade above this package)."""
    cfg = read_config(source, dtype)
    family = pick_family(cfg)
    cfg.validate(family.keys)  # every numeric key the family reads: type, range, divisibility (the key named)
    text = family.build(cfg)
    field = family.hf_output(cfg) if family.hf_output is not None else None
    if not cfg.checked:
        raise RuntimeError(f"importer family {family.hf_class} never called check_understood")
    spec_name = os.fspath(output) if output is not None else f"{cfg.name}.yaml"
    schema = schema_ref(Path(output)) if output is not None else schema_path().as_uri()
    # every path in a comment has its control characters escaped: a newline would end the comment
    header = [schema_line(schema),
              f"# Imported by `costspec import hf` from {for_terminal(cfg.path)} (model_type {cfg.model_type or '-'}).",
              f"# Check it against transformers' {family.hf_class} (built on meta, no weights):",
              f"#   {for_terminal(check_command(family, spec_name, cfg.path, field))}"]
    lines = text.splitlines()
    text = "\n".join(header + lines[1:]) + "\n"
    try:
        parse_spec(text, spec_name)
    except CostspecError as exc:  # the importer wrote a spec that does not load: a bug, not bad input
        raise RuntimeError(f"the {family.hf_class} importer wrote a spec that does not load: {exc}") from None
    return Imported(text, family, cfg.path, field)


def write_import(imported: Imported, output: str | os.PathLike) -> None:
    """Write an imported spec to `output` (atomically; never over the config itself)."""
    write_text(output, imported.text, inputs=[imported.config_path])


__all__ = ["FAMILIES", "Family", "HFConfig", "ImportProblem", "Imported", "import_hf", "read_config",
           "supported", "write_import"]
