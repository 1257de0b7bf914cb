"""costspec.ncu.nvtx: per-layer NVTX ranges, forward and backward, checked on CPU with a recorder."""
from __future__ import annotations

import textwrap

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import costspec  # noqa: E402
from costspec.ncu.compare import compare  # noqa: E402
from costspec.ncu.inputs import load_measured  # noqa: E402
from costspec.ncu.nvtx import (  # noqa: E402
    BACKWARD_RANGE,
    FORWARD_RANGE,
    LOSS_RANGE,
    LayerHooks,
    ListRecorder,
    NvtxRanges,
    layer_paths,
    step,
)
from costspec.runtime.torch_build import build_module  # noqa: E402
from costspec.tree.walk import row_name  # noqa: E402
from tests.common import ROOT  # noqa: E402
from tests.ncu.synth_ncu import FFMA, raw_csv  # noqa: E402

TOY = ROOT / "specs" / "toy_mlp.yaml"
PHASES = {FORWARD_RANGE, BACKWARD_RANGE, LOSS_RANGE}
TINY_VIT = textwrap.dedent("""\
    costspec: 1
    name: tiny_vit
    dims: {B: 2, img: 8, patch: 4, C: 8, heads: 2, L: 2, S: (img // patch)**2 + 1}
    input: [B, 3, img, img]
    blocks:
      encoder_block:
        - residual:
            - layernorm: {}
            - attention: {heads: heads}
        - residual:
            - layernorm: {}
            - mlp: {hidden: 4*C, fn: gelu}
    layers:
      - patch_embed: {patch: patch, dim: C, cls_token: true, pos_embed: true}
      - repeat: L
        name: blocks
        body: encoder_block
      - layernorm: {}
    """)


class Spy(TorchDispatchMode):
    """Records (aten op, NVTX stack at that moment, the op's args) for every executed op."""

    def __init__(self, recorder: ListRecorder):
        super().__init__()
        self.recorder, self.seen = recorder, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.seen.append((str(func._overloadpacket), tuple(self.recorder.stack), args))
        return out


def run(model, values, train=True, device="cpu"):
    torch.manual_seed(0)
    with torch.device(device):
        module, make_input = build_module(model, values)
    recorder = ListRecorder()
    ranges = NvtxRanges(layer_paths(model, module), recorder)
    spy = Spy(recorder)
    x = make_input(device)
    with LayerHooks(model, module, ranges), spy:
        step(module, x, train, ranges.region)
    return module, recorder, spy.seen


def _layers(stack):
    return [n for n in stack if n not in PHASES]


def assert_nested_and_balanced(recorder: ListRecorder, seen, root: str):
    """Pops match pushes, and at every executed op the stack is: phase ranges, then layer ranges each
    inside the previous one. (Between two hook events on the same tensor, with no op in between,
    the stack may briefly hold a layer that is about to close next to one that just opened.)"""
    assert recorder.stack == []
    stack: list[str] = []
    for event, name in recorder.events:
        if event == "push":
            stack.append(name)
        else:
            assert stack.pop() == name
    for _, at_op, _ in seen:
        layers = _layers(at_op)
        assert all(n in PHASES for n in at_op[: len(at_op) - len(layers)])  # phase ranges at the bottom
        assert not layers or layers[0] == root or at_op[0] == LOSS_RANGE
        for outer, inner in zip(layers, layers[1:]):  # each layer range inside its parent
            assert outer == root or inner.startswith(outer + "."), at_op


@pytest.fixture(scope="module")
def toy():
    model = costspec.load(TOY)
    return model, model.bind(sets={"M": 4, "D": 8, "N": 3})


def test_range_names_are_the_layer_module_paths(toy):
    model, values = toy
    with torch.device("meta"):
        module, _ = build_module(model, values)
    names = layer_paths(model, module)
    assert names[""] == "toy_mlp"
    assert "layers" not in names  # a ModuleList never runs
    assert {p for p in names if p} == {f"layers.{i}{s}" for i in range(3) for s in ("", ".fc", ".act")}
    assert all(names[p] == p for p in names if p)
    assert {row_name(model.root, p) for p in names} == {"", "layers", "layers.fc", "layers.act"}


def test_forward_and_backward_ranges_nest_and_balance(toy):
    model, values = toy
    _, recorder, seen = run(model, values)
    assert_nested_and_balanced(recorder, seen, "toy_mlp")
    ops = {(op, stack[0], stack[-1]) for op, stack, _ in seen if stack}
    # forward: each layer's GEMM and activation inside its own range, under the phase and the model
    for i in range(3):
        assert ("aten.addmm", FORWARD_RANGE, f"layers.{i}.fc") in ops
        assert ("aten.sigmoid", FORWARD_RANGE, f"layers.{i}.act") in ops
        assert ("aten.sigmoid_backward", BACKWARD_RANGE, f"layers.{i}.act") in ops
        assert ("aten.sum", BACKWARD_RANGE, f"layers.{i}.fc") in ops  # the bias gradient
    full = [stack for op, stack, _ in seen if op == "aten.addmm"]
    assert full[0] == (FORWARD_RANGE, "toy_mlp", "layers.0", "layers.0.fc")
    # backward: dW and dX in every fc; layer 0's input needs no gradient, so only its dW
    mm = [stack[-1] for op, stack, _ in seen if op == "aten.mm"]
    assert mm == ["layers.2.fc"] * 2 + ["layers.1.fc"] * 2 + ["layers.0.fc"]
    assert [stack for op, stack, _ in seen if op == "aten.sum"][0] == (LOSS_RANGE,)
    # nothing of the backward runs outside a range
    assert all(stack for op, stack, _ in seen if op not in ("aten.randn",))


def test_forward_only_has_no_backward_ranges(toy):
    model, values = toy
    _, recorder, seen = run(model, values, train=False)
    assert_nested_and_balanced(recorder, seen, "toy_mlp")
    assert all(stack[0] == FORWARD_RANGE for op, stack, _ in seen if stack)
    assert not any(BACKWARD_RANGE == name for _, name in recorder.events)


def test_meta_device(toy):
    model, values = toy
    _, recorder, seen = run(model, values, device="meta")
    assert_nested_and_balanced(recorder, seen, "toy_mlp")
    assert [stack[-1] for op, stack, _ in seen if op == "aten.mm"] == ["layers.2.fc"] * 2 + ["layers.1.fc"] * 2 + [
        "layers.0.fc"]


def test_residuals_parts_and_attention():
    model = costspec.loads(TINY_VIT)
    _, recorder, seen = run(model, model.bind())
    assert_nested_and_balanced(recorder, seen, "tiny_vit")
    inner = {}
    for op, stack, _ in seen:
        if stack and stack[0] != LOSS_RANGE:
            inner.setdefault((stack[0], op), set()).add(stack[-1])
    for phase in (FORWARD_RANGE, BACKWARD_RANGE):
        linear = "aten.addmm" if phase == FORWARD_RANGE else "aten.mm"
        assert inner[(phase, linear)] == {f"blocks.{i}.{p}" for i in range(2)
                                          for p in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")}
        assert {n for n in inner[(phase, "aten.add")] if n.startswith("blocks")} == {
            f"blocks.{i}.{a}" for i in range(2) for a in ("add1", "add2")}  # residual add / gradient sum at the fork
    conv = [stack[-1] for op, stack, _ in seen if op.startswith("aten.convolution")]
    assert conv == ["patch_embed.proj", "patch_embed.proj"]
    sdpa = {stack[-1] for op, stack, _ in seen if "scaled_dot_product" in op}
    assert sdpa == {"blocks.0.attn", "blocks.1.attn"}  # the SDPA part runs in the attention module itself


def test_out_of_order_events_still_nest():
    recorder = ListRecorder()
    ranges = NvtxRanges({"": "m", "a": "a", "a.b": "a.b", "a.c": "a.c"}, recorder)
    with ranges.region(BACKWARD_RANGE):
        ranges.enter("a.b", "backward")  # autograd may enter the child before its parent
        ranges.enter("a", "backward")
        ranges.enter("", "backward")
        assert recorder.stack == [BACKWARD_RANGE, "m", "a", "a.b"]
        ranges.enter("a.c", "backward")  # a sibling entered before the other one left
        ranges.exit("a.b", "backward")
        assert recorder.stack == [BACKWARD_RANGE, "m", "a", "a.c"]
        ranges.exit("x", "backward")  # never entered: ignored
        ranges.end_backward()
        assert recorder.stack == [BACKWARD_RANGE]
    assert recorder.stack == []


def _mm_flops(op, args) -> int:
    a, b = (args[1], args[2]) if op == "aten.addmm" else (args[0], args[1])
    return a.shape[0] * a.shape[1] * b.shape[1]  # multiply-adds


def test_ranges_attribute_back_to_the_analytic_rows(toy, tmp_path):
    """NVTX stacks -> (synthetic) ncu CSV -> compare: each GEMM lands in its row, per phase."""
    model, values = toy
    _, _, seen = run(model, values)
    kernels = [{"kernel": "ampere_sgemm_128x64_tn", "stack": stack, "metrics": {FFMA: _mm_flops(op, args)}}
               for op, stack, args in seen if op in ("aten.addmm", "aten.mm")]
    csv = tmp_path / "toy.csv"
    csv.write_text(raw_csv(kernels, cc="8.0"))
    result = compare(load_measured(costspec.load(str(TOY)), [str(csv)], sets={"M": 4, "D": 8, "N": 3}, pass_="train"))
    for phase, rows in result.rows.items():
        fc = next(r for r in rows if r.name == "layers.fc")
        analytic = model.report("forward" if phase == "forward" else "backward", values)
        gemm = next(r for r in analytic.rows if r.name == "layers.fc").cuda_flops - 4 * 8 * 3  # minus bias add / grad
        assert fc.cuda_measured == gemm
        assert fc.kernels == (3 if phase == "forward" else 5)
