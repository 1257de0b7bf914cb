"""costspec.analysis.evaluation: evaluated costs against hand-derived closed forms."""
import pytest
import sympy

import costspec
from tests.common import ROOT


def test_toy_mlp_gemms_go_to_cuda_cores_in_fp32():
    model = costspec.load(ROOT / "specs/toy_mlp.yaml")
    report = model.evaluate("forward")
    gemm = 10 * 2 * 1024 * 1024 * 128  # N * 2*D*D*M = 2,684,354,560
    assert gemm == 2_684_354_560
    assert report.tc == 0
    # CUDA-core total = GEMMs + bias adds (N*M*D) + activation at 1 FLOP/element (the spec's override)
    assert report.cuda == gemm + 10 * 128 * 1024 + 10 * 128 * 1024
    assert sum(model.cost("forward").matmul.values()).xreplace(model.bind()) == gemm


def test_toy_mlp_in_tf32_charges_the_same_gemms_to_tensor_cores(write_spec):
    text = (ROOT / "specs/toy_mlp.yaml").read_text().replace("precision: {dtype: fp32}", "precision: {dtype: tf32}")
    report = costspec.load(write_spec(text)).evaluate("forward")
    assert report.tc == 2_684_354_560
    assert report.cuda == 2 * 10 * 128 * 1024


def test_toy_mlp_backward_gemms_skip_dx_of_the_first_layer():
    model = costspec.load(ROOT / "specs/toy_mlp.yaml")
    mm = sum(model.cost("backward").matmul.values()).xreplace(model.bind())
    # (N-1) layers with dW + dX, the first with dW only: (10-1)*4*D*D*M + 2*D*D*M
    assert mm == (10 - 1) * 4 * 1024 * 1024 * 128 + 2 * 1024 * 1024 * 128 == 5_100_273_664


def test_vit_b_tensor_core_forward_equals_the_hand_derived_closed_form():
    report = costspec.load(ROOT / "specs/vit_b.yaml").evaluate("forward", B=8)
    B, C, L, h, img, p = 8, 768, 12, 12, 224, 16
    grid = img // p                       # 14 patches per side
    S = grid * grid + 1                   # 197 tokens with the class token
    patch_conv = 2 * B * grid * grid * C * (3 * p * p)   # 2*8*196*768*768 = 1,849,688,064
    qkv = 2 * B * S * C * (3 * C)         # fused q, k, v projections
    qk = 2 * B * h * S * S * (C // h)     # Q K^T
    av = 2 * B * h * S * S * (C // h)     # A V
    proj = 2 * B * S * C * C              # output projection
    fc1 = 2 * B * S * C * (4 * C)
    fc2 = 2 * B * S * (4 * C) * C
    per_block = qkv + qk + av + proj + fc1 + fc2  # = 24*B*S*C^2 + 4*B*S^2*C
    assert per_block == 24 * B * S * C**2 + 4 * B * S**2 * C
    assert patch_conv == 1_849_688_064
    assert report.tc == patch_conv + L * per_block == 281_008_963_584
    assert report.params == 85_798_656  # ViT-B/16 without the classifier head


def test_rows_are_the_layer_tree_with_counts_and_sum_to_the_total():
    report = costspec.load(ROOT / "specs/vit_b.yaml").evaluate("forward", B=8)
    by_name = {r.name: r for r in report.rows}
    assert by_name["blocks"].repeat == 12 and by_name["blocks"].count == 1
    assert by_name["blocks.attn.qkv"].count == 12
    top = [r for r in report.rows if r.depth == 0]
    assert sum(r.tc_flops for r in top) == report.tc and sum(r.cuda_flops for r in top) == report.cuda
    assert sum(r.params for r in top) == report.params
    attn = by_name["blocks.attn"]
    parts = [by_name[f"blocks.attn.{p}"] for p in ("qkv", "sdpa", "proj")]
    assert sum(p.tc_flops for p in parts) == attn.tc_flops


def test_train_is_forward_plus_backward():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    fwd, bwd, train = (model.evaluate(p, B=2) for p in ("forward", "backward", "train"))
    assert train.tc == fwd.tc + bwd.tc and train.cuda == fwd.cuda + bwd.cuda
    assert train.params == fwd.params and bwd.params == 0  # backward costs carry no parameters


def test_a_layer_may_override_the_precision(write_spec):
    path = write_spec("""
costspec: 1
name: mixed
dims: {M: 4, K: 8}
precision: {dtype: bf16}
input: [M, K]
layers:
  - linear: {out: K}
  - linear: {out: K}
    precision: fp32
""")
    report = costspec.load(path).evaluate()
    linear1, linear2 = report.rows
    assert (linear1.tc_flops, linear1.matmul_engine) == (2 * 4 * 8 * 8, "TC(bf16)")
    assert (linear2.tc_flops, linear2.matmul_engine) == (0, "CUDA(fp32)")
    assert linear2.cuda_flops == 2 * 4 * 8 * 8 + 4 * 8  # GEMM + bias add


def test_a_repeat_of_ten_thousand_builds_an_expression_the_size_of_one(write_spec):
    def size(count: int) -> int:
        text = (ROOT / "specs/vit_b.yaml").read_text().replace("repeat: L", f"repeat: {count}")
        cost = costspec.load(write_spec(text, f"r{count}.yaml")).cost("forward")
        return sum(sympy.count_ops(e) + len(list(sympy.preorder_traversal(e))) for e in (cost.tc, cost.cuda))

    assert size(10_000) == size(2)
    assert size(10_000) <= size(1) + 8  # 1*x drops the multiplication node; nothing else grows


def test_per_index_variants_are_grouped_not_unrolled(write_spec):
    path = write_spec("""
costspec: 1
name: variants
dims: {B: 1, S: 16, C: 64, depth: 12}
input: [B, S, C]
blocks:
  blk:
    params: {hidden: 4*C}
    layers:
      - residual: [{layernorm: {}}, {mlp: {hidden: hidden}}]
layers:
  - repeat: depth
    name: blocks
    body: blk
    at:
      - {indices: [2, 5, 8, 11], args: {hidden: 2*C}, name: narrow}
""")
    model = costspec.load(path)
    report = model.evaluate()
    rows = {r.name: r for r in report.rows}
    assert rows["blocks[narrow]"].count == 4 and rows["blocks[others]"].count == 8
    wide = 2 * 2 * 16 * 64 * 256   # fc1 + fc2 at hidden 4C
    narrow = 2 * 2 * 16 * 64 * 128  # at hidden 2C
    assert report.tc == 8 * wide + 4 * narrow
    assert model.evaluate(depth=20).tc == 16 * wide + 4 * narrow


def test_derived_dims_stay_symbols_in_formulas():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    symbols = {str(s) for s in model.cost().tc.free_symbols}
    assert {"B", "S", "C", "L"} <= symbols
    assert model.evaluate(img=384).dims["S"] == (384 // 16) ** 2 + 1


def test_binding_errors_are_clear():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    with pytest.raises(costspec.CostspecError, match="no dim 'X'"):
        model.evaluate(X=3)
    with pytest.raises(costspec.CostspecError, match="derived from img, patch"):
        model.evaluate(S=3)
    with pytest.raises(costspec.CostspecError, match="not divisible by patch"):
        model.evaluate(img=225)
    with pytest.raises(costspec.CostspecError, match="not divisible by heads"):
        model.evaluate(heads=7)


def test_backward_rows_sum_to_the_total_when_the_first_layer_is_a_residual(write_spec):
    path = write_spec("""
costspec: 1
name: residual_first
dims: {M: 4, K: 8}
input: [M, K]
layers:
  - residual: [{linear: {out: K}}, {activation: {fn: gelu}}]
  - linear: {out: K}
""")
    for pass_ in ("backward", "train"):
        report = costspec.load(path).evaluate(pass_)
        top = [r for r in report.rows if r.depth == 0]
        assert sum(r.tc_flops for r in top) == report.tc and sum(r.cuda_flops for r in top) == report.cuda
    rows = {r.name: r for r in costspec.load(path).evaluate("backward").rows}
    assert rows["add"].cuda_flops == 0  # x needs no grad: no gradient sum at the fork


def test_rows_of_a_parameter_free_repeat_nested_in_the_first_instance_sum_to_their_block():
    """Found by the fuzzer (seed 101): inside the first instance of a repeat whose input needs no gradient,
    every instance of a nested parameter-free repeat sees no gradient either, not only its first one. The
    rows (one walk) and the blocks (Node.backward_terms) must agree, and the generated module agrees."""
    model = costspec.load(ROOT / "tests/data/regressions/nested_repeat_without_params.yaml")
    for batch in (6, 8):
        rows = model.evaluate("backward", B=batch).rows
        for i, row in enumerate(rows):
            children = []
            for below in rows[i + 1:]:
                if below.depth <= row.depth:
                    break
                if below.depth == row.depth + 1:
                    children.append(below)
            if children:
                assert sum(c.cuda_flops for c in children) == row.cuda_flops, (batch, row.name)
    torch = pytest.importorskip("torch")  # noqa: F841
    from costspec.runtime.validate import validate

    assert validate(model, model.bind(sets={"B": 6}), "train").ok
