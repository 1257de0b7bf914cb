"""costspec.runtime.torch_budget: torch / validate refuse what they cannot build or hold (a billion modules,
more memory than there is, integers beyond 64 bits) with exit 2 and a clear message, in bounded time and memory."""
from __future__ import annotations

import pytest

import costspec
from costspec.core import budget
from costspec.core.errors import UsageError
from costspec.runtime import torch_budget
from tests.common import ROOT, bounded

REPEAT = "costspec: 1\nname: deep\ninput: [2, 8]\nlayers:\n  - repeat: 1000000000\n    body:\n      - linear: {out: 8}\n"


@pytest.mark.parametrize("command", ["torch", "validate"])
def test_torch_and_validate_refuse_to_unroll_a_billion_modules(tmp_path, command):
    spec = tmp_path / "deep.yaml"
    spec.write_text(REPEAT)
    code, _, err = bounded(command, spec)
    assert code == 2 and "this spec needs 1,000,000,000 op modules in torch" in err
    assert f"the limit is {budget.MAX_TORCH_MODULES:,}" in err


def test_validate_on_cpu_estimates_memory_and_refuses_beyond_what_is_available():
    code, _, err = bounded("validate", ROOT / "specs/vit_b.yaml", "--device", "cpu", "--batch", "100000")
    assert code == 2 and "validate --device cpu would need about" in err and "--force" in err


def test_validate_memory_estimate_is_the_roofline_traffic_in_fp32():
    model = costspec.load(ROOT / "specs/toy_mlp.yaml")  # fp32: 10 x (linear 128x1024 @ 1024x1024 + sigmoid)
    values = model.bind()
    # linear: reads x (128*1024) + W (1024*1024) + b (1024), writes y (128*1024); sigmoid reads and writes 128*1024
    per_layer = (128 * 1024 + 1024 * 1024 + 1024 + 128 * 1024) + 2 * 128 * 1024
    assert torch_budget.validate_memory(model, values, "forward") == 10 * per_layer * 4
    with pytest.raises(UsageError, match="more than the 0.0 GiB available"):
        torch_budget.check_validate_memory(model, values, "forward", available=1)
    torch_budget.check_validate_memory(model, values, "forward", available=10 * per_layer * 4)


def test_torch_refuses_integer_attributes_beyond_64_bits(tmp_path):
    # found by the fuzzer: validate on meta crashed inside torch (exit 3) on a padding of 10**30
    spec = tmp_path / "pad.yaml"
    spec.write_text("costspec: 1\nname: pad\ninput: [1, 3, 8, 8]\nlayers:\n"
                    "  - conv2d: {out: 4, kernel: 3, padding: 1000000000000000000000000000000}\n")
    assert costspec.load(spec).evaluate().params == 4 * 3 * 3 * 3 + 4  # the costs are still exact
    code, _, err = bounded("validate", spec)
    assert code == 2 and "conv2d 'conv': padding = 1000000000000000000000000000000 is beyond torch's 64-bit" in err
