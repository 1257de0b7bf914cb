"""Dims (costspec.core.dims): a size or a derived dim that divides by zero at the bound values is an error
naming it (exit 2 from the CLI, never an internal error)."""
from __future__ import annotations

import pytest

import costspec
from costspec.core.errors import CostspecError
from tests.common import invoke

DIV = ("costspec: 1\nname: div\ndims:\n  B: 2\n  C: 64\n  K: 96\ninput: [B, C]\nlayers:\n"
       "  - linear: {out: \"C*2/(K-C)\"}\n")


def test_a_size_that_divides_by_zero_is_exit_2(write_spec):
    spec = write_spec(DIV)
    r = invoke("eval", spec, "--set", "K=64")
    assert r.returncode == 2 and "division or modulo by zero" in r.stderr and "Traceback" not in r.stderr
    assert invoke("eval", spec).returncode == 0  # 2*64/32 = 4


def test_a_derived_dim_that_divides_by_zero_is_a_spec_error(write_spec):
    spec = write_spec(DIV.replace("  K: 96\n", "  K: 96\n  X: \"C % (K - C) + 1\"\n"))
    model = costspec.load(spec)
    with pytest.raises(CostspecError, match="dim X = .* divides by zero"):
        model.evaluate(K=64)
