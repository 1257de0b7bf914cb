"""CPU time of a whole `costspec eval vit_b --batch 8` process (warm compiled-spec cache, cold cache, and
--no-cache) against, in the same run: the interpreter alone (`python -c pass`), `python -c "import torch"`,
and the route without costspec: build transformers' ViTModel (ViT-B/16) on the meta device and count
its forward at batch 8 with torch's FlopCounterMode.

Each command runs --runs times, interleaved (every round runs each command once, so all see the same
machine load); the CPU time of a run is the child's user + system time (`resource.getrusage`), the
median over the rounds is reported, with the wall time beside it. A cold run gets an empty cache
folder; a warm run one that a first run filled. The children run as an installed package does, with
Python's bytecode cache (PYTHONDONTWRITEBYTECODE is dropped from their environment, and one unmeasured
round of the eval commands writes costspec's .pyc files first): torch, transformers and click come
with theirs, and timing costspec compiling its own sources on every run would compare unlike things.

    python bench/bench_startup.py [--runs 5] [--spec vit_b] [--batch 8]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from _common import ROOT, fmt_s, machine

HF_VIT = """
import sys, torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import ViTConfig, ViTModel
config = ViTConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                   image_size=224, patch_size=16)
with torch.device("meta"):
    model = ViTModel(config, add_pooling_layer=False)
with FlopCounterMode(display=False) as counter:
    model(torch.empty(int(sys.argv[1]), 3, 224, 224, device="meta"))
print(counter.get_total_flops())
"""


def run(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, stdout) of one child process; exits loudly if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--spec", default="vit_b")
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()

    base = {**os.environ, "PYTHONPATH": str(ROOT)}
    base.pop("COSTSPEC_NO_CACHE", None)
    bytecode = "PYTHONDONTWRITEBYTECODE" not in base
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    warm_dir = tempfile.mkdtemp(prefix="costspec-bench-warm-")
    eval_cmd = [sys.executable, "-m", "costspec", "eval", args.spec, "--batch", str(args.batch)]
    run(eval_cmd, {**base, "COSTSPEC_CACHE_DIR": warm_dir})  # fills the warm cache (and writes the .pyc files)
    run(eval_cmd + ["--no-cache"], {**base, "COSTSPEC_CACHE_DIR": warm_dir})  # the cold path's .pyc files
    commands = {
        "python -c pass": ([sys.executable, "-c", "pass"], None),
        "eval, warm cache": (eval_cmd, warm_dir),
        "eval, cold cache": (eval_cmd, "fresh"),
        "eval --no-cache": (eval_cmd + ["--no-cache"], warm_dir),
        'python -c "import torch"': ([sys.executable, "-c", "import torch"], None),
        "HF ViTModel on meta + FlopCounterMode": ([sys.executable, "-c", HF_VIT, str(args.batch)], None),
    }
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    wall: dict[str, list[float]] = {name: [] for name in commands}
    outputs: dict[str, str] = {}
    for _ in range(args.runs):
        for name, (command, folder) in commands.items():
            env = dict(base)
            if folder is not None:
                env["COSTSPEC_CACHE_DIR"] = tempfile.mkdtemp(prefix="costspec-bench-cold-") if folder == "fresh" \
                    else folder
            c, w, out = run(command, env)
            cpu[name].append(c)
            wall[name].append(w)
            outputs[name] = out
    med = {name: statistics.median(v) for name, v in cpu.items()}

    same = outputs["eval, warm cache"] == outputs["eval, cold cache"] == outputs["eval --no-cache"]
    tc = json.loads(subprocess.run(eval_cmd + ["--format", "json"], cwd=ROOT, capture_output=True, text=True,
                                   env={**base, "COSTSPEC_CACHE_DIR": warm_dir}).stdout)["totals"]["tc_flops"]
    hf = int(outputs["HF ViTModel on meta + FlopCounterMode"].split()[-1])
    load = os.getloadavg()
    print(f"machine: {machine()}; load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
          f"(1 / 5 / 15 min)")
    print(f"{args.spec} --batch {args.batch}: {args.runs} interleaved rounds; CPU = user + system of the child, "
          "median (min-max); wall median; children with Python's bytecode cache"
          f"{'' if bytecode else ' (this shell sets PYTHONDONTWRITEBYTECODE: dropped for them)'}")
    for name in commands:
        print(f"  {name:40s} CPU {fmt_s(med[name]):>9}  ({fmt_s(min(cpu[name]))}-{fmt_s(max(cpu[name]))})  "
              f"wall {fmt_s(statistics.median(wall[name])):>9}")
    print(f"  outputs of warm, cold and --no-cache eval identical: {'yes' if same else 'NO'}; costspec TC FLOPs "
          f"{tc:,}, FlopCounterMode on ViTModel {hf:,} ({'equal' if tc == hf else 'different'})")
    interpreter, torch, hf_route = (med["python -c pass"], med['python -c "import torch"'],
                                    med["HF ViTModel on meta + FlopCounterMode"])
    print("ratios of CPU time (medians, same run):")
    for name in ("eval, warm cache", "eval, cold cache", "eval --no-cache"):
        print(f"  {name:18s} = {med[name] / interpreter:.2f}x python -c pass, 1/{torch / med[name]:.1f} of import "
              f"torch, 1/{hf_route / med[name]:.1f} of the HF + FlopCounterMode route")
    target = torch / 6
    print(f"acceptance: warm eval {fmt_s(med['eval, warm cache'])} <= import torch / 6 = {fmt_s(target)}: "
          f"{'yes' if med['eval, warm cache'] <= target else 'NO'}")


if __name__ == "__main__":
    main()
