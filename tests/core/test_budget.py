"""costspec.core.budget: small specs that would run for minutes or grow without bound (expansions, chains of
derived dims, block fan-outs, per-layer rows) answer, or exit 2 with a clear message, within 5 s of CPU and
1 GB: a real subprocess, its CPU time and peak RSS measured (tests.common.bounded)."""
from __future__ import annotations

import pytest

import costspec
from costspec.core import budget
from costspec.core.errors import CostspecError
from tests.common import ROOT, bounded

BAD = ROOT / "tests" / "bad_specs"


EXPAND = """costspec: 1
name: expand_bomb
dims:
  B: 2
  a: 3
  b: 5
  c: 7
  d: 11
  X: "(a + b + c + d + B)**8"
input: [B, X]
layers:
  - linear: {out: X}
"""


def test_formula_expand_of_a_degree_8_dim_squared_is_refused_fast(tmp_path):
    spec = tmp_path / "expand.yaml"
    spec.write_text(EXPAND)
    code, out, err = bounded("formula", spec, "--expand")
    # 2*B*X*X written out: (5 terms)**16 has C(20, 16) = 4,845 terms before collection
    assert code == 2 and "more than 256 terms" in err and "4,845" in err and "drop --expand" in err
    code, out, _ = bounded("formula", spec)  # in the symbol X it is small: 2*B*X**2
    assert code == 0 and "2*B*X**2" in out


def _chain(n_dims: int, n_layers: int) -> str:
    lines = ["costspec: 1", "name: chain", "dims:", "  B: 2", "  D0: 8"]
    lines += [f"  D{i}: D{i - 1} + 1" for i in range(1, n_dims)]
    lines += ["input: [B, D0]", "layers:"] + [f"  - linear: {{out: D{(7 * i) % n_dims}}}" for i in range(n_layers)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("n_dims, n_layers, message", [
    (5000, 1, "this spec defines 5,001 dims; the limit is 256"),  # B + 5,000 chained; was 63 s
    (1000, 500, "this spec defines 1,001 dims; the limit is 256"),  # was > 300 s
    (200, 500, "this spec defines 199 derived dims; the limit is 64"),
])
def test_check_with_thousands_of_derived_dims_is_refused_fast(tmp_path, n_dims, n_layers, message):
    spec = tmp_path / "chain.yaml"
    spec.write_text(_chain(n_dims, n_layers))
    code, out, err = bounded("check", spec)
    assert code == 2 and message in out + err


def test_sixty_derived_dims_and_500_layers_are_fast(tmp_path):
    spec = tmp_path / "chain.yaml"
    spec.write_text(_chain(61, 500))  # 60 derived dims (under the limit), every size rewritten in them
    code, out, _ = bounded("check", spec)
    assert code == 0 and out.strip().endswith("ok")


@pytest.mark.parametrize("command", ["formula", "latex"])
def test_per_layer_formulas_of_a_block_fan_out_are_refused_fast(command):
    # 745 bytes; b14 = 2 x b13 = ... = 2**14 = 16,384 linear layers (was 154 s)
    code, out, err = bounded(command, BAD / "blocks_fanout.yaml", "--per-layer")
    assert code == 2 and out == "" and "more than 8,192 op layers" in err


def _fan_out(levels: int) -> str:
    lines = ["costspec: 1", "name: fan", "input: [2, 8]", "blocks:", "  b0:", "    - linear: {out: 8}"]
    for i in range(1, levels + 1):
        lines += [f"  b{i}:", f"    - block: b{i - 1}", f"    - block: b{i - 1}"]
    return "\n".join(lines + ["layers:", f"  - block: b{levels}"]) + "\n"


def test_per_layer_rows_beyond_the_budget_are_refused_and_totals_still_work(tmp_path):
    spec = tmp_path / "fan.yaml"
    spec.write_text(_fan_out(9))  # 512 linear layers, each with its parts, under 511 scopes
    rows = sum(1 for _ in costspec.load(spec).walk())
    assert rows > budget.MAX_FORMULA_ROWS
    code, _, err = bounded("formula", spec, "--per-layer")
    assert code == 2 and f"this spec needs {rows:,} per-layer formulas; the limit is 1,000" in err
    code, out, _ = bounded("formula", spec)
    assert code == 0 and "TC FLOPs    = 131072" in out  # 512 x 2*2*8*8 = 131,072


def test_op_instances_are_counted_on_the_document():
    data = {"blocks": {"b0": [{"linear": {}}], "b1": [{"block": "b0"}, {"residual": [{"block": "b0"}]}]},
            "layers": [{"repeat": 5, "body": "b1", "at": [{"indices": [1]}]}, {"block": "b1"}]}
    # b1 = 1 + (1 + add) = 3 ops; the repeat builds its body for the variant and the others: 2 x 3; then b1: 3
    assert budget.count_op_instances(data) == 9


def test_real_specs_are_far_inside_every_budget():
    from costspec.analysis.formula import choose_symbols

    for path in sorted((ROOT / "specs").glob("*.yaml")):
        model = costspec.load(path)
        # 20x headroom: MobileNetV2 writes its 17 inverted residual blocks out (118 op instances)
        assert budget.count_op_instances(model.doc.data) < budget.MAX_OP_INSTANCES // 20
        for expand in (False, True):
            symbols = choose_symbols(model, None, expand)
            cost = model.cost("train")
            assert budget.term_bound(symbols.apply(cost.tc + cost.cuda)) < budget.MAX_FORMULA_TERMS  # efficientnet_b0 train: 188 terms


def test_budget_errors_are_costspec_errors():
    with pytest.raises(CostspecError):
        budget.check_formula_rows(budget.MAX_FORMULA_ROWS + 1)
    budget.check_formula_rows(budget.MAX_FORMULA_ROWS)
