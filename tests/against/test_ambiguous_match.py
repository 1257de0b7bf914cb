"""A layer without `source:` matched by parameter count where another module has as many: ambiguous,
never a PASS (DeepSeek's kv_a_proj_with_mqa and q_b_proj both have 73,728 parameters, and two
linear layers of as many parameters run as many FLOPs: the counts cannot tell them apart)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from costspec.against.check import validate_against  # noqa: E402
from costspec.against.report import to_result  # noqa: E402
from costspec.against.target import Target  # noqa: E402
from costspec.core.render import render  # noqa: E402
from costspec.model import loads  # noqa: E402


class Lowrank(torch.nn.Module):
    """Multi-head latent attention's projections reduced to their point: q_b(q_a(x)) and kv_a(x), concatenated;
    q_b and kv_a are bias-free linears of equal parameter count (16*72 = 64*18 = 1,152)."""

    def __init__(self):
        super().__init__()
        self.q_a_proj = torch.nn.Linear(64, 16, bias=False)
        self.q_b_proj = torch.nn.Linear(16, 72, bias=False)
        self.kv_a_proj_with_mqa = torch.nn.Linear(64, 18, bias=False)

    def forward(self, x):
        q = self.q_b_proj(self.q_a_proj(x))
        kv = self.kv_a_proj_with_mqa(x)
        return torch.cat([q, kv], dim=-1)


SPEC = """
costspec: 1
name: lowrank
dims: {B: 2, S: 8}
precision: {dtype: fp32}
input: [B, S, 64]
layers:
  - parallel:
      join: concat
      axis: -1
      branches:
        - - linear: {out: 16, bias: false}
            name: q_a_proj
          - linear: {out: 72, bias: false}
            name: {q_b}
        - - linear: {out: 18, bias: false}
            name: {kv_a}
"""


def run(q_b: str, kv_a: str):
    model = loads(SPEC.replace("{q_b}", q_b).replace("{kv_a}", kv_a))
    values = model.bind()
    target = Target("tests:lowrank", Lowrank().to("meta"), (torch.randn(2, 8, 64, device="meta"),))
    return validate_against(model, values, target, "forward")


def test_equal_parameter_counts_are_ambiguous_never_pass():
    result = run("up", "down")  # names that say nothing about the real modules
    assert not result.ok
    ambiguous = [f for f in result.failures() if "ambiguous" in f]
    assert len(ambiguous) == 1 and ambiguous[0].startswith("up: matched by parameter count to q_b_proj")
    assert "kv_a_proj_with_mqa has as many parameters" in ambiguous[0]
    rows = {r.name: r for r in result.phases["forward"].rows}
    assert rows["up"].status == "ambiguous"
    text = render(to_result(result))
    assert "structure: ambiguous" in text and "result: PASS" not in text


def test_the_layer_name_or_a_source_decides():
    named = run("q_b_proj", "kv_a_proj_with_mqa")  # named as the real modules: the name picks the module
    assert named.ok, "\n".join(named.failures())
    assert named.rowmap.matches["kv_a_proj_with_mqa"].paths == ["kv_a_proj_with_mqa"]
    sourced = run("up\n            source: q_b_proj", "down\n            source: kv_a_proj_with_mqa")
    assert sourced.ok, "\n".join(sourced.failures())
