"""costspec.core.progress: the progress counter and the status line draw on a terminal only."""
from __future__ import annotations

import io

from costspec.core.progress import progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_on_a_terminal_only():
    tty, pipe = _Tty(), io.StringIO()
    with progress("validate", 3, stream=tty) as tick:
        for _ in range(3):
            tick(what="layer")
    assert "validate: 3/3" in tty.getvalue() and tty.getvalue().endswith("\r")
    with progress("validate", 3, stream=pipe) as tick:
        tick()
    assert pipe.getvalue() == ""
    quiet = _Tty()
    with progress("validate", 3, quiet=True, stream=quiet) as tick:
        tick()
    assert quiet.getvalue() == ""


def test_status_line_on_a_terminal_only():
    import time as _time

    from costspec.core.progress import status

    tty, pipe = _Tty(), io.StringIO()
    with status("validate: counting", stream=tty, every=0.01):
        _time.sleep(0.05)
    assert "validate: counting" in tty.getvalue() and " s" in tty.getvalue() and tty.getvalue().endswith("\r")
    with status("validate: counting", stream=pipe, every=0.01):
        _time.sleep(0.02)
    assert pipe.getvalue() == ""
