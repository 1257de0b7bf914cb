"""Fit the roofline's efficiency factors on measured step times of one spec and test them on another.

Reads `costspec time --format json` files (tests/data/timing/h100/ holds the H100's), splits every
leaf's roofline time into its three terms at the datasheet peaks (Tensor-Core FLOPs / TC peak,
CUDA-core FLOPs / CUDA peak, bytes / bandwidth), and finds the efficiencies (tc, memory; CUDA cores
share the memory factor: their work here is pointwise and memory-bound) that minimise the squared
log error of the whole step's time on the fitting spec's runs. It then prints, for every run,
measured vs the roofline at the datasheet peaks and with the fitted factors.

    python tools/fit_efficiency.py --fit vit_b --test vit_l --min-batch 64
    python tools/fit_efficiency.py --format json          # the same numbers, for a test

Small batches are not fitted by default: there the measured step is the host's launches and the
timing harness's per-layer events and synchronisations, which no roofline term models (the note
says so).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATA = ROOT / "tests" / "data" / "timing" / "h100"
SPECS = {"vit_b_16": "specs/vit_b.yaml", "vit_l_16": "specs/vit_l.yaml", "vit_b": "specs/vit_b.yaml",
         "vit_l": "specs/vit_l.yaml"}
GRID = [round(0.05 * i, 2) for i in range(2, 21)]  # 0.10 .. 1.00


@dataclass
class Run:
    """One measured step and its leaves' roofline terms at the datasheet peaks (seconds)."""

    file: str
    spec: str
    pass_: str
    batch: int
    measured_s: float
    leaves: list[tuple[float, float, float]]  # (tc, cuda, memory) seconds per leaf instance group

    def predict(self, tc: float, memory: float) -> float:
        return sum(max(t / tc, c / memory, m / memory) for t, c, m in self.leaves)


def leaf_terms(spec: str, pass_: str, dims: dict, dtype: str, gpu_key: str) -> list[tuple[float, float, float]]:
    """Each leaf's (TC, CUDA, memory) roofline seconds at efficiency 1, the way analysis.roofline
    computes them (same walk, same bytes, same peaks)."""
    import sympy

    from costspec.analysis.gpus import POINTWISE_DTYPE, get_gpu
    from costspec.analysis.roofline import leaf_precision, tc_seconds, total_bytes
    from costspec.core.vocab import Fusion
    from costspec.model import load
    from costspec.tree.walk import walk

    model = load(ROOT / spec, dtype=dtype)
    batch = dims.get("B")
    values = model.bind(batch, {})  # the runs used the spec's other dims: checked here
    bound = {str(k): int(v) for k, v in values.items()}
    if any(bound.get(k) != v for k, v in dims.items()):
        raise SystemExit(f"{spec}: the run's dims {dims} are not the spec's at B={batch} ({bound})")
    report = model.report(pass_, values)
    gpu = get_gpu(gpu_key)
    terms = []
    for (node, _depth, mult, in_rg), row in zip(walk(model.root), report.rows):
        if node.children:
            continue
        nbytes = int(sympy.sympify(total_bytes(node, report.pass_, mult, in_rg, Fusion.DEFAULT)).xreplace(values))
        prec = leaf_precision(node)
        tc = tc_seconds(gpu, prec, row.tc_flops, row.get("sparse_tc_flops") or 0)
        cuda = row.cuda_flops / gpu.cuda_peak(POINTWISE_DTYPE if prec.tensor_cores else prec.dtype) \
            if row.cuda_flops else 0.0
        terms.append((tc, cuda, nbytes / gpu.bandwidth if nbytes else 0.0))
    return terms


def load_runs(folder: Path, gpu_key: str) -> list[Run]:
    runs = []
    for path in sorted(folder.glob("vit_*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        spec = SPECS[data["spec"]]
        leaves = leaf_terms(spec, data["pass"], data["dims"], data["dtype"], gpu_key)
        runs.append(Run(path.name, Path(spec).stem, data["pass"], data["dims"]["B"], data["step_s"], leaves))
    return runs


def fit(runs: list[Run]) -> tuple[float, float, float]:
    """(tc, memory, rms log error) minimising sum(log(predicted / measured)^2) over `runs`."""
    best = (1.0, 1.0, math.inf)
    for tc in GRID:
        for memory in GRID:
            err = math.sqrt(sum(math.log(r.predict(tc, memory) / r.measured_s) ** 2 for r in runs) / len(runs))
            if err < best[2]:
                best = (tc, memory, err)
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--gpu", default="h100-sxm")
    p.add_argument("--fit", default="vit_b")
    p.add_argument("--test", default="vit_l")
    p.add_argument("--min-batch", type=int, default=64, help="fit on runs with at least this batch")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(argv)
    runs = load_runs(args.data, args.gpu)
    fitted = [r for r in runs if r.spec == args.fit and r.batch >= args.min_batch]
    if not fitted:
        p.error(f"no {args.fit} run with batch >= {args.min_batch} in {args.data}")
    tc, memory, err = fit(fitted)
    rows = [{"file": r.file, "spec": r.spec, "pass": r.pass_, "batch": r.batch, "measured_s": r.measured_s,
             "roofline_s": r.predict(1.0, 1.0), "fitted_s": r.predict(tc, memory),
             "error": r.predict(tc, memory) / r.measured_s - 1, "role": "fit" if r in fitted else
             ("test" if r.spec == args.test and r.batch >= args.min_batch else "outside")} for r in runs]
    tested = [row for row in rows if row["role"] == "test"]
    result = {"gpu": args.gpu, "efficiency": {"tc": tc, "cuda": memory, "memory": memory}, "fit_rms_log_error": err,
              "test_max_abs_error": max((abs(r["error"]) for r in tested), default=None), "rows": rows}
    if args.format == "json":
        print(json.dumps(result, indent=2))
        return 0
    print(f"fitted on {args.fit} (batch >= {args.min_batch}): tc={tc:g} cuda=memory={memory:g} "
          f"(rms log error {err:.3f}); costspec eval ... --gpu {args.gpu} --efficiency tc={tc:g},cuda={memory:g},"
          f"memory={memory:g}")
    print(f"{'run':34} {'role':8} {'measured':>10} {'roofline':>10} {'fitted':>10} {'error':>8}")
    for row in rows:
        print(f"{row['file']:34} {row['role']:8} {row['measured_s'] * 1e3:9.2f}ms {row['roofline_s'] * 1e3:9.2f}ms "
              f"{row['fitted_s'] * 1e3:9.2f}ms {row['error']:+8.1%}")
    print("outside: batches below --min-batch, where the measured step is host launches and the timing "
          "harness's per-layer events, not GPU work a roofline models")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
