"""Adafactor's and 8-bit Adam's state, sized per parameter tensor: hand-computed numbers on a small spec,
property tests over shapes, and adafactor against transformers' Adafactor stepping the generated module."""
from __future__ import annotations

import json
from math import ceil, prod

import pytest
from hypothesis import given
from hypothesis import strategies as st

from costspec.analysis.memory import memory_kinds, memory_result
from costspec.analysis.memory_optim import ADAM8BIT_QMAPS, ParamTensor, adafactor_bytes, adam8bit_bytes, state_bytes
from costspec.core.errors import UsageError
from costspec.model import load
from tests.common import ROOT

LLAMA = ROOT / "specs/llama_1b.yaml"

shapes = st.lists(st.integers(1, 3000), min_size=1, max_size=4).map(tuple)


@given(shapes)
def test_adafactor_factors_matrices_and_keeps_vectors(shape):
    t = ParamTensor("w", shape)
    if len(shape) == 1:
        assert adafactor_bytes(t) == 4 * (shape[0] + 1)
    else:
        rows, cols = prod(shape[:-1]), prod(shape[:-2]) * shape[-1]
        assert adafactor_bytes(t) == 4 * (rows + cols + 1)
        assert adafactor_bytes(t) <= 4 * (prod(shape) + prod(shape[:-1]) + 1)  # never more than the full moment + rows


@given(shapes)
def test_adam8bit_is_about_a_quarter_of_fp32_adam(shape):
    t = ParamTensor("w", shape)
    n = prod(shape)
    got = adam8bit_bytes(t)
    if n < 4096:
        assert got == 8 * n
    else:
        assert got == 2 * n + 8 * ceil(n / 256)
        assert 2 * n < got <= 2 * n + 8 * (n // 256 + 1) and got < 8 * n / 3.9


def test_frozen_tensors_have_no_state_and_the_maps_come_once():
    big, small = ParamTensor("w", (64, 128)), ParamTensor("b", (64,))
    assert state_bytes("adam8bit", [big, small]) == 2 * 8192 + 8 * 32 + 8 * 64 + ADAM8BIT_QMAPS
    assert state_bytes("adam8bit", [small]) == 8 * 64  # nothing quantised: no maps
    assert state_bytes("adafactor", [big, ParamTensor("frozen", (64, 128), trainable=False)]) == 4 * (64 + 128 + 1)


def toy_tensors(model, values):
    pytest.importorskip("torch")
    from costspec.runtime.param_tensors import parameter_tensors

    return parameter_tensors(model, values)


def test_llama_by_hand():
    """llama_1b with two layers: every matrix by its (out, in) rows and columns, the norms' vectors in full."""
    model = load(LLAMA)
    values = model.bind(1, {"L": 2, "S": 128})
    d = {k: int(values[v.symbol]) for k, v in model.dims.dims.items()}
    c, f, kv, v, n = d["C"], d["F"], d["C"] * d["KV"] // d["heads"], d["V"], d["L"]
    matrices = [(v, c)] + n * [(c, c), (kv, c), (kv, c), (c, c), (f, c), (f, c), (c, f)]
    vectors = (2 * n + 1) * [c]
    tensors = toy_tensors(model, values)
    assert sorted(t.shape for t in tensors) == sorted(matrices + [(x,) for x in vectors])
    adafactor = sum(4 * (r + k + 1) for r, k in matrices) + sum(4 * (x + 1) for x in vectors)
    adam8 = sum(2 * r * k + 8 * ceil(r * k / 256) for r, k in matrices) + sum(8 * x for x in vectors) + 2048
    for name, expected in (("adafactor", adafactor), ("adam8bit", adam8)):
        kinds = {k.name: k for k in memory_kinds(model, "train", name, tensors=tensors)}
        assert int(kinds[f"optimizer state ({name})"].bytes) == expected
        assert "optimizer-step buffer" not in kinds  # their step's buffers are not modelled
        memory_result(model, list(kinds.values()), values, "train")  # the peak evaluates


def test_adafactor_equals_transformers_state():
    """transformers' Adafactor (defaults) steps the generated module of a narrow llama (real tensors: its
    learning rate reads tensor values, which FakeTensorMode cannot): its state tensors' bytes equal the
    formula."""
    torch = pytest.importorskip("torch")
    optimization = pytest.importorskip("transformers.optimization")
    from costspec.runtime.torch_build import build_module

    model = load(LLAMA)
    values = model.bind(1, {"L": 1, "S": 8, "C": 64, "F": 96, "V": 128, "heads": 4, "KV": 2})
    module, _ = build_module(model, values)
    for p in module.parameters():
        p.grad = torch.ones_like(p)
    opt = optimization.Adafactor(module.parameters())
    opt.step()
    measured = sum(v.untyped_storage().nbytes() for s in opt.state.values() for v in s.values()
                   if isinstance(v, torch.Tensor))
    assert measured == state_bytes("adafactor", toy_tensors(model, values))
    assert not any("exp_avg" in s for s in opt.state.values())  # beta1=None: no first moment


def test_shaped_optimizers_need_the_tensors():
    with pytest.raises(UsageError, match="parameter tensor"):
        memory_kinds(load(LLAMA), "train", "adafactor")


def test_cli(cli):
    out = cli("memory", LLAMA, "--pass", "train", "--optimizer", "adam8bit", "--set", "L=1", "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["kinds"]["optimizer state (adam8bit)"]["bytes"] > 0 and "optimizer-step buffer" not in data["kinds"]
