"""A 10^6-point sweep of specs/vit_h.yaml with the vectorised sweep API (costspec.analysis.sweep: the
symbolic costs lambdified to numpy, exact int64) vs evaluating the same points one by one through
the API (Model.evaluate), for a random sample of them, extrapolated to all 10^6 (said so in the
output). The sampled points are checked to agree exactly.

Grid: B = 1..100 x img = 14*(8..107) (patch 14) x L = 1..100 (depth): 100 x 100 x 100 points.

    python bench/bench_sweep.py [--sample 200] [--pass forward]
"""
from __future__ import annotations

import argparse
import random
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
    args = parser.parse_args()

    model = costspec.load(SPECS / "vit_h.yaml")
    varies = [("B", list(range(1, 101))), ("img", [14 * k for k in range(8, 108)]), ("L", list(range(1, 101)))]
    start = time.perf_counter()
    grid, values = sweep(model, varies, args.pass_)
    vectorised = time.perf_counter() - start
    n = grid.size

    rng = random.Random(args.seed)
    picks = [rng.randrange(n) for _ in range(args.sample)]
    start = time.perf_counter()
    reports = [model.evaluate(args.pass_, **{name: int(grid.columns[name][i]) for name in grid.names}) for i in picks]
    one_by_one = time.perf_counter() - start
    same = all((values["tc_flops"][i], values["cuda_flops"][i]) == (r.tc, r.cuda) for i, r in zip(picks, reports))
    per_point = one_by_one / len(picks)

    print(f"machine: {machine()}")
    print(f"vit_h_14 {args.pass_}: {n:,} points (B x img x L = 100 x 100 x 100); columns "
          f"{', '.join(values)}")
    print(f"  sweep API, vectorised:  {fmt_s(vectorised):>9}  = {n / vectorised:,.0f} points/s")
    print(f"  Model.evaluate one by one: {fmt_s(per_point)} per point = {1 / per_point:,.0f} points/s; "
          f"{n:,} points EXTRAPOLATED from a sample of {len(picks)}: {fmt_s(per_point * n)}")
    print(f"  sampled points agree exactly: {'yes' if same else 'NO'}")
    print(f"ratio: vectorised sweep is {per_point * n / vectorised:,.0f}x faster than one by one")


if __name__ == "__main__":
    main()
