"""Long fuzz run of costspec: valid specs, mutated specs and repeat-k cases, with every property
of fuzz/properties.py checked on each, and a count of what happened.

    python fuzz/run_fuzz.py --examples 5000            # about 40 % valid, 45 % mutated, 15 % repeat
    python fuzz/run_fuzz.py --examples 500 --mode valid --meta-every 1 --out /tmp/fuzz-failures
    python fuzz/run_fuzz.py --examples 10000 --mode inputs   # catalogs, calibrations, ncu CSVs, sidecars
    python fuzz/run_fuzz.py --examples 1000 --mode csv       # one input kind
    python fuzz/run_fuzz.py --examples 10000 --mode surfaces # HF configs, ncu CSVs, report --validation / --compare
    python fuzz/run_fuzz.py --examples 500 --mode flow       # a dataflow construct in every spec

Unlike the bounded CI tests (tests/fuzz/test_specs.py), a failing example does not stop the run: it is
recorded, grouped by its first line, and the shortest spec of each group is printed at the end
(and written under --out). Failures that match a known, reported bug are counted by the bug's
id. Each example runs under a time limit (--timeout); one that exceeds it is a failure (a hang).
Exit status: 0 when nothing unexpected failed, 1 otherwise.
"""
from __future__ import annotations

import argparse
import collections
import signal
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fuzz.input_properties import check_input  # noqa: E402
from fuzz.properties import check_repeat, check_spec  # noqa: E402
from fuzz.specgen import FLOWS, dump, flow_specs, mutated_specs, repeat_cases, unknown_ops, valid_specs  # noqa: E402
from fuzz.surfacegen import STRATEGIES as INPUT_STRATEGIES  # noqa: E402

MODES = {"valid": 0.40, "mutated": 0.45, "repeat": 0.15}
INPUT_MODES = {kind: 1 / len(INPUT_STRATEGIES) for kind in INPUT_STRATEGIES}  # --mode inputs: every non-spec kind
SURFACES = ("hf", "csv", "validation", "compare")  # --mode surfaces: the inputs added since the first round


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


class Tally:
    def __init__(self):
        self.counts = collections.Counter()
        self.failures: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
        self.slowest = (0.0, "")

    def fail(self, mode: str, exc: BaseException, text) -> None:
        message = str(exc).split("--- spec ---")[0].strip()
        first = message.splitlines()[0][:110] if message else ""
        key = f"{mode}: {type(exc).__name__}: {first}"
        shown = text if isinstance(text, str) else text.decode("utf-8", "replace")
        self.failures[key].append((message, shown))
        self.counts["failed"] += 1


def run(mode: str, examples: int, tally: Tally, meta_every: int, timeout: float, rng_seed: int) -> None:
    if examples <= 0:
        return
    if mode in INPUT_STRATEGIES:
        run_inputs(mode, examples, tally, timeout, rng_seed)
        return
    strategy = {"valid": valid_specs().map(dump), "mutated": mutated_specs(), "repeat": repeat_cases(),
                "flow": st.sampled_from(sorted(FLOWS)).flatmap(flow_specs).map(dump)}[mode]
    index = collections.Counter()

    @seed(rng_seed)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def one(example):
        index[mode] += 1
        tally.counts[f"{mode} examples"] += 1
        meta = meta_every > 0 and index[mode] % meta_every == 0
        text = example if mode != "repeat" else dump(example.k_times)
        start = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            outcome = check_repeat(example, meta) if mode == "repeat" else check_spec(example, meta=meta)
            tally.counts["accepted" if outcome.accepted else "rejected"] += 1
            tally.counts["validated on meta"] += int(outcome.validated)
            for bug in outcome.known:
                tally.counts[f"known bug: {bug}"] += 1
            if mode != "mutated" and not outcome.accepted and not outcome.known:
                raise AssertionError(f"a valid spec was rejected: {outcome.error}")
        except Timeout:
            tally.fail(mode, TimeoutError(f"example took more than {timeout:g} s"), text)
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            tally.fail(mode, exc, text)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        took = time.perf_counter() - start
        if took > tally.slowest[0]:
            tally.slowest = (took, text if isinstance(text, str) else repr(text[:200]))

    one()


def run_inputs(kind: str, examples: int, tally: Tally, timeout: float, rng_seed: int) -> None:
    """Fuzz one non-spec input kind (fuzz/inputgen.py, fuzz/input_properties.py)."""

    @seed(rng_seed)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(INPUT_STRATEGIES[kind]())
    def one(example):
        text, valid = example
        tally.counts[f"{kind} examples"] += 1
        start = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            outcome = check_input(kind, text, valid)
            tally.counts["accepted" if outcome.accepted else "rejected"] += 1
        except Timeout:
            tally.fail(kind, TimeoutError(f"example took more than {timeout:g} s"), text)
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            tally.fail(kind, exc, text)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        took = time.perf_counter() - start
        if took > tally.slowest[0]:
            tally.slowest = (took, text if isinstance(text, str) else repr(text[:200]))

    one()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="total examples (split over the modes)")
    parser.add_argument("--mode", choices=["all", *MODES, "flow", "inputs", "surfaces", *INPUT_MODES], default="all",
                        help="all: the spec modes; flow: valid specs built around one dataflow construct each; "
                             "inputs: every non-spec input kind; or one mode")
    parser.add_argument("--meta-every", type=int, default=3,
                        help="validate every Nth spec of each mode on the meta device (0: never)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per example before it is a hang")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the shortest spec of each failure group here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    signal.signal(signal.SIGALRM, _alarm)

    shares = (MODES if args.mode == "all" else INPUT_MODES if args.mode == "inputs" else
              {kind: 1 / len(SURFACES) for kind in SURFACES} if args.mode == "surfaces" else {args.mode: 1.0})
    plan = {mode: round(args.examples * share) for mode, share in shares.items()}
    tally = Tally()
    start = time.perf_counter()
    for i, (mode, n) in enumerate(plan.items()):
        run(mode, n, tally, args.meta_every, args.timeout, args.seed + i)
    took = time.perf_counter() - start

    c = tally.counts
    ran = sum(c[f"{m} examples"] for m in plan)
    print(f"costspec fuzz: {ran} examples in {took:.0f} s ({ran / took:.1f}/s), seed {args.seed}")
    for mode in plan:
        print(f"  {mode:8s} {c[f'{mode} examples']:6d} examples")
    print(f"  accepted {c['accepted']}, rejected with a CostspecError {c['rejected']}, "
          f"validated on meta {c['validated on meta']}")
    print(f"  ops drawn through the generic generator: {', '.join(unknown_ops()) or 'none'}")
    for key in sorted(k for k in c if k.startswith("known bug")):
        print(f"  {key}: {c[key]} examples")
    print(f"  slowest example: {tally.slowest[0]:.2f} s")
    print(f"  unexpected failures: {c['failed']} in {len(tally.failures)} groups")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    for n, (key, items) in enumerate(sorted(tally.failures.items(), key=lambda kv: -len(kv[1]))):
        message, text = min(items, key=lambda item: len(item[1]))
        print(f"\n=== {len(items)} x {key}\n{message[-2000:]}\n--- shortest spec ---\n{text}")
        if args.out:
            (args.out / f"failure_{n:02d}.yaml").write_text(f"# {key}\n# " + message.replace("\n", "\n# ")
                                                            + "\n" + text, encoding="utf-8")
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
