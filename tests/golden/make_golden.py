"""Record every command's numbers for every zoo spec, as the refactor's golden reference.

    python tests/golden/make_golden.py          # rewrites tests/golden/golden.json
    python tests/golden/make_golden.py --add    # records only the runs golden.json lacks (a new zoo spec)

Written (and first run) before the one-walk / one-table refactor; `tests/golden/test_golden.py` runs the
same commands and compares the numbers, whatever the output layout. Numbers are collected from
each command's JSON (or CSV / text) output into {row name: {quantity: value}} by `normalize`.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted(p.stem for p in (ROOT / "specs").glob("*.yaml"))
NCU = ROOT / "tests" / "data" / "ncu"
OUT = Path(__file__).with_name("golden.json")


def runs() -> dict[str, list[str]]:
    """name -> CLI arguments, for every command that prints numbers (no GPU needed)."""
    out: dict[str, list[str]] = {}
    for spec in SPECS:
        path = f"specs/{spec}.yaml"
        for pass_ in ("forward", "backward", "train"):
            out[f"eval:{spec}:{pass_}"] = ["eval", path, "--pass", pass_, "--format", "json",
                                           "--gpu", "h100-sxm"]
        out[f"formula:{spec}:train"] = ["formula", path, "--pass", "train", "--per-layer", "--format", "json"]
        out[f"latex:{spec}:forward"] = ["latex", path]
    for spec, batch in (("toy_mlp", []), ("vit_b", ["--batch", "1"]), ("gpt2_small", ["--batch", "1"])):
        out[f"validate:{spec}:train"] = ["validate", f"specs/{spec}.yaml", *batch, "--pass", "train",
                                         "--format", "json"]
    out["sweep:vit_b"] = ["sweep", "specs/vit_b.yaml", "--vary", "B=1..64:x2", "--vary", "img=224,384"]
    toy = ["specs/toy_mlp.yaml", str(NCU / "toy_forward.details.csv"), str(NCU / "toy_backward.details.csv")]
    out["ncu-compare:toy"] = ["ncu", "compare", *toy, "--format", "json"]
    out["torch:vit_b"] = ["torch", "specs/vit_b.yaml"]
    out["gpus"] = ["gpus"]
    return out


def run(args: list[str]) -> str:
    done = subprocess.run([sys.executable, "-m", "costspec", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"costspec {' '.join(args)}: exit {done.returncode}: {done.stderr}")
    return done.stdout


def _numbers(d: dict, skip=("depth", "count", "repeat")) -> dict:
    return {k: v for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in skip}


def _table_numbers(text: str, tail: int) -> list[list[str]]:
    """A fixed-width table's rows as [first cell, last `tail` cells] (numbers; '-' or '' for none), whatever
    the alignment: module paths with their parameter counts, GPU keys with their peaks."""
    out = []
    for line in text.splitlines()[1:]:
        tokens = line.split()
        if not tokens or set(tokens[0]) <= {"-"} or tokens[0].startswith("Peaks"):
            continue
        numbers = [t for t in tokens[1:] if t == "-" or t.replace(",", "").replace(".", "").isdigit()]
        cells = numbers[-tail:]
        if tail == 2 and len(cells) == 2 and cells[-1] == "-":
            cells = cells[:1]  # a module's own parameter count is shown only where it differs
        elif tail == 2 and len(cells) == 2 and not (tokens[-2].replace(",", "").isdigit()):
            cells = cells[-1:]
        out.append([tokens[0]] + cells)
    return out


def _phases(data: dict) -> dict[str, list[dict]]:
    """phase -> rows (the total last), from the layout before the refactor (`phases`) or after (`tables`)."""
    if "phases" in data:
        return data["phases"]
    return {phase: t["rows"] + [t["total"]] for phase, t in data["tables"].items()
            if phase != "saved for backward"}  # (validate's saved-bytes table, not a phase)


def normalize(name: str, text: str):
    """The numbers of one output, layout-free: {row: {quantity: value}} (or text for latex/torch/gpus)."""
    kind = name.split(":")[0]
    if kind == "latex":
        return text
    if kind in ("torch", "gpus"):
        return _table_numbers(text, 2 if kind == "torch" else 7)
    if kind == "sweep":
        return text.strip().splitlines()
    data = json.loads(text)
    if kind == "eval":
        rows = {r["name"]: {q: r.get(q) for q in ("tc_flops", "cuda_flops", "params", "bytes", "est_time_s")}
                for r in data["rows"]}
        rows["total"] = {"tc_flops": data["totals"]["tc_flops"], "cuda_flops": data["totals"]["cuda_flops"],
                         "params": data["totals"]["params"], "bytes": data["roofline"]["bytes"],
                         "est_time_s": data["roofline"]["est_time_s"]}
        return rows
    if kind == "formula":
        rows = {r["name"]: {q: r[q]["expr"] for q in ("tc", "cuda", "params")} for r in data["rows"]}
        rows["total"] = {q: data["totals"][q]["expr"] for q in data["totals"]}
        return rows
    if kind == "validate":
        return {f"{phase}:{r['name']}": {"analytic": r["matmul_analytic"], "measured": r["matmul_measured"],
                                         "reconciled": r["matmul_reconciled"], **{
                                             f"pw:{k}": v for k, v in r["pointwise_analytic"].items()}}
                for phase, rows in _phases(data).items() for r in rows}
    if kind == "ncu-compare":
        return {f"{phase}:{r['name']}": {q: r[q] for q in ("kernels", "tc_analytic", "tc_measured",
                                                             "cuda_analytic", "cuda_measured")}
                for phase, rows in _phases(data).items() for r in rows}
    raise ValueError(name)


def main(add: bool = False) -> None:
    """Record every run; with `add`, keep the recorded ones as they are and record only the missing runs."""
    golden = json.loads(OUT.read_text(encoding="utf-8")) if add else {}
    new = {name: normalize(name, run(args)) for name, args in runs().items() if name not in golden}
    OUT.write_text(json.dumps({**golden, **new}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(new)} runs recorded, {len(golden)} kept)")


if __name__ == "__main__":
    main(add="--add" in sys.argv[1:])
