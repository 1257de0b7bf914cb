"""Error types. Library code raises these; only the CLI maps them to exit codes."""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass


class CostspecError(Exception):
    """Base class of every error costspec raises on purpose (bad input, bad usage)."""

    exit_code = 2


@dataclass(frozen=True)
class Location:
    """Where in a spec file a value came from."""

    file: str
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based
    path: str = "$"  # jsonschema-style YAML path, e.g. $.layers[3].mlp.hidden

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"{where}: {self.path}"

    def child(self, key: str | int) -> "Location":
        """The location of a child; the line stays the parent's until a better one is known."""
        step = f"[{key}]" if isinstance(key, int) else f".{key}"
        return Location(self.file, self.line, self.column, self.path + step)


class SpecError(CostspecError):
    """A spec that cannot be accepted: carries where, and what was expected."""

    def __init__(self, message: str, location: Location | None = None, expected: str | None = None):
        self.message = message
        self.location = location
        self.expected = expected
        super().__init__(str(self))

    def __str__(self) -> str:
        text = self.message
        if self.expected:
            text += f" (expected {self.expected})"
            if guess := did_you_mean(self.message, self.expected):
                text += f"; did you mean {guess}?"
        return f"{self.location}: {text}" if self.location else text


_OFFENDING = re.compile(r"(?:unknown [\w ]+|bad value) '([^']+)'")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def did_you_mean(message: str, expected: str) -> str | None:
    """For an 'unknown op 'linaer'' (or key, activation, name, block...) whose expected text lists the
    choices: the choices closest to what was written ('linear'), or None when none is close."""
    found = _OFFENDING.search(message)
    if not found:
        return None
    choices = {name for part in expected.split(",") for name in _NAME.findall(part)[-1:] + _NAME.findall(part)[:1]}
    close = difflib.get_close_matches(found[1], sorted(choices - {found[1]}), n=2, cutoff=0.6)
    return " or ".join(f"'{c}'" for c in close) or None


class UnknownOpError(SpecError):
    """A layer names an op that is not registered."""


class ExpressionError(SpecError):
    """An expression in a spec that is not in the safe arithmetic subset, or cannot be evaluated."""


class InputError(CostspecError):
    """An input file that cannot be read: missing, not a regular file, or beyond a limit (raised by the
    bounded reader, `costspec.core.safeio`, and by the zoo for a name that is neither a file nor a spec)."""


class UsageError(CostspecError):
    """Bad command-line usage that click itself cannot catch (e.g. --set of an unknown dim)."""


class MissingExtraError(CostspecError):
    """An optional dependency (torch, matplotlib) is needed and not installed."""

    def __init__(self, package: str, extra: str, purpose: str):
        super().__init__(
            f"{purpose} needs {package}, which is not installed; "
            f"install it with: pip install {package} (or pip install '.[{extra}]' in a costspec checkout)"
        )


class MismatchError(CostspecError):
    """Analytic and measured numbers disagree beyond the tolerance (validate, ncu compare)."""

    exit_code = 1
