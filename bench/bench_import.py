"""Import time of the `costspec eval` path (no torch), measured with `python -X importtime`.

The eval path is what `costspec eval` imports before it runs: the CLI group with its commands
registered, the model (spec loading, schema, expressions, tree, ops) and the report renderer.
Prints the total, the top-level packages by cumulative time, the slowest single modules, and
checks that torch was not imported. For scale, in the same run: `python -c pass` (the
interpreter alone) and `import torch` (what the eval path avoids).

    python bench/bench_import.py [--runs 5] [--top 12]
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys

from _common import ROOT, fmt_s, machine

EVAL_PATH = ("import sys; import costspec.cli as cli; cli.register_all(); import costspec.model, costspec.export.report; "
             "assert 'torch' not in sys.modules, 'torch was imported'")
LINE = re.compile(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)")


def importtime(code: str) -> list[tuple[int, int, int, str]]:
    """(self us, cumulative us, nesting level, module) for every import of `code`."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(out.stderr)
    rows = []
    for line in out.stderr.splitlines():
        m = LINE.match(line)
        if m:
            rows.append((int(m[1]), int(m[2]), (len(m[3]) - 1) // 2, m[4]))
    return rows


def total_s(rows) -> float:
    return sum(r[0] for r in rows) / 1e6


def wall(code: str, runs: int) -> float:
    import time

    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()

    runs = [importtime(EVAL_PATH) for _ in range(args.runs)]
    rows = sorted(runs, key=total_s)[len(runs) // 2]  # the median run
    baseline = statistics.median(total_s(importtime("pass")) for _ in range(args.runs))
    torch_rows = importtime("import torch")
    wall_eval, wall_pass = wall(EVAL_PATH, args.runs), wall("pass", args.runs)

    packages: dict[str, int] = {}  # time spent in each package's own modules (self times summed)
    for self_us, cum, level, name in rows:
        top = name.split(".")[0]
        packages[top] = packages.get(top, 0) + self_us
    print(f"machine: {machine()}")
    print(f"eval path: {EVAL_PATH.split('; assert')[0]}")
    print(f"  imports (python -X importtime, median of {args.runs}): {fmt_s(total_s(rows))} in {len(rows)} modules; "
          f"torch imported: {'yes' if any(r[3] == 'torch' for r in rows) else 'no'}")
    print(f"  interpreter alone (python -c pass): imports {fmt_s(baseline)}, wall {fmt_s(wall_pass)}; "
          f"eval path wall {fmt_s(wall_eval)}")
    print(f"  for scale, import torch: {fmt_s(total_s(torch_rows))}")
    print("  packages by import time of their own modules (self times summed):")
    for name, cum in sorted(packages.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"    {name:24s} {fmt_s(cum / 1e6):>9}")
    print("  slowest single modules (self time):")
    for self_us, cum, level, name in sorted(rows, key=lambda r: -r[0])[: args.top]:
        print(f"    {name:40s} {fmt_s(self_us / 1e6):>9}")
    print(f"ratio: import torch / eval-path imports = {total_s(torch_rows) / total_s(rows):.1f}x")


if __name__ == "__main__":
    main()
