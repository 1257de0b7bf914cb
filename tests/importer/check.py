"""Shared by the importer tests: import a transformers config and check the spec against the model."""
from __future__ import annotations

import json
from pathlib import Path

from costspec.against.check import summary, validate_against
from costspec.against.target import load_target
from costspec.importer import import_hf
from costspec.model import loads


def write_config(config, folder: Path, name: str = "config.json") -> Path:
    """`config` (a transformers config object or a dict) as a config.json file."""
    data = config if isinstance(config, dict) else config.to_dict()
    path = folder / name
    path.write_text(json.dumps(data, indent=1, default=str))
    return path


def import_and_check(config, folder: Path, passes=("forward", "train"), sets: dict | None = None, batch: int = 2,
                     dims: dict | None = None):
    """Import `config`, build the family's transformers class from the same file on meta, compare.

    At batch 2 by default: autograd's batch reductions of broadcast parameters run (at batch 1 they
    do not for a (1, S, C) table, which costspec's position_embedding counts: DeiT's, see docs/import.md).
    `dims`: dim values bound besides B (`--set`, e.g. a short S). Returns the spec's Model and
    {pass: AgainstResult}; asserts nothing (callers do)."""
    path = write_config(config, folder)
    return path_model(path), import_and_check_file(path, passes, sets, batch, dims)


def path_model(path: Path):
    return loads(import_hf(path).text, str(path.with_suffix(".yaml")))


def import_and_check_file(path: Path, passes=("forward", "train"), sets: dict | None = None, batch: int = 2,
                          dims: dict | None = None, backbone: bool = False):
    """`import_and_check` of a config.json file (`backbone`: a causal LM without its head): {pass: AgainstResult}."""
    imported = import_hf(path, backbone=backbone)
    model = loads(imported.text, str(path.with_suffix(".yaml")))
    values = model.bind(batch, dims)
    results = {}
    for pass_ in passes:
        real = load_target(f"hf:{imported.described}", model, values, "meta", str(path),
                           {**imported.family.hf_kwargs, **(sets or {})}, output=imported.output)
        results[pass_] = validate_against(model, values, real, pass_)
    return results


def assert_exact(results) -> dict[str, dict[str, int]]:
    """Every pass agrees (no failure), and matmul FLOPs and parameters are exactly equal; returns the
    totals per phase."""
    out = {}
    for pass_, result in results.items():
        assert result.ok, f"{pass_}:\n" + "\n".join(result.failures())
        for phase, totals in summary(result).items():
            assert totals["real_reconciled"] == totals["spec_matmul"], (pass_, phase, totals)
            assert totals["real_params"] == totals["spec_params"], (pass_, phase, totals)
            out[phase] = totals
        assert not result.rowmap.unmatched_real, result.rowmap.unmatched_real
    return out
