"""`costspec validate`: the zoo validates with 0 relative error; every reconciliation is named
and exact; a wrong formula, an unknown aten op and a mismatch exit code are caught."""
from __future__ import annotations

import json
import textwrap

import pytest

import costspec
from costspec.ops.work import gemm

torch = pytest.importorskip("torch")

from costspec.runtime.validate import check, pointwise_diff, render_json, render_table, validate  # noqa: E402
from tests.common import SPECS, invoke  # noqa: E402

TINY_VIT = textwrap.dedent("""\
    costspec: 1
    name: tiny_vit
    dims: {B: 2, img: 8, patch: 4, C: 8, heads: 2, L: 2, S: (img // patch)**2 + 1}
    input: [B, 3, img, img]
    blocks:
      encoder_block:
        - residual:
            - layernorm: {}
            - attention: {heads: heads, backend: BACKEND}
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


def tiny(backend="flash"):
    return costspec.loads(TINY_VIT.replace("BACKEND", backend))


def run(model, pass_="train", device="meta", batch=None, rtol=0.0):
    return validate(model, model.bind(batch), pass_, device, rtol)


# Specs whose module runs a python loop over the sequence (Mamba's scan: S steps per layer, forward and backward),
# validated at a shorter S; tests/against/test_ssm.py checks them against transformers. DeepSeek-V3's module
# loops over its 256 experts in each of 58 MoE layers: validated with one dense and two MoE layers (every
# width full size)
SHORTER = {"mamba_130m": {"S": 16}, "deepseek_v3": {"Ld": 1, "Lm": 2}}


@pytest.mark.parametrize("pass_", ["forward", "train"])
@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_zoo_validates_exactly(spec, pass_):
    model = costspec.load(spec)
    result = validate(model, model.bind(2 if "B" in model.dims.dims else None, SHORTER.get(spec.stem)), pass_, "meta")
    assert result.ok, render_table(result)
    for phase, rows in result.rows.items():
        assert all(r.rel_diff == 0 for r in rows)
        assert result.total(phase).matmul_analytic == result.total(phase).matmul_reconciled > 0


def test_toy_backward_gemm_flops():
    # (N - 1) * 4*D*D*M + 2*D*D*M: no dX for the first layer (its input needs no grad)
    expected = (10 - 1) * 4 * 1024 * 1024 * 128 + 2 * 1024 * 1024 * 128
    assert expected == 5_100_273_664
    model = costspec.load("specs/toy_mlp.yaml")
    cost = model.cost("backward")
    assert int(sum(cost.matmul.values()).xreplace(model.bind())) == expected
    # eval: fp32, so the GEMMs are CUDA-core FLOPs, next to 10 * M*D * (sigmoid_backward 3 + bias_grad 1)
    out = invoke("eval", "specs/toy_mlp.yaml", "--pass", "backward", "--format", "json")
    assert out.returncode == 0, out.stderr
    totals = json.loads(out.stdout)["totals"]
    assert totals["tc_flops"] == 0 and totals["cuda_flops"] == expected + 10 * 128 * 1024 * (3 + 1)
    # and FlopCounterMode agrees
    result = run(model, "train")
    assert result.total("backward").matmul_measured == expected and result.ok


def test_flash_backend_reconciled_by_name_on_meta():
    model = tiny("flash")
    result = run(model)
    assert result.ok, render_table(result)
    rules = {(a.rule, a.row, a.phase): a for a in result.reconciliations}
    b, h, s, d, layers = 2, 2, 5, 4, 2
    backward = rules[("sdpa-math-decomposition", "blocks.attn.sdpa", "backward")]
    assert backward.matmul == -2 * b * h * s * s * d * layers  # math runs 8*B*h*S^2*d, flash models 10
    assert backward.pointwise == {"scale": (b * h * 2 * s * d - b * h * s * s) * layers}
    assert result.total("backward").matmul_measured == result.total("backward").matmul_analytic + backward.matmul
    assert "[sdpa-math-decomposition]" in render_table(result)


def test_math_backend_matches_without_reconciliation():
    result = run(tiny("math"))
    assert result.ok, render_table(result)
    assert result.reconciliations == []
    assert all(r.matmul_measured == r.matmul_analytic for rows in result.rows.values() for r in rows)


def test_cpu_sdpa_not_counted_is_compensated_by_name():
    result = run(tiny("flash"), device="cpu")
    assert result.ok, render_table(result)
    rules = {(a.rule, a.phase): a for a in result.reconciliations if a.row == "blocks.attn.sdpa"}
    b, h, s, d, layers = 2, 2, 5, 4, 2
    assert rules[("sdpa-not-counted", "forward")].matmul == -2 * b * h * s * s * d * 2 * layers
    assert rules[("sdpa-not-counted", "backward")].matmul == -10 * b * h * s * s * d * layers
    text = render_table(result)
    assert "SDPA not counted by FlopCounterMode on cpu" in text and "2*B*h*S^2*d*2" in text


def test_grouped_conv_and_batch_one_rules_are_listed():
    text = textwrap.dedent("""\
        costspec: 1
        name: convs
        dims: {B: 1}
        input: [B, 4, 6, 6]
        layers:
          - conv2d: {out: 4, kernel: 1}
          - conv2d: {out: 8, kernel: 3, padding: 1, groups: 2}
          - flatten: {start: 2}
          - transpose: {axis0: 1, axis1: 2}
          - reshape: {shape: [B, 6, 6, 8]}
          - transpose: {axis0: 1, axis1: 3}
          - patch_embed: {patch: 2, dim: 4, cls_token: true, pos_embed: true}
        """)
    result = run(costspec.loads(text))
    assert result.ok, render_table(result)
    by_rule = {a.rule: a for a in result.reconciliations}
    f = 2 * 1 * 8 * 6 * 6 * (4 // 2) * 3 * 3  # F of the grouped conv
    assert by_rule["conv-grouped-weight-grad"].matmul == (2 - 1) * f  # FlopCounterMode counts g*F for dW
    assert by_rule["broadcast-grad-batch-1"].pointwise == {"bias_grad": -(4 + 10 * 4)}  # cls: dim, pos: S*dim


def test_wrong_formula_is_caught(monkeypatch):
    from costspec.ops.linear import Linear

    forward = Linear.forward

    def off_by_two(self, call):
        parts = forward(self, call)
        return [type(p)(p.name, p.work + gemm(1, 1, 1), p.params, p.own) for p in parts]  # +2 FLOPs

    monkeypatch.setattr(Linear, "forward", off_by_two)
    model = costspec.load("specs/toy_mlp.yaml")
    result = run(model, "forward")
    assert not result.ok
    fc = next(r for r in result.rows["forward"] if r.name == "layers.fc")
    assert fc.matmul_analytic == fc.matmul_measured + 2 * 10 and fc.matmul == "FAIL"
    with pytest.raises(costspec.core.errors.MismatchError):
        check(result)
    assert run(model, "forward", rtol=1e-6).ok  # within a relative tolerance
    from costspec.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["validate", "specs/toy_mlp.yaml"])
    assert exc.value.code == 1


def test_unknown_aten_op_is_listed_not_dropped(monkeypatch):
    from costspec.ops.pointwise import ActivationOp

    class Cos(torch.nn.Module):
        def forward(self, x):
            return torch.cos(x)

    monkeypatch.setattr(ActivationOp, "build", lambda self, call, ev: Cos())
    model = costspec.loads("costspec: 1\nname: u\ninput: [3, 4]\nlayers:\n  - linear: {out: 4}\n"
                           "  - activation: {fn: tanh}\n")
    result = run(model, "forward")
    assert ("forward", "act", "aten.cos", 12) in result.unknown
    assert not result.ok and "aten.cos" in render_table(result)


def test_missing_residual_add_is_caught(monkeypatch):
    from costspec.nn import join as torch_modules

    monkeypatch.setattr(torch_modules.Join, "forward",
                        lambda self, x, *others, fork=0: x.view_as(x) if not others else others[0])  # forgets the add
    result = run(tiny("math"), "forward")
    assert not result.ok
    diff = {row.name: pointwise_diff(row) for row in result.rows["forward"]}
    assert diff["blocks.add1"] == [("add", 2 * 5 * 8 * 2, 0)]


@pytest.mark.slow
def test_json_and_cli(tmp_path):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY_VIT.replace("BACKEND", "flash"))
    out = invoke("validate", spec, "--pass", "train", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert set(json.loads(out.stdout)["tables"]) == {"forward", "backward"}  # the saved bytes on request
    out = invoke("validate", spec, "--pass", "train", "--saved-bytes", "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["ok"] and data["device"] == "meta"
    assert set(data["tables"]) == {"forward", "backward", "saved for backward"}
    assert {r["rule"] for r in data["reconciliations"]} == {"sdpa-math-decomposition"}
    row = next(r for r in data["tables"]["forward"]["rows"] if r["name"] == "blocks.attn.qkv")
    assert row["matmul_analytic"] == row["matmul_measured"] == 2 * 2 * 5 * 8 * 24 * 2
    assert json.loads(render_json(run(tiny(), "forward")))["ok"]
