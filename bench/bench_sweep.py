"""A 10^6-point sweep of specs/vit_h.yaml with the vectorised sweep API (costspec.analysis.sweep: the
symbolic costs in exact integer form, evaluated with numpy in int64 where a bound proves no value can
wrap, Python integers elsewhere) vs evaluating the same points one by one through the API
(Model.evaluate, compiled), for a random sample of them, extrapolated to all 10^6 (said so in the
output). The sampled points are checked to agree exactly.

Grid: B = 1..100 x img = 14*(8..107) (patch 14) x L = 1..100 (depth): 100 x 100 x 100 points. The
sweep runs --repeat times; the median CPU time (and wall time) gives points per second.

    python bench/bench_sweep.py [--sample 200] [--pass forward] [--repeat 5]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from _common import ROOT, SPECS, fmt_s, machine

sys.path.insert(0, str(ROOT))

import costspec  # noqa: E402
from costspec.analysis.sweep import sweep  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=200, help="points evaluated one by one")
    parser.add_argument("--pass", dest="pass_", default="forward", choices=["forward", "backward", "train"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=5, help="sweeps timed (median)")
    args = parser.parse_args()

    model = costspec.load(SPECS / "vit_h.yaml")
    varies = [("B", list(range(1, 101))), ("img", [14 * k for k in range(8, 108)]), ("L", list(range(1, 101)))]
    cpu, wall = [], []
    for _ in range(args.repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        grid, values = sweep(model, varies, args.pass_)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    vectorised, vectorised_wall = statistics.median(cpu), statistics.median(wall)
    n = grid.size

    rng = random.Random(args.seed)
    picks = [rng.randrange(n) for _ in range(args.sample)]
    model.evaluate(args.pass_)  # the first evaluation compiles the model: not part of the per-point time
    columns = grid.columns  # the grid's points, materialised before the clock starts
    start = time.process_time()
    reports = [model.evaluate(args.pass_, **{name: int(columns[name][i]) for name in grid.names}) for i in picks]
    one_by_one = time.process_time() - start
    same = all((values["tc_flops"][i], values["cuda_flops"][i]) == (r.tc, r.cuda) for i, r in zip(picks, reports))
    per_point = one_by_one / len(picks)

    print(f"machine: {machine()}")
    print(f"vit_h_14 {args.pass_}: {n:,} points (B x img x L = 100 x 100 x 100); columns "
          f"{', '.join(values)}")
    print(f"  sweep API, vectorised:  {fmt_s(vectorised):>9} CPU = {n / vectorised:,.0f} points/s "
          f"(median of {args.repeat}; wall {fmt_s(vectorised_wall)} = {n / vectorised_wall:,.0f} points/s)")
    print(f"  Model.evaluate one by one: {fmt_s(per_point)} CPU per point = {1 / per_point:,.0f} points/s; "
          f"{n:,} points EXTRAPOLATED from a sample of {len(picks)}: {fmt_s(per_point * n)}")
    print(f"  sampled points agree exactly: {'yes' if same else 'NO'}")
    print(f"ratio: vectorised sweep is {per_point * n / vectorised:,.0f}x faster than one by one")


if __name__ == "__main__":
    main()
