"""Progress on long work: a one-line counter on stderr when it is a terminal, silent otherwise.

`with progress("validate", total=n) as tick: ... tick()` redraws "validate: 12/40" in place at most
~10 times a second, and clears the line at the end, so piped output and logs stay clean. `quiet`
(the commands' --quiet) or `COSTSPEC_QUIET=1` silences it everywhere.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator, TextIO


def enabled(quiet: bool = False, stream: TextIO | None = None) -> bool:
    stream = stream or sys.stderr
    if quiet or os.environ.get("COSTSPEC_QUIET"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@contextmanager
def progress(label: str, total: int | None = None, quiet: bool = False,
             stream: TextIO | None = None) -> Iterator[Callable[..., None]]:
    """Yield `tick(n=1, what="")`: advance the counter by n (and show what is being done)."""
    out = stream or sys.stderr
    if not enabled(quiet, out):
        yield lambda n=1, what="": None
        return
    state: dict[str, float] = {"done": 0, "last": 0.0, "width": 0}

    def draw(what: str) -> None:
        count = f"{int(state['done'])}/{total}" if total else str(int(state["done"]))
        text = f"{label}: {count}" + (f"  {what}" if what else "")
        text = text[:118]
        out.write("\r" + text.ljust(int(state["width"])))
        out.flush()
        state["width"] = len(text)

    def tick(n: int = 1, what: str = "") -> None:
        state["done"] += n
        now = time.monotonic()
        if now - state["last"] >= 0.1 or (total and state["done"] >= total):
            state["last"] = now
            draw(what)

    try:
        yield tick
    finally:
        out.write("\r" + " " * int(state["width"]) + "\r")
        out.flush()


@contextmanager
def status(label: str, quiet: bool = False, stream: TextIO | None = None, every: float = 0.5) -> Iterator[None]:
    """For one long call that cannot count its steps (a torch run, an ncu profile): "label  12.5 s"
    redrawn on a terminal until the call returns, then cleared."""
    import threading

    out = stream or sys.stderr
    if not enabled(quiet, out):
        yield
        return
    start, done = time.monotonic(), threading.Event()
    width = [0]

    def draw() -> None:
        text = f"{label}  {time.monotonic() - start:.1f} s"[:118]
        out.write("\r" + text.ljust(width[0]))
        out.flush()
        width[0] = len(text)

    def loop() -> None:
        while not done.wait(every):
            draw()

    draw()
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        out.write("\r" + " " * width[0] + "\r")
        out.flush()
