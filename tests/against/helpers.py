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


# A conv + BatchNorm + ReLU model written with layernorm2d in place of the BatchNorm (the same 2*C parameters)
BN_AS_LN2D = """
costspec: 1
name: bn_written_as_ln2d
dims: {B: 2, C: 16, H: 8}
precision: {dtype: fp32}
input: [B, 3, H, H]
layers:
  - conv2d: {out: C, kernel: 3, padding: 1, bias: false}
    name: conv
  - layernorm2d: {}  # the real model has BatchNorm2d(C): the same 2*C parameters, other work
    name: norm
  - activation: {fn: relu}
    name: act
"""
