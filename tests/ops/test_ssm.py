"""The state-space ops' own behaviour: bad layers refused with the layer's location and what was expected,
the state a decoding step keeps (elements and bytes), the scan's quadratic backward term as the notes and
docs/conventions.md state it, and the fused vs the torch path's bytes."""
from __future__ import annotations

import pytest
import sympy

import costspec
from costspec.core.errors import SpecError
from costspec.core.vocab import Fusion, Phase

HEAD = "costspec: 1\nname: ssm\n"


def spec(layer: str, dims: str = "{B: 2, S: 8, C: 32}", shape: str = "[B, S, C]") -> str:
    return f"{HEAD}dims: {dims}\ninput: {shape}\nlayers:\n  - {layer}\n"


@pytest.mark.parametrize("layer,shape,where,message", [
    ("mamba: {}", "[B, C]", "$.layers[0]", "mamba needs tokens [B, S, C], but its input has shape [B, C]"),
    ("mamba2: {d_state: 8, head_dim: 16, heads: 3}", "[B, S, C]", "$.layers[0].mamba2.heads",
     "heads 3 x head_dim 16 is not the inner width expand*C = 64"),
    ("mamba2: {d_state: 8, head_dim: 12}", "[B, S, C]", "$.layers[0].mamba2.head_dim",
     "inner width expand*C = 64 is not a multiple of head_dim 12"),
    ("mamba2: {d_state: 8, head_dim: 16, groups: 3}", "[B, S, C]", "$.layers[0].mamba2.groups",
     "heads 4 not divisible by groups 3"),
    ("mamba2: {d_state: 1, head_dim: 16}", "[B, S, C]", "$.layers[0].mamba2.d_state",
     "d_state 1: the SSD einsums contract over d_state and chunk, and torch runs a contraction of size 1"),
])
def test_bad_layers_are_refused_where_they_are_written(layer, shape, where, message):
    with pytest.raises(SpecError) as err:
        costspec.loads(spec(layer, shape=shape))
    assert where in str(err.value) and message in str(err.value)


def test_a_chunk_of_one_given_as_a_dim_is_refused_when_bound():
    model = costspec.loads(spec("mamba2: {d_state: 8, head_dim: 16, chunk: Q}", "{B: 2, S: 8, C: 32, Q: 4}"))
    assert model.problems(model.bind()) == []
    with pytest.raises(SpecError, match="chunk 1: the SSD einsums"):
        model.bind(sets={"Q": 1})


def _op(text: str):
    model = costspec.loads(text)
    node = next(model.op_nodes())
    return model, node


def test_the_state_note_gives_elements_and_bytes_at_the_layer_dtype():
    # Mamba-130M's layer: E = 1536, N = 16, K = 4; Mamba-2 with E = 64, 4 heads of 16, G = 1, N = 8, K = 4
    _, mamba = _op(spec("mamba: {}", "{B: 1, S: 8, C: 768}").replace("dims:", "precision: {dtype: bf16}\ndims:"))
    note = mamba.op.notes(mamba.call)[1]
    assert "ssm state B*E*N = 32*B*C elements, conv state B*E*K = 8*B*C elements" in note
    assert note.endswith("; 80*B*C bytes at bf16")
    assert 80 * 768 == 1536 * 16 * 2 + 1536 * 4 * 2  # 61,440 bytes per layer at B = 1 (docs/conventions.md)
    _, mamba2 = _op(spec("mamba2: {d_state: 8, head_dim: 16}", "{B: 1, S: 8, C: 32}"))
    note = mamba2.op.notes(mamba2.call)[1]  # heads = 2*C/16: the state is 2*C*8 per sample
    assert "ssm state B*H*P*N = 16*B*C elements, conv state B*(E+2*G*N)*K = 4*B*(2*C + 16) elements" in note


def test_the_scan_backward_has_the_quadratic_adds_of_the_python_loop():
    """2*(S-1)*B*E*S*N + (S-1)*B*S*N adds beyond the linear ones: the difference of the backward's adds at
    S and the same layer's linear part is that polynomial."""
    model, node = _op(spec("mamba: {d_state: N, dt_rank: 2}", "{B: 2, S: 8, C: 4, N: 3}"))
    b, s, c, n = (model.dims.symbols[k] for k in ("B", "S", "C", "N"))
    scan = next(p for p in node.op.backward(node.call, True) if p.name == "scan")
    e = 2 * c
    quadratic = 2 * (s - 1) * b * e * s * n + (s - 1) * b * s * n
    linear = (s - 1) * b * e * n + 2 * b * e * s  # dh between steps; dt's two gradients and x's two
    assert sympy.expand(scan.work.pointwise["add"] - quadratic - linear) == 0
    assert sympy.expand(scan.work.matmul["scan"] - 4 * b * e * n * s) == 0  # two bmm per step


@pytest.mark.parametrize("layer", ["mamba: {}", "mamba2: {d_state: 8, head_dim: 16, chunk: 4}"])
def test_the_torch_path_moves_more_bytes_than_the_fused_kernels(layer):
    model, node = _op(spec(layer, "{B: 2, S: 8, C: 32}"))
    values = model.bind()
    for phase in (Phase.FORWARD, Phase.BACKWARD):
        fused = {t.part: t for t in node.op.traffic(node.call, phase, True, Fusion.DEFAULT)}
        torch_path = {t.part: t for t in node.op.traffic(node.call, phase, True, Fusion.NONE)}
        assert fused.keys() == torch_path.keys() >= {"in_proj", "conv1d", "scan", "out_proj"}
        for part in ("conv1d", "scan"):
            assert int(torch_path[part].reads.xreplace(values)) > int(fused[part].reads.xreplace(values)) > 0
        assert torch_path["out_proj"] == fused["out_proj"]


def test_rows_are_transformers_module_names():
    model = costspec.loads(spec("mamba: {}") + "  - mamba2: {d_state: 8, head_dim: 16}\n")
    rows = [n.name for n, *_ in model.walk()]
    assert [r.rpartition(".")[2] for r in rows[1:7]] == ["in_proj", "conv1d", "x_proj", "dt_proj", "scan", "out_proj"]
    assert [r.rpartition(".")[2] for r in rows[8:]] == ["in_proj", "conv1d", "scan", "norm", "out_proj"]
