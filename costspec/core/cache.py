"""The compiled-spec cache: JSON entries on disk, keyed by everything that decides their content.

`costspec eval` stores what evaluating a spec needs (`costspec.analysis.compiled`) the first time,
and later runs read it instead of importing sympy and jsonschema and rebuilding the tree.

Where: `$COSTSPEC_CACHE_DIR` if set; else the platform's cache folder: `$XDG_CACHE_HOME/costspec`
(or `~/.cache/costspec`) on Linux and other Unix, `~/Library/Caches/costspec` on macOS,
`%LOCALAPPDATA%\\costspec\\Cache` on Windows. `COSTSPEC_NO_CACHE=1` (or `eval --no-cache`) turns it off.

Key: a SHA-256 of the entry format, the package version, a fingerprint of the installed package's
own files (every file's path, size and modification time: source, cost table, schema; so an edited
or reinstalled costspec never reads entries of another build) and of the cost table's bytes (the
data every pointwise count comes from), the resolved spec path (a zoo name resolved to its file),
the spec's bytes, and the caller's further parts (dtype, pass).

An entry is one file: a header line `costspec-compiled-spec <format> <key> <sha256 of the body>`,
then the body, JSON. A reader takes at most MAX_ENTRY_BYTES through the bounded reader, and gives
None for anything but an intact entry of this key: a missing, truncated, corrupt (any changed byte
fails the checksum) or foreign file is a miss, never an error. Nothing in an entry is executed
(JSON only; no pickle). Writes are atomic (`safeio.write_text`: a temporary file renamed over the
entry), so concurrent runs leave a whole entry or none; a cache that cannot be written is skipped.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from costspec.core.version import __version__

ENTRY_FORMAT = "1"
MAGIC = "costspec-compiled-spec"
MAX_ENTRY_BYTES = 32 * 2**20
MAX_ENTRIES = 512  # entries kept; the oldest are removed beyond this
SUBDIR = "compiled"

_fingerprint: str | None = None


def directory() -> Path | None:
    """The cache folder (None when COSTSPEC_NO_CACHE is set, or no home folder is known)."""
    if os.environ.get("COSTSPEC_NO_CACHE", "") not in ("", "0"):
        return None
    explicit = os.environ.get("COSTSPEC_CACHE_DIR")
    if explicit:
        return Path(explicit)
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA")
        return Path(base) / "costspec" / "Cache" if base else None
    try:
        home = Path.home()
    except RuntimeError:  # no home folder for this user
        home = None
    if sys.platform == "darwin":
        return home / "Library" / "Caches" / "costspec" if home else None
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):  # the XDG spec: a relative path is invalid and ignored
        return Path(xdg) / "costspec"
    return home / ".cache" / "costspec" if home else None


def package_fingerprint() -> str:
    """A digest of the installed package: its version, every file's path, size and mtime, and the cost
    table's bytes (once per process)."""
    global _fingerprint
    if _fingerprint is None:
        root = Path(__file__).resolve().parent.parent
        digest = hashlib.sha256(f"{__version__}\0".encode())
        start = len(str(root)) + 1
        for folder, dirs, files in os.walk(root):  # symlinked folders (the zoo) are not entered
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                path = os.path.join(folder, name)
                try:
                    info = os.stat(path)
                except OSError:
                    continue
                digest.update(f"{path[start:]}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
        try:
            digest.update((root / "data" / "cost_table.yaml").read_bytes())
        except OSError:
            digest.update(b"no cost table")
        _fingerprint = digest.hexdigest()
    return _fingerprint


def key(spec_path: str | os.PathLike, spec_bytes: bytes, *parts: str) -> str:
    """The entry key of a spec read from `spec_path` with content `spec_bytes`, for `parts` (dtype, pass...)."""
    digest = hashlib.sha256()
    for item in (MAGIC, ENTRY_FORMAT, __version__, package_fingerprint(), os.path.abspath(spec_path),
                 hashlib.sha256(spec_bytes).hexdigest(), *parts):
        digest.update(item.encode("utf-8", "surrogateescape") + b"\0")
    return digest.hexdigest()


def _path(folder: Path, entry: str) -> Path:
    return folder / SUBDIR / f"{entry}.json"


def read(entry: str, folder: Path | None = None) -> dict[str, Any] | None:
    """The body of entry `entry`, or None (missing, unreadable, corrupt, foreign, too large)."""
    from costspec.core.errors import CostspecError
    from costspec.core.safeio import Kind, read_bytes

    folder = folder or directory()
    if folder is None:
        return None
    try:
        raw = read_bytes(_path(folder, entry), Kind("compiled-spec cache entry", MAX_ENTRY_BYTES))
    except (CostspecError, OSError):
        return None
    return parse(raw, entry)


def parse(raw: bytes, entry: str) -> dict[str, Any] | None:
    """The body of the bytes of entry `entry`, or None when they are not an intact entry of that key."""
    header, newline, body = raw.partition(b"\n")
    if not newline:
        return None
    if header != f"{MAGIC} {ENTRY_FORMAT} {entry} {hashlib.sha256(body).hexdigest()}".encode():
        return None
    try:
        data = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def write(entry: str, data: dict[str, Any], folder: Path | None = None) -> bool:
    """Store `data` (JSON-serialisable) as entry `entry`, atomically; False when the cache cannot be written."""
    from costspec.core.errors import CostspecError
    from costspec.core.safeio import write_text

    folder = folder or directory()
    if folder is None:
        return False
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=True)
    text = f"{MAGIC} {ENTRY_FORMAT} {entry} {hashlib.sha256(body.encode()).hexdigest()}\n{body}"
    if len(text) > MAX_ENTRY_BYTES:
        return False
    target = _path(folder, entry)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text(target, text)
    except (CostspecError, OSError):
        return False
    _prune(target.parent)
    return True


def _prune(folder: Path) -> None:
    """Remove the oldest entries beyond MAX_ENTRIES (another run may be removing them too)."""
    try:
        entries = [(e.stat().st_mtime_ns, e.path) for e in os.scandir(folder)
                   if e.name.endswith(".json") and e.is_file(follow_symlinks=False)]
    except OSError:
        return
    if len(entries) <= MAX_ENTRIES:
        return
    for _, path in sorted(entries)[: len(entries) - MAX_ENTRIES]:
        try:
            os.unlink(path)
        except OSError:
            pass


__all__ = ["MAX_ENTRIES", "MAX_ENTRY_BYTES", "directory", "key", "package_fingerprint", "parse", "read", "write"]
