"""The words costspec's options take, defined once: passes, phases, fusion modes, SDPA backends,
devices and output formats.

Each is a `str` enum, so a member compares equal to its text ("forward") and prints as it. A value
from outside (the CLI, the Python API) is parsed once, at that boundary, with `parse()`: a bad one
is a `UsageError` (exit 2) naming the choices; below the boundary only members travel. The CLI's
`click.Choice` lists come from `choices()`, never from re-typed lists.
"""
from __future__ import annotations

from enum import Enum
from typing import TypeVar

from costspec.core.errors import UsageError

E = TypeVar("E", bound="Word")


class Word(str, Enum):
    """A closed vocabulary; members are their own text."""

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def choices(cls) -> list[str]:
        return [m.value for m in cls]

    @classmethod
    def parse(cls: type[E], value: object, what: str | None = None, allowed: tuple[E, ...] | None = None) -> E:
        """The member named by `value` (a member or its text); UsageError for anything else."""
        members = allowed or tuple(cls)
        for member in members:
            if value is member or (isinstance(value, str) and value == member.value):
                return member
        name = what or cls.__name__.lower()
        shown = ", ".join(m.value for m in members)
        raise UsageError(f"{name} must be one of {shown}, not {value!r}")


class Phase(Word):
    """One direction of execution: what a runtime counter or a profiler sees at a time."""

    FORWARD = "forward"
    BACKWARD = "backward"


class Serve(Word):
    """A serving phase of a decoder: prefill (the input's tokens, the key/value cache written) or decode (one
    new token per sequence attending to the cached ones)."""

    PREFILL = "prefill"
    DECODE = "decode"


class Pass(Word):
    """What a cost is asked for: a phase, or `train` = forward + backward."""

    FORWARD = "forward"
    BACKWARD = "backward"
    TRAIN = "train"

    @property
    def phases(self) -> tuple[Phase, ...]:
        """The phases this pass runs, in execution order."""
        if self is Pass.TRAIN:
            return (Phase.FORWARD, Phase.BACKWARD)
        return (Phase(self.value),)


RUNNABLE_PASSES = (Pass.FORWARD, Pass.TRAIN)  # what a torch module can be run for (validate, time, ncu run)


class Fusion(Word):
    """Which kernels the byte model assumes fused (docs/conventions.md, fusion assumptions)."""

    NONE = "none"
    DEFAULT = "default"
    AGGRESSIVE = "aggressive"


class Backend(Word):
    """The SDPA kernel family attention's cost follows."""

    FLASH = "flash"
    MATH = "math"
    EAGER = "eager"


class Device(Word):
    """Where `validate` runs the generated module."""

    META = "meta"
    CPU = "cpu"


class FusedRun(Word):
    """How a fused kernel (an op's `Runtime.fused` key, e.g. SDPA) ran in a measured run."""

    DECOMPOSED = "decomposed"  # as several aten ops (meta tensors, PyTorch's math fallback)
    COUNTED = "fused-counted"  # one fused aten op that FlopCounterMode has a formula for
    UNCOUNTED = "fused-uncounted"  # one fused aten op FlopCounterMode counts as 0 (CPU flash attention)


class Format(Word):
    """Output formats of the one renderer (costspec.core.render)."""

    TABLE = "table"
    JSON = "json"
    CSV = "csv"
    MARKDOWN = "markdown"


__all__ = ["Backend", "Device", "Format", "Fusion", "FusedRun", "Pass", "Phase", "RUNNABLE_PASSES", "Serve", "Word"]
