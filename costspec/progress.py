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
    state = {"done": 0, "last": 0.0, "width": 0}

    def draw(what: str) -> None:
        count = f"{state['done']}/{total}" if total else str(state["done"])
        text = f"{label}: {count}" + (f"  {what}" if what else "")
        text = text[:118]
        out.write("\r" + text.ljust(state["width"]))
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
        out.write("\r" + " " * state["width"] + "\r")
        out.flush()
