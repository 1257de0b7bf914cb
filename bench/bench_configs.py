"""In-process evaluation of 10,000 ViT-B configurations (batch x image size x width) through the
API, vs FlopCounterMode on the generated torch module on meta for the same configurations.

costspec: every configuration through `Model.bind` + `Model.report` (per-layer rows and totals,
what `eval` prints), and the whole grid at once through the vectorised sweep API. FlopCounterMode
needs a module built and run per configuration, too slow for 10,000 here: a random sample of
--sample configurations is counted and the time extrapolated to all of them (said so in the
output). The sampled configurations are checked to give the same matmul FLOPs both ways.

    python bench/bench_configs.py [--sample 20] [--one-by-one 10000]
"""
from __future__ import annotations

import argparse
import random
import sys
import time

from _common import ROOT, SPECS, fmt_s, machine

sys.path.insert(0, str(ROOT))

import costspec  # noqa: E402
from costspec.analysis.sweep import points, sweep  # noqa: E402

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]  # 10
IMAGES = [160 + 32 * i for i in range(10)]  # 160..448, multiples of the patch (16)
WIDTHS = [96 * k for k in range(1, 101)]  # 96..9600, multiples of heads (12)


def fcm_forward(model, config) -> int:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        module, make_input = model.to_torch(**config)
    with FlopCounterMode(display=False) as counter:
        module(make_input("meta"))
    return counter.get_total_flops()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=20, help="configurations counted with FlopCounterMode")
    parser.add_argument("--one-by-one", type=int, default=10_000, help="configurations through bind + report")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    model = costspec.load(SPECS / "vit_b.yaml")
    varies = [("B", BATCHES), ("img", IMAGES), ("C", WIDTHS)]
    grid_points = [dict(zip(("B", "img", "C"), (b, i, c))) for b in BATCHES for i in IMAGES for c in WIDTHS]
    n = len(grid_points)

    # 1. one by one: bind + report (rows and totals), as `eval` computes them
    subset = grid_points[: args.one_by_one]
    start = time.perf_counter()
    reports = [model.report("forward", model.bind(sets=p)) for p in subset]
    one_by_one = time.perf_counter() - start
    one_by_one_all = one_by_one * n / len(subset)

    # 2. the whole grid at once (vectorised, exact int64)
    start = time.perf_counter()
    grid, values = sweep(model, varies, "forward")
    vectorised = time.perf_counter() - start
    index = {tuple(p.values()): i for i, p in enumerate(points(grid))}
    assert all(values["tc_flops"][index[(p["B"], p["img"], p["C"])]] == r.tc for p, r in zip(subset, reports))

    # 3. FlopCounterMode on meta: a sample, extrapolated
    fcm_forward(model, {"B": 1})  # torch's import, outside the timing
    sample = random.Random(args.seed).sample(grid_points, args.sample)
    start = time.perf_counter()
    counted = [fcm_forward(model, p) for p in sample]
    fcm_sample = time.perf_counter() - start
    fcm_all = fcm_sample * n / len(sample)
    same = all(c == values["tc_flops"][index[(p["B"], p["img"], p["C"])]] for p, c in zip(sample, counted))

    print(f"machine: {machine()}")
    print(f"ViT-B/16 forward, {n:,} configurations: B x img x C = {len(BATCHES)} x {len(IMAGES)} x {len(WIDTHS)}")
    print(f"  costspec bind + report, one by one   {fmt_s(one_by_one_all):>9}  "
          f"({fmt_s(one_by_one_all / n)} each{'' if len(subset) == n else f', {len(subset):,} run, extrapolated'})")
    print(f"  costspec sweep API, vectorised       {fmt_s(vectorised):>9}  ({fmt_s(vectorised / n)} each)")
    print(f"  FlopCounterMode on meta              {fmt_s(fcm_all):>9}  ({fmt_s(fcm_sample / len(sample))} each; "
          f"EXTRAPOLATED from a random sample of {len(sample)})")
    print(f"  sampled configurations: FlopCounterMode == costspec TC FLOPs: {'yes' if same else 'NO'}")
    print(f"ratio: FlopCounterMode / costspec one by one = {fcm_all / one_by_one_all:.0f}x; "
          f"/ costspec vectorised = {fcm_all / vectorised:,.0f}x")


if __name__ == "__main__":
    main()
