"""Shared helpers of the benchmark scripts: timing, the machine line, paths. No timing asserts."""
from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"


def machine() -> str:
    """One line: cores, memory, Python, torch (read from package metadata: torch is not imported)."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        mem = f"{pages * size / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        mem = "? GiB"
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "not installed"
    return (f"{os.cpu_count()} cores, {mem}, Python {platform.python_version()}, torch {torch}, "
            f"costspec {metadata.version('costspec')}")


def median_time(fn, runs: int, warmup: int = 0) -> tuple[float, list[float]]:
    """Median wall time of `fn()` over `runs` calls (after `warmup` untimed calls), and all times."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def run_process(args: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run a command; fail loudly (with its stderr) if it does not exit 0."""
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


def fmt_s(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} us"
