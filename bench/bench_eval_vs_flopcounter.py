"""Whole-process `costspec eval specs/vit_h.yaml --batch 8` vs what a user would otherwise run: a
script that builds ViT-H (costspec's generated torch module) on the meta device and counts it with
torch's FlopCounterMode. Both are fresh Python processes, timed end to end (interpreter start,
imports, work, output), median of --runs each, interleaved. Target: costspec >= 4x faster.

    python bench/bench_eval_vs_flopcounter.py [--runs 7] [--spec specs/vit_h.yaml] [--batch 8]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from _common import ROOT, fmt_s, machine, run_process

COUNTER = """
import sys, torch
from torch.utils.flop_counter import FlopCounterMode
import costspec
model = costspec.load(sys.argv[1])
with torch.device("meta"):
    module, make_input = model.to_torch(B=int(sys.argv[2]))
with FlopCounterMode(display=False) as counter:
    module(make_input("meta"))
print(counter.get_total_flops())
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--spec", default="specs/vit_h.yaml")
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()

    eval_cmd = [sys.executable, "-m", "costspec", "eval", args.spec, "--batch", str(args.batch)]
    json_cmd = eval_cmd + ["--format", "json"]
    fcm_cmd = [sys.executable, "-c", COUNTER, args.spec, str(args.batch)]

    # the same number from both (forward matmul-class FLOPs: all on Tensor Cores in bf16)
    analytic = json.loads(run_process(json_cmd).stdout)["totals"]["tc_flops"]
    measured = int(run_process(fcm_cmd).stdout.split()[-1])

    times = {"costspec": [], "fcm": []}
    for _ in range(args.runs):  # interleaved, so both see the same machine load
        for key, cmd in (("costspec", eval_cmd), ("fcm", fcm_cmd)):
            start = time.perf_counter()
            run_process(cmd)
            times[key].append(time.perf_counter() - start)
    cs, fcm = statistics.median(times["costspec"]), statistics.median(times["fcm"])

    print(f"machine: {machine()}")
    print(f"{args.spec} --batch {args.batch}, {args.runs} runs each, whole process, median (min-max)")
    print(f"  costspec eval                      {fmt_s(cs):>9}  ({fmt_s(min(times['costspec']))}-"
          f"{fmt_s(max(times['costspec']))})")
    print(f"  torch module on meta + FlopCounter {fmt_s(fcm):>9}  ({fmt_s(min(times['fcm']))}-"
          f"{fmt_s(max(times['fcm']))})")
    print(f"  same FLOPs: costspec TC {analytic:,} | FlopCounterMode {measured:,} | "
          f"{'equal' if analytic == measured else 'DIFFERENT'}")
    print(f"ratio: costspec eval is {fcm / cs:.1f}x faster (target >= 4x)")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
