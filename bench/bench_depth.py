"""Cost of loading and evaluating a spec vs its depth: a ViT-B whose encoder is `repeat: L` with
L = 1, 12, 120, 1200. costspec costs a repeat as L x one body, never unrolled, so the time should
be flat. For contrast, in the same run: the same depth written out as L explicit blocks (what
unrolling would cost) and FlopCounterMode on the generated torch module on meta (which builds and
runs every layer; at the smaller depths only, --fcm-max).

    python bench/bench_depth.py [--runs 5] [--depths 1,12,120,1200] [--fcm-max 120]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from _common import ROOT, SPECS, fmt_s, machine, median_time, run_process

sys.path.insert(0, str(ROOT))

import costspec  # noqa: E402

BASE = (SPECS / "vit_b.yaml").read_text(encoding="utf-8")


def repeat_spec(depth: int) -> str:
    return BASE.replace("L: {value: 12,", f"L: {{value: {depth},")


def unrolled_spec(depth: int) -> str:
    """The same model with the encoder written as `depth` explicit block uses (no repeat)."""
    text = repeat_spec(depth)
    head, tail = text.split("  - repeat: L\n    name: blocks\n    body: encoder_block\n")
    blocks = "".join(f"  - block: encoder_block\n    name: b{i}\n" for i in range(depth))
    return head + blocks + tail


def load_and_eval(text: str) -> int:
    model = costspec.loads(text)
    return model.evaluate("train", B=8).total


def fcm(text: str) -> int:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model = costspec.loads(text)
    with torch.device("meta"):
        module, make_input = model.to_torch(B=8)
    with FlopCounterMode(display=False) as counter:
        module(make_input("meta"))
    return counter.get_total_flops()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--depths", default="1,12,120,1200")
    parser.add_argument("--fcm-max", type=int, default=120, help="largest depth to count with FlopCounterMode")
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]

    load_and_eval(repeat_spec(1))  # warm caches (schema validator, cost table) once, as a process would
    fcm(repeat_spec(1))  # and torch's import, outside the timings
    rows = []
    for depth in depths:
        rep, _ = median_time(lambda: load_and_eval(repeat_spec(depth)), args.runs)
        unrolled_runs = max(1, args.runs if depth <= 120 else 1)
        unr, _ = median_time(lambda: load_and_eval(unrolled_spec(depth)), unrolled_runs)
        same = load_and_eval(repeat_spec(depth)) == load_and_eval(unrolled_spec(depth)) if depth <= 120 else None
        counted = median_time(lambda: fcm(repeat_spec(depth)), 1)[0] if depth <= args.fcm_max else None
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(repeat_spec(depth))
        cli, _ = median_time(lambda: run_process([sys.executable, "-m", "costspec", "eval", f.name, "--batch", "8",
                                                  "--pass", "train"]), args.runs)
        Path(f.name).unlink()
        rows.append((depth, rep, cli, unr, counted, same))

    print(f"machine: {machine()}")
    print(f"ViT-B/16, train pass, B=8; load + evaluate in-process, median of {args.runs}")
    print(f"{'depth L':>8}  {'repeat: L':>10}  {'costspec eval (process)':>24}  {'L blocks written out':>21}  "
          f"{'FlopCounterMode (meta)':>23}")
    for depth, rep, cli, unr, counted, same in rows:
        check = "" if same is None else ("  (same totals)" if same else "  (TOTALS DIFFER)")
        print(f"{depth:>8}  {fmt_s(rep):>10}  {fmt_s(cli):>24}  {fmt_s(unr):>21}  "
              f"{fmt_s(counted) if counted else '-':>23}{check}")
    first, last = rows[0], rows[-1]
    print(f"ratio: repeat L={last[0]} / L={first[0]}: {last[1] / first[1]:.2f}x in-process, "
          f"{last[2] / first[2]:.2f}x whole process (flat = 1); written out: {last[3] / first[3]:.0f}x")


if __name__ == "__main__":
    main()
