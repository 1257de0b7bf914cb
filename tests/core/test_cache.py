"""The compiled-spec cache: where it lives, what its key covers, and that a damaged, foreign or
half-written entry is a miss, never an error or a wrong answer."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import costspec
from costspec.analysis.compiled import CompiledFormatError, CompiledModel
from costspec.core import cache

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "specs" / "toy_mlp.yaml"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("COSTSPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("COSTSPEC_NO_CACHE", raising=False)
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def entry() -> dict:
    """A real entry's body: toy_mlp compiled for the forward pass."""
    return costspec.load(TOY).compiled("forward").to_json()


def test_the_folder_follows_the_platform(monkeypatch, tmp_path):
    for name in ("COSTSPEC_CACHE_DIR", "COSTSPEC_NO_CACHE", "XDG_CACHE_HOME", "LOCALAPPDATA"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cache.sys, "platform", "linux")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache.directory() == tmp_path / ".cache" / "costspec"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.directory() == tmp_path / "xdg" / "costspec"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # invalid per the XDG spec: ignored
    assert cache.directory() == tmp_path / ".cache" / "costspec"
    monkeypatch.setattr(cache.sys, "platform", "darwin")
    assert cache.directory() == tmp_path / "Library" / "Caches" / "costspec"
    monkeypatch.setattr(cache.sys, "platform", "win32")
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "local"))
    assert cache.directory() == tmp_path / "local" / "costspec" / "Cache"
    monkeypatch.setenv("COSTSPEC_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.directory() == tmp_path / "mine"
    monkeypatch.setenv("COSTSPEC_NO_CACHE", "1")
    assert cache.directory() is None


def test_the_key_covers_spec_bytes_path_options_and_the_package(monkeypatch):
    data = TOY.read_bytes()
    base = cache.key(TOY, data, "", "forward")
    assert base == cache.key(TOY, data, "", "forward")
    others = {cache.key(TOY, data + b"\n", "", "forward"), cache.key(TOY.with_name("x.yaml"), data, "", "forward"),
              cache.key(TOY, data, "fp16", "forward"), cache.key(TOY, data, "", "train")}
    monkeypatch.setattr(cache, "_fingerprint", "another build")
    others.add(cache.key(TOY, data, "", "forward"))
    monkeypatch.setattr(cache, "__version__", "9.9.9")
    others.add(cache.key(TOY, data, "", "forward"))
    assert base not in others and len(others) == 6


def test_the_fingerprint_changes_with_any_package_file(monkeypatch, tmp_path):
    package = tmp_path / "costspec"
    (package / "core").mkdir(parents=True)
    source = package / "core" / "cache.py"
    source.write_text("x = 1\n")
    (package / "data").mkdir()
    (package / "data" / "cost_table.yaml").write_text("gelu: 8\n")
    monkeypatch.setattr(cache, "__file__", str(source))

    def fingerprint() -> str:
        monkeypatch.setattr(cache, "_fingerprint", None)
        return cache.package_fingerprint()

    first = fingerprint()
    assert fingerprint() == first
    (package / "data" / "cost_table.yaml").write_text("gelu: 9\n")  # same size, a new mtime
    os.utime(package / "data" / "cost_table.yaml", ns=(1, 1))
    second = fingerprint()
    assert second != first
    (package / "data" / "cost_table.yaml").write_text("gelu: 7\n")  # same size, same mtime: the bytes decide
    os.utime(package / "data" / "cost_table.yaml", ns=(1, 1))
    assert fingerprint() != second


def test_write_then_read(folder, entry):
    assert cache.write("k" * 64, entry)
    assert cache.read("k" * 64) == entry
    assert cache.read("j" * 64) is None  # another key: a miss
    os.rename(folder / "compiled" / f"{'k' * 64}.json", folder / "compiled" / f"{'j' * 64}.json")
    assert cache.read("j" * 64) is None  # an entry stored under another key (foreign): refused


def test_every_single_byte_corruption_is_a_miss(folder, entry):
    key = "c" * 64
    cache.write(key, entry)
    path = folder / "compiled" / f"{key}.json"
    original = path.read_bytes()
    assert cache.parse(original, key) == entry
    for i in range(len(original)):
        for flip in (0x01, 0x20, 0x80):
            assert cache.parse(original[:i] + bytes([original[i] ^ flip]) + original[i + 1:], key) is None, (
                f"byte {i} ^ {flip:#x} was accepted")
    for cut in range(len(original)):
        assert cache.parse(original[:cut], key) is None
    for i in (0, 70, len(original) // 2, len(original) - 1):  # the same through the file
        path.write_bytes(original[:i] + bytes([original[i] ^ 0x01]) + original[i + 1:])
        assert cache.read(key) is None
    path.write_bytes(original)
    assert cache.read(key) == entry


def test_a_forged_entry_with_a_valid_checksum_never_crashes_the_reader(entry):
    """Bytes changed in the body and the checksum recomputed (not an accident: a forgery): the checked
    loader refuses it, or it loads and evaluates to a report or None, never an exception."""
    import json

    body = json.dumps(entry, separators=(",", ":")).encode()
    for i in range(0, len(body), 3):
        for new in (b"9", b"-", b"]"):
            forged = body[:i] + new + body[i + 1:]
            try:
                data = json.loads(forged)
                compiled = CompiledModel(data)
            except (ValueError, CompiledFormatError):
                continue
            values = compiled.bind(sets={"M": 8})
            if values is not None:
                compiled.report("forward", values)
                compiled.gemm_sizes(values)


def test_concurrent_writers_leave_a_whole_entry(folder, entry):
    key = "d" * 64
    seen: list[object] = []

    def write() -> None:
        for _ in range(15):
            cache.write(key, entry)

    def read() -> None:
        for _ in range(60):
            seen.append(cache.read(key))

    threads = [threading.Thread(target=write) for _ in range(4)] + [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(s is None or s == entry for s in seen)
    assert cache.read(key) == entry
    assert [p.name for p in (folder / "compiled").iterdir()] == [f"{key}.json"]  # no temporary files left


def test_old_entries_are_pruned(folder, entry, monkeypatch):
    monkeypatch.setattr(cache, "MAX_ENTRIES", 3)
    for i in range(6):
        cache.write(f"{i:064d}", entry)
        os.utime(folder / "compiled" / f"{i:064d}.json", ns=(i * 10**9, i * 10**9))
    cache.write(f"{9:064d}", entry)
    assert sorted(p.stem[-1] for p in (folder / "compiled").iterdir()) == ["4", "5", "9"]


def test_an_unwritable_cache_is_skipped(tmp_path, monkeypatch, entry):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("COSTSPEC_CACHE_DIR", str(blocker))
    assert cache.write("e" * 64, entry) is False
    assert cache.read("e" * 64) is None
