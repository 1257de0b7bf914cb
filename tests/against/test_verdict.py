"""The verdict says what a run proved: structure (matmul-class FLOPs and parameters per row) exact or not,
then the CUDA-core work equal, explained by named rules, or different (by how much, relative to the
model's CUDA-core work). Stand-in specs that must FAIL still FAIL, and say where."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from costspec.against.check import validate_against  # noqa: E402
from costspec.against.report import to_result  # noqa: E402
from costspec.against.target import Target  # noqa: E402
from costspec.core.render import render  # noqa: E402
from costspec.model import loads  # noqa: E402
from tests.against.helpers import BN_AS_LN2D  # noqa: E402


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.norm, self.act = nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()

    def forward(self, x):
        return self.act(self.norm(self.conv(x)))


class Projection(nn.Module):
    """conv3x3(x) + proj1x1(x): a residual block with a projection shortcut, 8 -> 16 channels."""

    def __init__(self):
        super().__init__()
        self.block = nn.Module()
        self.block.conv, self.block.proj = nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.Conv2d(8, 16, 1, bias=False)

    def forward(self, x):
        return self.block.conv(x) + self.block.proj(x)


class Scaled(nn.Module):
    """L blocks x + gamma * mlp(norm(x)) (CaiT's, DINOv2's layer scale)."""

    def __init__(self, c: int = 32, layers: int = 2):
        super().__init__()
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            block = nn.Module()
            block.norm = nn.LayerNorm(c)
            block.mlp = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c))
            block.gamma = nn.Parameter(torch.ones(c))
            self.blocks.append(block)

    def forward(self, x):
        for b in self.blocks:
            x = x + b.gamma * b.mlp(b.norm(x))
        return x



SHORTCUT_AS_GROUPED_CONV = """
costspec: 1
name: shortcut_as_grouped_conv
dims: {B: 2, H: 8}
precision: {dtype: fp32}
input: [B, 8, H, H]
layers:
  - sequence:
      - conv2d: {out: 16, kernel: 3, padding: 1, bias: false}
        name: conv
      # the 8 -> 16 projection shortcut imitated: as many parameters and FLOPs, on the main path
      - conv2d: {out: 16, kernel: 1, groups: 2, bias: false}
        name: proj
    name: block
"""

LAYER_SCALE = """
costspec: 1
name: layer_scale
dims: {B: 2, S: 16, C: 32, L: 2}
precision: {dtype: fp32}
input: [B, S, C]
layers:
  - repeat: L
    name: blocks
    body:
      - residual:
          - layernorm: {}
            name: norm
          - mlp: {hidden: 4*C, fn: gelu}
            name: mlp
          - layer_scale: {}
            name: gamma
"""
NO_LAYER_SCALE = LAYER_SCALE.replace("          - layer_scale: {}\n            name: gamma\n", "")


def check(spec: str, module: nn.Module, shape, pass_: str):
    model = loads(spec)
    target = Target("tests:stand-in", module.to("meta"), (torch.randn(*shape, device="meta"),))
    result = validate_against(model, model.bind(), target, pass_)
    return result, render(to_result(result))


def verdict(text: str) -> list[str]:
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("structure: "))
    return lines[at:at + 3]


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_batchnorm_written_as_layernorm2d_fails_on_its_cuda_core_work(pass_):
    result, text = check(BN_AS_LN2D, ConvBN(), (2, 3, 8, 8), pass_)
    assert not result.ok
    structure, cuda, outcome = verdict(text)
    assert structure.startswith("structure: exact --")  # the same GEMMs and 2*C parameters
    assert cuda.startswith("CUDA-core work: different -- ") and "batchnorm" in cuda and "layernorm" in cuda
    layernorm = 2 * 16 * 8 * 8  # the spec's, forward: every element of [B, C, H, W]
    assert f"differ by {2 * layernorm if pass_ == 'forward' else 4 * layernorm:,} elements" in cuda
    assert outcome.startswith("result: FAIL")


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_shortcut_imitated_by_a_grouped_conv_fails_on_the_missing_add(pass_):
    result, text = check(SHORTCUT_AS_GROUPED_CONV, Projection(), (2, 8, 8, 8), pass_)
    assert not result.ok
    structure, cuda, _ = verdict(text)
    if pass_ == "forward":  # as many parameters and FLOPs: only the add tells
        assert structure.startswith("structure: exact --")
    else:  # the imitation reads the main path, so it computes an input gradient the shortcut does not
        assert structure == "structure: differs -- matmul-class FLOPs or parameters differ in block, block.proj, total"
    assert cuda.startswith("CUDA-core work: different -- 1 kind(s) (add)")
    # the real block's add runs in the model's own forward: it shows in the total
    assert "forward: total: add: spec 0 elements, real 2,048 (+2,048)" in result.failures()
    assert "differ by 2,048 elements in total, where the spec has no CUDA-core work" in cuda


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_missing_layer_scale_fails_on_structure(pass_):
    result, text = check(NO_LAYER_SCALE, Scaled(), (2, 16, 32), pass_)
    assert not result.ok
    structure, cuda, _ = verdict(text)
    assert structure.startswith("structure: differs -- ") and "blocks" in structure
    assert cuda.startswith("CUDA-core work: different -- ") and "mul" in cuda


@pytest.mark.parametrize("pass_", ["forward", "train"])
def test_the_right_spec_passes_and_lists_no_differences(pass_):
    result, text = check(LAYER_SCALE, Scaled(), (2, 16, 32), pass_)
    assert result.ok, "\n".join(result.failures())
    structure, cuda, outcome = verdict(text)
    assert structure.startswith("structure: exact -- matmul-class FLOPs and parameters agree in all")
    assert cuda.startswith("CUDA-core work: equal") or cuda.startswith("CUDA-core work: explained by named rules")
    assert outcome == "result: PASS"
    assert "differences" not in text and "FAIL" not in text
    meta = to_result(result).meta["verdict"]
    assert meta["structure"] == "exact" and meta["cuda_core_unexplained"] == 0


def test_no_negative_count_where_a_rule_takes_more_than_ran():
    """An `extra:` rule whose work the row does not run, in a row that differs anyway: the rule is left
    out there (the largest set of rules that takes no more than ran), never a negative real count."""
    spec = NO_LAYER_SCALE.replace("layers:\n", 'ignore:\n  - module: "blocks.*.mlp"\n    extra: {add: "100000"}\n'
                                  "    reason: an amount this module does not run\nlayers:\n", 1)
    result, text = check(spec, Scaled(), (2, 16, 32), "forward")
    assert not result.ok
    for row in result.phases["forward"].rows:
        assert not row.negative(), row.name
    assert "real -" not in text and "(-100,000)" not in text
    assert "ignore: blocks.*.mlp" in text.split("rules the real model does not show:")[1]
