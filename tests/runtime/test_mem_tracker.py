"""`memory --pass train --check`: the modelled training-step peak against PyTorch's MemTracker under
FakeTensorMode on the generated module, category by category (parameters, gradients, optimizer state,
activations, the backward's buffers), every difference a named rule."""
from __future__ import annotations

import json

import pytest

from costspec.core.errors import UsageError
from costspec.model import load
from costspec.runtime.mem_tracker import TOLERANCE, check_memory
from tests.common import ROOT

pytest.importorskip("torch")

LLAMA = ROOT / "specs/llama_1b.yaml"
VIT = ROOT / "specs/vit_b.yaml"
EXACT = ("Parameter", "Gradient", "Optstate", "Activation", "Temp")  # equal once the rules' rows are apart


def categories(check) -> dict[str, tuple[int, int]]:
    return {ref: (ours, theirs) for ref, ours, theirs, _ in check.rows}


def assert_matches(model, values, moment):
    peak, forward = check_memory(model, values, "adamw")
    assert peak.moment == moment
    for check in (peak, forward):
        got = categories(check)
        for ref in EXACT:
            assert got[ref][0] == got[ref][1], (check.moment, ref, got[ref])
        n_tensors = sum(1 for _ in _param_tensors(model, values))
        assert got["step counters"] == (0, 4 * n_tensors)  # the host-side fp32 `step` of each parameter tensor
    assert peak.ok and abs(peak.peak_error) <= TOLERANCE
    return peak, forward


def _param_tensors(model, values):
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from costspec.runtime.torch_build import build_module

    with FakeTensorMode(allow_non_fake_inputs=True), torch.device("cpu"):
        module, _ = build_module(model, values)
        return list(module.parameters())


def test_acceptance_llama_1b():
    """Two layers, 128 tokens: the peak is the tied table's three gradients at the embedding's backward."""
    model = load(LLAMA)
    values = model.bind(1, {"L": 2, "S": 128})
    peak, forward = assert_matches(model, values, "tied-weight gradients")
    d = {k: int(values[v.symbol]) for k, v in model.dims.dims.items()}
    assert categories(peak)["Temp"][1] == 3 * d["V"] * d["C"] * 2  # measured: the head's, the embedding's, their sum
    assert categories(peak)["Other"] == (0, d["B"] * d["S"] * 8)  # the token ids, int64, held by the caller
    # the RoPE tables (cos, sin per attention layer) are buffers, not counted by costspec
    assert categories(peak)["Buffer"][0] == 0 and categories(peak)["Buffer"][1] > 0


@pytest.mark.slow
def test_acceptance_vit_b():
    """At B=2 the peak is the optimizer step (the _foreach_sqrt copy outweighs the saved activations)."""
    model = load(VIT)
    assert_matches(model, model.bind(2), "optimizer step")


def test_refusals():
    model = load(LLAMA)
    values = model.bind(1, {"L": 1, "S": 8})
    with pytest.raises(UsageError, match="master"):
        check_memory(model, values, "adamw", master=True)
    with pytest.raises(UsageError, match="torch.optim"):
        check_memory(model, values, "adafactor")


def test_cli(cli):
    out = cli("memory", LLAMA, "--pass", "train", "--set", "L=1", "--set", "S=16", "-b", "1", "--check",
              "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["ok"] and data["moment"] == "tied-weight gradients"
    assert data["categories"]["Gradient"]["costspec"] == data["categories"]["Gradient"]["memtracker"]
    bad = cli("memory", LLAMA, "--check")
    assert bad.returncode == 2 and "--pass train" in bad.stderr
