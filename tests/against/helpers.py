"""Shared by the --against tests: load a spec (a path or its text) and check it against a target on `meta`."""
from __future__ import annotations

from costspec.against.check import validate_against
from costspec.against.target import load_target
from costspec.model import load, loads


def against(spec, target: str, pass_: str = "forward", sets: dict | None = None):
    model = loads(spec) if isinstance(spec, str) and "\n" in spec else load(spec)
    values = model.bind()
    real = load_target(target, model, values, "meta", None, sets or {})
    return model, validate_against(model, values, real, pass_)


def failures_text(result) -> str:
    return "\n".join(result.failures())
