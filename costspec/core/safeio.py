"""Every file costspec reads or writes goes through this module.

Reading (`read_bytes`, `read_text`, `read_yaml`, `read_json`; `check_input` checks a file without
reading it, as the command line's path options do when they are parsed): regular files only (a FIFO,
a device such as /dev/zero or a directory is refused at once, without blocking), no more than
the size limit of the input's kind, YAML with the spec loader's bounds (aliases, nesting, node
count: `spec.yaml_marks.load_marked`), JSON with a nesting limit and bounded numbers.
`check_number_text` bounds the digits and the magnitude of a number before anything parses it
(a 5,000-digit value or `1e999999999` is an error at once, not a long Fraction or an inf).

Writing (`atomic_output`, `write_text`, `write_with`): a target that is, or resolves to, one of
the command's input files is refused (an input named by zoo key is the zoo's file); the content
goes to a temporary file in the target's folder, is flushed to disk and renamed over the target,
so an interrupted run leaves the old file or the new one, never a torn one. A target that exists
and is not a regular file (a terminal, /dev/null, a pipe) is written in place: there is nothing
to rename over.

The limits are documented in docs/spec-language.md ("Limits of every input file").
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, TypeGuard

from costspec.core.errors import CostspecError, InputError, SpecError  # noqa: F401  (InputError: re-exported)

if TYPE_CHECKING:
    from costspec.core.yaml_marks import MarkedDoc

PathLike = str | os.PathLike


class TooLargeError(InputError):
    """An input file over its kind's size limit; `size` is its size (None: grew while read)."""

    def __init__(self, message: str, size: int | None):
        super().__init__(message)
        self.size = size


class OutputError(CostspecError):
    """An output that must not be written (it names an input) or cannot be written."""


@dataclass(frozen=True)
class Kind:
    """What an input file is, as a message names it, and its size limit."""

    name: str
    max_bytes: int
    # JSON's Infinity / -Infinity read as floats: Python's json.dumps writes them (transformers saves
    # Mamba-2's default time_step_limit (0, inf) that way); NaN is refused in every kind
    infinity: bool = False

    @property
    def a_name(self) -> str:
        """'a spec', 'an ncu CSV'."""
        return ("an " if self.name[:1] in "aeiou" or self.name.startswith("ncu") else "a ") + self.name


YAML_MAX_BYTES = 1_000_000  # = spec.yaml_marks.MAX_BYTES: every YAML input has the spec loader's bounds
SPEC = Kind("spec", YAML_MAX_BYTES)
CATALOG = Kind("GPU catalog", YAML_MAX_BYTES)
CALIBRATION = Kind("calibration", YAML_MAX_BYTES)
SIDECAR = Kind("ncu sidecar", 1_000_000)
NCU_CSV = Kind("ncu CSV", 256 * 2**20)  # a raw page of 10,000 kernels x 300 metrics is ~50 MB
HF_CONFIG = Kind("Hugging Face config", 4_000_000, infinity=True)  # the largest in the hub are ~100 kB
VALIDATION_JSON = Kind("validation JSON", 64 * 2**20)  # `validate --format json` of a large spec: ~1 MB
COMPARE_JSON = Kind("ncu compare JSON", 64 * 2**20)
LENGTHS = Kind("lengths file", 16 * 2**20)  # 1,000,000 lengths of up to 16 characters
# every kind of input file, by name (the CLI's path options name theirs: `costspec.cli.options.InputFile`)
KINDS = {k.name: k for k in (SPEC, CATALOG, CALIBRATION, SIDECAR, NCU_CSV, HF_CONFIG, VALIDATION_JSON, COMPARE_JSON,
                             LENGTHS)}

MAX_CSV_LINE = 131_072  # characters per CSV line: Python's csv field limit, so no field can exceed it
MAX_JSON_DEPTH = 32  # nesting of JSON objects / arrays
MAX_NUMBER_DIGITS = 100  # significant digits of a decimal number in a CSV, JSON or calibration file
MAX_MAGNITUDE = 300  # decimal exponent of such a number: 1e300 is fine, 1e400 is not a float
MIN_MAGNITUDE = -400  # below the smallest float (5e-324): such a value reads as 0; 1e-99999999 is refused
if TYPE_CHECKING:
    MAX_FRACTION_DIGITS: int  # digits of p and of q in a calibration's `exact: p/q` (= expr.MAX_INT_DIGITS)


def __getattr__(name: str) -> int:
    # MAX_FRACTION_DIGITS is the spec expressions' MAX_INT_DIGITS; reading it lazily keeps this module (which a
    # warm `costspec eval` reads its cache through) free of sympy, which costspec.core.expr imports
    if name == "MAX_FRACTION_DIGITS":
        from costspec.core.expr import MAX_INT_DIGITS

        return MAX_INT_DIGITS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------
def _file_type(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_input(path: PathLike, kind: Kind) -> None:
    """InputError unless `path` is a regular file of at most `kind.max_bytes` bytes; nothing is read
    (the command-line options that name input files check them with this when they are parsed)."""
    fd, _ = _open_regular(os.fspath(path), kind)
    os.close(fd)


def _open_regular(name: str, kind: Kind) -> tuple[int, os.stat_result]:
    """A descriptor of a regular file within the size limit, and its stat; InputError otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, flags)
    except FileNotFoundError:
        raise InputError(f"cannot read {kind.name} {name}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{name} is a directory, not {kind.a_name}") from None
    except OSError as exc:
        raise InputError(f"cannot read {kind.name} {name}: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InputError(f"{name} is a directory, not {kind.a_name}")
        expected = kind.a_name if kind.name.endswith("file") else f"{kind.a_name} file"
        raise InputError(f"{name} is {_file_type(info.st_mode)}, not a regular file (expected {expected})")
    if info.st_size > kind.max_bytes:
        os.close(fd)
        raise TooLargeError(f"{name}: file is {info.st_size:,} bytes, over the limit for {kind.a_name} "
                            f"(expected at most {kind.max_bytes:,} bytes)", info.st_size)
    return fd, info


def read_bytes(path: PathLike, kind: Kind) -> bytes:
    """The bytes of a regular file of at most `kind.max_bytes` bytes; InputError otherwise.

    The file is opened non-blocking (opening a FIFO for reading would otherwise wait for a
    writer) and checked with fstat before a byte is read."""
    name = os.fspath(path)
    fd, _ = _open_regular(name, kind)
    with os.fdopen(fd, "rb") as f:
        try:
            raw = f.read(kind.max_bytes + 1)  # the file may grow after fstat
        except OSError as exc:
            raise InputError(f"cannot read {kind.name} {name}: {exc.strerror or exc}") from None
    if len(raw) > kind.max_bytes:
        raise TooLargeError(f"{name}: file is more than {kind.max_bytes:,} bytes, over the limit for {kind.a_name} "
                            f"(expected at most {kind.max_bytes:,} bytes)", None)
    return raw


def read_text(path: PathLike, kind: Kind, max_line: int | None = None) -> str:
    """A regular text file (UTF-8, or UTF-16 with a byte-order mark; undecodable bytes replaced),
    within the size limit and, with `max_line`, no line longer than that many characters."""
    data = read_bytes(path, kind)
    text = data.decode("utf-16") if data.startswith((b"\xff\xfe", b"\xfe\xff")) else data.decode(
        "utf-8-sig", errors="replace")
    if max_line is not None:
        check_line_lengths(text, max_line, os.fspath(path))
    return text


def check_line_lengths(text: str, max_line: int, name: str) -> None:
    """InputError naming the first line longer than `max_line` characters."""
    start, number = 0, 1
    while start <= len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        if end - start > max_line:
            raise InputError(f"{name}:{number}: line of {end - start:,} characters, over the limit "
                             f"(expected at most {max_line:,} characters per line)")
        start, number = end + 1, number + 1


def read_yaml(path: PathLike, kind: Kind) -> MarkedDoc:
    """A YAML file with the spec loader's bounds: plain YAML only, one document, aliases
    expanded to at most MAX_NODES nodes, nesting at most MAX_DEPTH; values located by line."""
    from costspec.core.yaml_marks import load_marked

    return load_marked(read_bytes(path, kind), os.fspath(path), kind=kind.name)


def read_json(path: PathLike, kind: Kind) -> object:
    """A JSON file: nesting at most MAX_JSON_DEPTH, numbers bounded (`check_number_text`), no
    NaN, and Infinity only where the kind allows it."""
    name = os.fspath(path)
    raw = read_bytes(path, kind)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: byte {exc.start} is not valid UTF-8 (expected a JSON text file)") from None
    return loads_json(text, name, infinity=kind.infinity)


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


def loads_json(text: str, name: str, infinity: bool = False) -> object:
    """Parse JSON text with the bounds of `read_json`; `infinity`: Infinity / -Infinity are floats."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_JSON_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            raise InputError(f"{name}: JSON nested more than {MAX_JSON_DEPTH} levels deep "
                             f"(expected at most {MAX_JSON_DEPTH} levels of objects and arrays)")

    def number(token: str) -> int | float:
        check_number_text(token, f"{name}: JSON number")
        return float(token) if any(c in token for c in ".eE") else int(token)

    def constant(token: str) -> float:
        if infinity and token in ("Infinity", "-Infinity"):
            return float(token)
        raise InputError(f"{name}: JSON value {token} is not a finite number (expected finite numbers)")

    try:
        return json.loads(text, parse_int=number, parse_float=number, parse_constant=constant)
    except ValueError as exc:
        raise InputError(f"{name}: not valid JSON: {exc}") from None
    except RecursionError:  # the depth scan above makes this unreachable; kept as a guard
        raise InputError(f"{name}: JSON nested too deeply (expected at most {MAX_JSON_DEPTH} levels)") from None


_NUMBER_TEXT = re.compile(r"[+-]?(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?")


def check_number_text(text: str, what: str = "number", max_digits: int = MAX_NUMBER_DIGITS) -> None:
    """Refuse a decimal number with more than `max_digits` significant digits or a magnitude
    outside 1e-400 .. 1e300 (MIN_MAGNITUDE, MAX_MAGNITUDE), before anything parses it; text
    that is not a decimal number passes (the caller's parser judges it). ncu's forms are understood: a `(!)` prefix,
    `,` thousands separators, and `158 (0: 158)` instance lists (the aggregate is checked)."""
    body = text.strip()
    if body.startswith("(!)"):
        body = body[3:].strip()
    if "(" in body:
        body = body[: body.index("(")].strip()
    body = body.replace(",", "")
    match = _NUMBER_TEXT.fullmatch(body)
    if match is None or not (match.group(1) or match.group(2)):
        return
    whole, fraction, exponent = match.group(1), match.group(2) or "", match.group(3)
    significant = (whole + fraction).lstrip("0")
    shown = body if len(body) <= 40 else body[:20] + "..." + body[-10:]
    if len(significant) > max_digits:
        raise InputError(f"{what} {shown!r} has {len(significant):,} significant digits "
                         f"(expected at most {max_digits})")
    expected = f"expected a magnitude between 1e{MIN_MAGNITUDE} and 1e{MAX_MAGNITUDE}"
    if exponent is not None and len(exponent.lstrip("+-").lstrip("0")) > 4:
        raise InputError(f"{what} {shown!r} has an exponent out of range ({expected})")
    if not significant:
        return  # zero
    digits_before = len(whole.lstrip("0"))
    lead = digits_before - 1 if digits_before else -(len(fraction) - len(fraction.lstrip("0")) + 1)
    magnitude = lead + int(exponent or 0)  # the power of ten of the leading digit
    if not MIN_MAGNITUDE <= magnitude <= MAX_MAGNITUDE:
        raise InputError(f"{what} {shown!r} is out of range ({expected})")


def finite_number(value: object) -> TypeGuard[int | float]:
    """A real number (not a boolean) that is finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# ----------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------
def _same_file(a: Path, b: Path) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)  # hard links, bind mounts
    except OSError:
        return False


def _input_path(source: PathLike) -> Path:
    """An input as the file it names: a spec given by zoo key (`toy_mlp`) is the zoo's file."""
    text = os.fspath(source)
    if not os.path.lexists(text):
        from costspec.core.zoo import resolve

        return Path(os.fspath(resolve(text)))
    return Path(text)


def check_not_input(target: PathLike, inputs: Iterable[PathLike | None]) -> None:
    """OutputError when `target` is, or resolves to, one of `inputs` (a zoo key: the zoo's file)."""
    out = Path(os.fspath(target))
    for source in inputs:
        if source is None:
            continue
        if _same_file(out, _input_path(source)):
            raise OutputError(f"refusing to write {os.fspath(target)}: it is the input file {os.fspath(source)}, "
                              "which would be lost (expected an output path that is not one of the command's inputs)")


def _in_place(path: Path) -> bool:
    """An existing target that is not a regular file (a terminal, /dev/null, a pipe)."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return False


def _mode_for(path: Path) -> int:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _replacing(target: PathLike, inputs: Iterable[PathLike | None]) -> Iterator[Path | None]:
    """Yield a temporary path next to `target` (None: write `target` in place); on success,
    fsync and rename it over the target; on failure, remove it."""
    path = Path(os.fspath(target))
    check_not_input(path, inputs)
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a directory (expected a file path)")
    if _in_place(path):
        yield None
        return
    final = Path(os.path.realpath(path))  # through a symlink: replace the file it points to
    folder = final.parent
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=final.suffix or ".tmp", dir=folder)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    os.close(fd)
    temp_path = Path(temp)
    try:
        yield temp_path
        os.chmod(temp_path, _mode_for(final))
        with open(temp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(temp_path, final)
    except BaseException:
        with contextlib.suppress(OSError):
            temp_path.unlink()
        raise
    _fsync_dir(folder)


@contextlib.contextmanager
def atomic_output(target: PathLike, inputs: Iterable[PathLike | None] = (),
                  encoding: str = "utf-8") -> Iterator[IO[str]]:
    """A text stream whose content replaces `target` only when the block ends without an error.

    `inputs`: the command's input files; naming one of them as the target is an OutputError."""
    with _replacing(target, inputs) as temp:
        where = Path(os.fspath(target)) if temp is None else temp
        try:
            stream = open(where, "w", encoding=encoding, newline="")  # noqa: SIM115 - closed by the with below
        except OSError as exc:
            raise OutputError(f"cannot write {os.fspath(target)}: {exc.strerror or exc}") from None
        with stream:
            yield stream


def write_text(target: PathLike, text: str, inputs: Iterable[PathLike | None] = (), encoding: str = "utf-8") -> None:
    """Write `text` to `target` atomically (see `atomic_output`)."""
    with atomic_output(target, inputs, encoding) as stream:
        stream.write(text)


def write_with(target: PathLike, save: Callable[[str], None], inputs: Iterable[PathLike | None] = ()) -> None:
    """Let `save(path)` write a file (e.g. matplotlib's savefig) at a temporary path with the
    target's suffix, then rename it over `target` (see `atomic_output`)."""
    with _replacing(target, inputs) as temp:
        save(os.fspath(target) if temp is None else os.fspath(temp))


def location_error(doc: MarkedDoc, path: tuple, message: str, expected: str | None = None) -> SpecError:
    """A SpecError at the line of `path` in a YAML input (catalog, calibration)."""
    return SpecError(message, doc.locate(path), expected)
