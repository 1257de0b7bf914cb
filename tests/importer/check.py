"""Shared by the importer tests: import a transformers config and check the spec against the model."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from costspec.against.check import summary, validate_against
from costspec.against.target import load_target
from costspec.cli import main
from costspec.core.errors import CostspecError
from costspec.importer import import_hf
from costspec.importer.config import GENERIC_KEYS, GENERIC_PATTERN, ImportProblem
from costspec.model import loads

# Values no config key should hold: each key of a config gets some of them in turn (`hostile_sweep`)
# a vision config's keys no importer reads as a shape (the hostile sweeps leave them alone)
BOOKKEEPING = ("id2label", "label2id", "transformers_version", "architectures")
HOSTILE = (10**30, 2**40, 1e30, -1, 0, True, 1.5, "abc", "", None, [], [1], [10**30], {"a": 1}, "\n")


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
                          dims: dict | None = None, backbone: bool = False, tower: str | None = None):
    """`import_and_check` of a config.json file (`backbone`: a causal LM without its head; `tower`: --tower):
    {pass: AgainstResult}."""
    imported = import_hf(path, backbone=backbone, tower=tower)
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


def read_keys(base: dict) -> list[str]:
    """The keys of `base` an importer reads: not the generic bookkeeping ones (ids, eps, dropouts)."""
    return [k for k in base if k not in GENERIC_KEYS and not GENERIC_PATTERN.fullmatch(k)]


def hostile_sweep(base: dict, folder: Path, keys=None, per_key: int = 1, offset: int = 0) -> tuple[int, int]:
    """Each key of `keys` (all of `base`'s by default) given `per_key` values of HOSTILE in turn (the
    number-th key HOSTILE[number + offset], then + 3, ...), the rest of `base` kept: the import writes a spec
    that loads, or is a CostspecError naming the config file; never another exception. Returns
    (refused, tried); callers assert how many refusals they expect."""
    keys = list(base) if keys is None else list(keys)
    refused = tried = 0
    for number, key in enumerate(keys):
        for turn in range(per_key):
            path = write_config({**base, key: HOSTILE[(number + offset + 3 * turn) % len(HOSTILE)]}, folder)
            tried += 1
            try:
                loads(import_hf(path).text)
            except CostspecError as exc:
                assert str(path) in str(exc), (key, exc)
                refused += 1
    return refused, tried


def assert_refused(folder: Path, capsys, data: dict, message: str, key: str | None = None) -> None:
    """`data` as a config.json is refused: import_hf raises an ImportProblem saying `message`, and
    `costspec import hf` exits 2 with `message`, the file and `key` (when given) in stderr."""
    path = write_config(data, folder)
    with pytest.raises(ImportProblem, match=re.escape(message)):
        import_hf(path)
    with pytest.raises(SystemExit) as exc:
        main(["import", "hf", str(path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and str(path) in err, err
    assert key is None or key in err, err
