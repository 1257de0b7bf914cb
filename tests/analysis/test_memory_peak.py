"""The training-step peak: its moments (forward end, a tied weight's gradients, the optimizer's step) from
the dims by hand, on vit_b and llama_1b, and which one wins."""
from __future__ import annotations

import pytest

from costspec.analysis.memory import ACTIVATIONS, memory_kinds, memory_result, training_moments
from costspec.analysis.memory_peak import Category, output_bytes, tied_table_bytes
from costspec.model import load
from tests.common import ROOT

LLAMA = ROOT / "specs/llama_1b.yaml"
VIT = ROOT / "specs/vit_b.yaml"


def dims(model, values) -> dict[str, int]:
    return {name: int(values[dim.symbol]) for name, dim in model.dims.dims.items() if dim.symbol in values}


def run(model, values, optimizer="adamw"):
    kinds = memory_kinds(model, "train", optimizer)
    result = memory_result(model, kinds, values, "train")
    return result.meta, {k.name: int(k.bytes.xreplace(values)) for k in kinds}


def test_vit_peaks_at_the_optimizer_step_at_a_small_batch():
    model = load(VIT)
    values = model.bind(2)
    d = dims(model, values)
    meta, kinds = run(model, values)
    p = 2 * int(model.evaluate().params)  # bf16 weights
    out = d["B"] * d["S"] * d["C"] * 2  # the final norm's output (B, S, C) in bf16, not saved by any layer
    forward = 4 * p + kinds[ACTIVATIONS] + out + 2
    step = 5 * p + 2  # weights, gradients, two moments and the _foreach_sqrt copy; the loss
    assert meta["moments"]["forward end"]["bytes"] == forward
    assert meta["moments"]["optimizer step"]["bytes"] == step
    assert "tied-weight gradients" not in meta["moments"]
    assert meta["peak_moment"] == "optimizer step" and meta["total_bytes"] == max(forward, step) == step


def test_vit_peaks_at_the_forward_end_at_a_large_batch():
    model = load(VIT)
    values = model.bind(64)
    meta, kinds = run(model, values)
    assert meta["peak_moment"] == "forward end"
    assert meta["total_bytes"] == meta["moments"]["forward end"]["bytes"] > meta["moments"]["optimizer step"]["bytes"]


def test_llama_tied_table_gradients():
    model = load(LLAMA)
    values = model.bind(1, {"L": 2, "S": 128})
    d = dims(model, values)
    table = d["V"] * d["C"] * 2  # the embedding table, bf16, shared with the LM head
    assert tied_table_bytes(model).xreplace(values) == table
    meta, kinds = run(model, values)
    state = kinds["weights"] + kinds["gradients"] + kinds["optimizer state (adamw)"]
    tied = meta["moments"]["tied-weight gradients"]
    assert tied["parts"]["tied-weight gradients"] == 3 * table and tied["bytes"] == state + 3 * table + 4
    out, loss = output_bytes(model)
    assert out.xreplace(values) == d["B"] * d["S"] * d["V"] * 2 and loss == 2  # the logits, bf16
    assert meta["peak_moment"] == "tied-weight gradients"


@pytest.mark.parametrize("optimizer, buffer", [("sgd", 0), ("adam", 1), ("adamw", 1)])
def test_optimizer_buffer(optimizer, buffer):
    model = load(VIT)
    moments = {m.name: m for m in training_moments(model, memory_kinds(model, "train", optimizer))}
    step = moments["optimizer step"].parts
    assert step.get(Category.OPT_BUFFER, 0) == buffer * step[Category.WEIGHTS]


def test_master_weights_buffer_is_fp32():
    model = load(VIT)
    kinds = {k.name: k for k in memory_kinds(model, "train", "adamw", master=True)}
    assert kinds["optimizer-step buffer"].bytes == 2 * kinds["gradients"].bytes  # fp32 copy of bf16 params
    assert kinds["optimizer-step buffer"].transient and not kinds["gradients"].transient
