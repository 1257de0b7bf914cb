"""Hypothesis strategies for the inputs added after the first hardening round: Hugging Face configs
(`import hf`) and the JSON files `report` reads (`--validation`, `--compare`).

Each draws `(text, valid)` as fuzz/inputgen.py's do. A config is a zoo config of tests/data/hf_configs,
or (when transformers is installed) the default config of every family the importer knows, with
one to three keys the family reads set to a hostile value (a whole-number key gets 10**30, 1e30,
2**31, 0, -1, an odd or indivisible number, a string, a list, an object, null, true; a dtype a list or
an object), or one of inputgen's generic data / text mutations. A report file is the JSON
`validate --format json` (saved in tests/data/report) / `ncu compare --format json` print for the toy spec,
mutated likewise.

`STRATEGIES` is every non-spec input kind: inputgen's and these.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from fuzz.inputgen import HOSTILE_VALUES, JSON_INSERTS, mutated_data, text_edits
from fuzz.inputgen import STRATEGIES as FILE_STRATEGIES

ROOT = Path(__file__).resolve().parent.parent
NUMBERS: tuple[Any, ...] = (10**30, 1e30, 2**31, 2**31 - 1, 0, -1, 1, 3, 7, 1000, 1.5, "abc", "12", [], [1], [10**30],
                            {"a": 1}, None, True, False, float("nan"))
DTYPES: tuple[Any, ...] = (["bfloat16"], {"name": "float16"}, "int4", "", 16, None, "float16")


@functools.cache
def base_configs(defaults: bool = True) -> tuple[dict, ...]:
    """The zoo's configs, then (with `defaults`, when transformers is there) each importer family's default."""
    configs = [json.loads(p.read_text()) for p in sorted((ROOT / "tests/data/hf_configs").glob("*.json"))]
    if not defaults:
        return tuple(configs)
    try:
        import transformers
    except ImportError:
        return tuple(configs)
    from costspec.importer import FAMILIES

    for model_type in sorted(FAMILIES):
        with contextlib.redirect_stderr(io.StringIO()):
            configs.append(json.loads(json.dumps(transformers.AutoConfig.for_model(model_type).to_dict(),
                                                 default=str)))
    return tuple(configs)


def _read_keys(config: dict) -> list[tuple]:
    """Paths of the keys a family may read: numbers, lists and dtypes, at the top and in *_config."""
    out: list[tuple] = []
    for key, value in config.items():
        if isinstance(value, dict) and key.endswith("config"):
            out += [(key, sub) for sub, v in value.items() if not isinstance(v, dict)]
        elif not isinstance(value, dict):
            out.append((key,))
    return out


@st.composite
def hf_config_texts(draw, defaults: bool = True) -> tuple[str | bytes, bool]:
    config = copy.deepcopy(draw(st.sampled_from(base_configs(defaults))))
    choice = draw(st.integers(0, 9))
    if choice < 2:
        return json.dumps(config), False  # a default config may be one the importer refuses (named), not valid
    if choice < 7:
        paths = _read_keys(config)
        for path in draw(st.lists(st.sampled_from(paths), min_size=1, max_size=3)) if paths else []:
            parent = config
            for part in path[:-1]:
                parent = parent[part]
            pool = DTYPES if path[-1] in ("dtype", "torch_dtype") else NUMBERS
            parent[path[-1]] = copy.deepcopy(draw(st.sampled_from(pool + HOSTILE_VALUES[:12])))
        return json.dumps(config), False
    if choice < 9:
        return json.dumps(draw(mutated_data(config)), default=str), False
    return draw(text_edits(json.dumps(config, indent=1), JSON_INSERTS)), False


@functools.cache
def _report_doc(kind: str) -> dict:
    """`costspec validate toy_mlp --format json` (saved in tests/data/report: it needs torch) or `ncu compare`'s."""
    from costspec.cli import main

    if kind == "validation":
        return json.loads((ROOT / "tests/data/report/toy_mlp_validation.json").read_text())
    toy = str(ROOT / "specs" / "toy_mlp.yaml")
    args = ["ncu", "compare", toy, str(ROOT / "tests/data/ncu/toy_forward.details.csv"), "--format", "json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        with contextlib.suppress(SystemExit):
            main(args)
    return json.loads(out.getvalue())


def _report_texts(kind: str) -> st.SearchStrategy:
    @st.composite
    def draw_one(draw) -> tuple[str | bytes, bool]:
        doc = _report_doc(kind)
        choice = draw(st.integers(0, 9))
        if choice < 2:
            return json.dumps(doc), True
        if choice < 8:
            return json.dumps(draw(mutated_data(doc)), default=str), False
        return draw(text_edits(json.dumps(doc, indent=1), JSON_INSERTS)), False

    return draw_one()


STRATEGIES = {**FILE_STRATEGIES, "hf": hf_config_texts, "validation": lambda: _report_texts("validation"),
              "compare": lambda: _report_texts("compare")}
