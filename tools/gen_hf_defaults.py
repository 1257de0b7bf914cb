"""Regenerate costspec/data/hf_defaults.json from the installed transformers: python tools/gen_hf_defaults.py

`costspec import hf` never imports transformers, yet reads a key a config.json omits as transformers does:
the config class's default. This tool writes those defaults down as data: for every model_type the
importer has a family for, and every sub-config type their classes nest (text_config, vision_config, ...),
the config class's name, the model_type of each nested config its default instance holds, and the defaults
of its own keys: the scalar and list defaults of the class's fields that a default instance keeps as given
(a field whose default is null, a dict, or that __init__ derives from other keys, such as
num_key_value_heads from num_attention_heads, has no class default here: the importer's family decides).
Generic keys are kept too: a family may read one (CLIP's text pooling reads eos_token_id).
tests/importer/test_hf_defaults.py regenerates the table in memory and compares it with the file.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any

TARGET = Path(__file__).resolve().parent.parent / "costspec" / "data" / "hf_defaults.json"


def _plain(value: Any) -> Any:
    """A JSON scalar or a list of them (tuples as lists), else None (not recorded)."""
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple) and all(_plain(v) is not None for v in value):
        return [_plain(v) for v in value]
    return None


def _declared(cls: type) -> dict[str, Any]:
    """The defaults the class declares: its dataclass fields', else its __init__ parameters'."""
    if dataclasses.is_dataclass(cls):
        out = {}
        for field in dataclasses.fields(cls):
            if field.default is not dataclasses.MISSING:
                out[field.name] = field.default
            elif field.default_factory is not dataclasses.MISSING:
                out[field.name] = field.default_factory()
        return out
    return {name: p.default for name, p in inspect.signature(cls.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _entry(cls: type) -> tuple[dict[str, Any], dict[str, str]]:
    from transformers import PreTrainedConfig

    instance = cls()
    kept = instance.to_dict()
    defaults = {}
    for name, declared in sorted(_declared(cls).items()):
        value = _plain(declared)
        if value is None or name.startswith("_"):
            continue
        if name in kept and json.loads(json.dumps(kept[name])) == value:  # kept as given: not derived
            defaults[name] = value
    subs = {}
    for key in sorted(getattr(cls, "sub_configs", {}) or {}):
        nested = getattr(instance, key, None)
        if isinstance(nested, PreTrainedConfig) and nested.model_type:
            subs[key] = nested.model_type
    return defaults, subs


def table() -> dict[str, Any]:
    """The defaults table (module docstring), for the model types of costspec's importer families."""
    import transformers
    from transformers import CONFIG_MAPPING

    from costspec.importer.families import FAMILIES

    todo, out = sorted(FAMILIES, reverse=True), {}
    while todo:
        model_type = todo.pop()
        if model_type in out or model_type not in CONFIG_MAPPING:
            continue
        cls = CONFIG_MAPPING[model_type]
        defaults, subs = _entry(cls)
        out[model_type] = {"class": cls.__name__, "sub_configs": subs, "defaults": defaults}
        todo.extend(sorted(set(subs.values()) - set(out), reverse=True))
    return {"transformers": transformers.__version__, "model_types": dict(sorted(out.items()))}


def render(data: dict[str, Any]) -> str:
    """The file's text: one model type a block, one key a line (readable diffs)."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    TARGET.write_text(render(table()), encoding="utf-8")
    print(f"wrote {TARGET}")
