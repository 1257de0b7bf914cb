"""Inputs of `ncu compare` / `ncu calibrate`: the spec, the CSVs and their JSON sidecars.

`costspec ncu run -o OUT.csv` writes ``OUT.json`` next to the CSV (the ``.csv`` suffix replaced).
It records the GPU, compute capability, ncu and torch versions, the command, the spec, the dims
it bound (``bind``: ``--batch``/``--set``), all dim values (``dims``), the pass and the dtype.
When a sidecar is there, compare/calibrate take the dims and the pass from it; command-line
flags override it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from costspec.core.dims import CLI_WORDS
from costspec.core.errors import CostspecError, UsageError
from costspec.core.safeio import SIDECAR, read_json, write_text
from costspec.ncu.attribute import Attribution, attribute
from costspec.ncu.parse import parse_csv

if TYPE_CHECKING:
    from costspec.tree.network import Network

SIDECAR_VERSION = 1


def sidecar_path(csv_path: str | Path) -> Path:
    """``run.ncu.csv`` -> ``run.ncu.json`` (any other name: the name + ``.json``)."""
    path = Path(csv_path)
    return path.with_suffix(".json") if path.suffix.lower() == ".csv" else path.with_name(path.name + ".json")


def read_sidecar(csv_path: str | Path) -> dict | None:
    """The sidecar of a CSV, or None when there is none; read with the bounds of every input
    (`costspec.core.safeio`: a regular file of at most 1 MB, JSON nested at most 32 levels, bounded
    numbers) and checked: `bind` and `dims` map names to positive integers, `pass` and `dtype`
    are strings."""
    path = sidecar_path(csv_path)
    if not path.exists():
        return None
    data = read_json(path, SIDECAR)
    if not isinstance(data, dict):
        raise CostspecError(f"{path}: the ncu sidecar is not a JSON object")
    for key in ("bind", "dims"):
        value = data.get(key)
        if value is not None and not (isinstance(value, dict) and all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value.values())):
            raise CostspecError(f"{path}: sidecar key '{key}' must map dim names to positive integers, "
                                f"got {json.dumps(value)[:60]}")
    if data.get("pass") is not None and data["pass"] not in ("forward", "backward", "train"):
        raise CostspecError(f"{path}: sidecar key 'pass' is {json.dumps(data['pass'])[:60]} "
                            "(expected forward, backward or train)")
    for key in ("dtype", "spec"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise CostspecError(f"{path}: sidecar key '{key}' must be a string, got {json.dumps(data[key])[:60]}")
    return data


def write_sidecar(csv_path: str | Path, data: Mapping, inputs: Sequence[str | Path] = ()) -> Path:
    """Write the sidecar atomically (`costspec.core.safeio.write_text`); `inputs` may not be overwritten."""
    path = sidecar_path(csv_path)
    write_text(path, json.dumps({"costspec_ncu_sidecar": SIDECAR_VERSION, **data}, indent=2) + "\n", inputs)
    return path


@dataclass
class Measured:
    """A spec bound to dims, and the attributed kernels of its CSVs."""

    model: Network
    values: dict
    pass_: str  # forward | backward | train: the phases present
    attribution: Attribution
    sidecars: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _merge_bindings(sidecars: Sequence[dict | None], batch: int | None, sets: Mapping[str, int]) -> dict[str, int]:
    bind: dict[str, int] = {}
    for sidecar in sidecars:
        for name, value in ((sidecar or {}).get("bind") or {}).items():
            if name in bind and bind[name] != value:
                raise UsageError(f"the sidecars disagree on dim {name} ({bind[name]} vs {value}); "
                                 f"pass --set {name}=...")
            bind[name] = int(value)
    bind.update(sets or {})
    if batch is not None:
        bind["B"] = batch
    return bind


def load_measured(model: Network, csvs: Sequence[str], batch: int | None = None,
                  sets: Mapping[str, int] | None = None, pass_: str | None = None) -> Measured:
    """Parse every CSV of a loaded spec's run, read their sidecars, bind dims and attribute the kernels.

    `pass_` (a flag) overrides each sidecar's pass; without both, a CSV is taken as forward.
    """
    if not csvs:
        raise UsageError("give at least one ncu CSV")
    sidecars = [read_sidecar(c) for c in csvs]
    bind = _merge_bindings(sidecars, batch, sets or {})
    batch_value = bind.pop("B", None) if "B" in model.dims.dims else None
    values = model.bind(batch_value, bind, CLI_WORDS)  # the flags --batch / --set (and the sidecars' dims)
    bound = {str(k): int(v) for k, v in values.items()}
    for csv_path, sidecar in zip(csvs, sidecars):
        profiled = (sidecar or {}).get("dims") or {}
        differ = [f"{k}={v} (here {bound[k]})" for k, v in profiled.items() if k in bound and int(v) != bound[k]]
        if differ:
            raise UsageError(f"{csv_path} was profiled at {', '.join(differ)}: counters measured at other dims "
                             "cannot be compared; bind the dims it was profiled at (or drop --set)")
    sources, passes, notes = [], [], []
    for csv_path, sidecar in zip(csvs, sidecars):
        this_pass = pass_ or (sidecar or {}).get("pass") or "forward"
        if sidecar is None and pass_ is None:
            notes.append(f"{csv_path}: no sidecar ({sidecar_path(csv_path).name}) and no --pass: read as forward")
        if sidecar and sidecar.get("dtype") and sidecar["dtype"] != str(model.precision):
            notes.append(f"{csv_path}: profiled in {sidecar['dtype']}, the spec's analytic routing uses "
                         f"{model.precision}")
        records = parse_csv(csv_path)
        if not records:
            raise UsageError(f"{csv_path}: no kernel launch in this ncu CSV (a header and no rows): nothing was "
                             "measured (expected the CSV of a profiled step, as `costspec ncu run` writes)")
        sources.append((str(csv_path), records, this_pass))
        passes.append(this_pass)
    attribution = attribute(sources, model)
    phases = attribution.phases
    for phase in phases:
        if not attribution.of(phase):
            raise UsageError(f"no kernel of {', '.join(map(str, csvs))} is in the {phase} phase: nothing was measured "
                             f"for it (expected kernels in a costspec:{phase} range, or --pass naming the phases the "
                             "CSV holds)")
    overall = "train" if phases == ("forward", "backward") else phases[0]
    return Measured(model, values, overall, attribution, [s for s in sidecars if s], notes + attribution.notes)
