"""2:4 structured sparsity: executed vs dense-equivalent Tensor-Core FLOPs, the catalog's sparse peaks in
the roofline and the sweep, compressed weight bytes, and the refusals (fp32, GPUs without sparse peaks)."""
from __future__ import annotations

import json

import jsonschema
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

import costspec
from costspec.analysis.gpus import catalog, get_gpu
from costspec.analysis.roofline import estimate
from costspec.core.conventions import Precision, sparse_metadata_bits
from costspec.core.errors import SpecError, UsageError
from tests.common import ROOT

H100 = get_gpu("h100-sxm")
VIT_B = (ROOT / "specs/vit_b.yaml").read_text()
SPARSE = 'precision: {sparsity: "2:4"}'
# vit_b with its linear layers 2:4 sparse: the attention (qkv, proj; not its SDPA) and the MLP (fc1, fc2)
VIT_B_SPARSE = (VIT_B.replace("        - attention: {heads: heads}\n",
                              f"        - attention: {{heads: heads}}\n          {SPARSE}\n")
                .replace("        - mlp: {hidden: 4*C, fn: gelu}\n",
                         f"        - mlp: {{hidden: 4*C, fn: gelu}}\n          {SPARSE}\n"))
LINEARS = ("blocks.attn.qkv", "blocks.attn.proj", "blocks.mlp.fc1", "blocks.mlp.fc2")


def _reports(pass_: str, batch: int = 8):
    dense, sparse = costspec.loads(VIT_B, "vit_b.yaml"), costspec.loads(VIT_B_SPARSE, "vit_b_sparse.yaml")
    return (dense, dense.report(pass_, dense.bind(batch))), (sparse, sparse.report(pass_, sparse.bind(batch)))


def _rows(report):
    return {r.name: r for r in report.rows}


def test_vit_b_linear_layers_execute_half_their_dense_tc_flops():
    (_, dense), (_, sparse) = _reports("forward")
    d, s = _rows(dense), _rows(sparse)
    B, S, C, L = 8, 197, 768, 12
    # fc1: 2*B*S*C*4C per layer, x12 layers = 89,238,011,904 dense; the Sparse Tensor Cores run half
    assert d["blocks.mlp.fc1"].tc_flops == 2 * B * S * C * 4 * C * L == 89_238_011_904
    assert s["blocks.mlp.fc1"].tc_flops == 44_619_005_952
    for name in LINEARS:
        assert 2 * s[name].tc_flops == d[name].tc_flops
        assert s[name].tc_flops_dense_equivalent == d[name].tc_flops
        assert s[name].sparse_tc_flops == s[name].tc_flops
        assert s[name].matmul_engine == "TC(bf16) 2:4"
    # QK^T and AV multiply activations: dense; pointwise work and parameters are unchanged everywhere
    assert s["blocks.attn.sdpa"].tc_flops == d["blocks.attn.sdpa"].tc_flops
    assert s["blocks.attn.sdpa"].sparse_tc_flops == 0 and s["patch_embed.proj"].sparse_tc_flops == 0
    assert all(s[n].cuda_flops == d[n].cuda_flops and s[n].params == d[n].params for n in d)
    halved = sum(d[n].tc_flops for n in LINEARS) // 2
    assert sparse.tc == dense.tc - halved and sparse.sparse_tc == halved
    # patch conv 2*B*196*C*(3*16*16) + L x (qkv 2*B*S*C*3C + proj 2*B*S*C*C + fc1, fc2 2*B*S*C*4C each
    # + sdpa 2*B*heads*S*S*(2*64)) = 281,008,963,584; the linears' half: L x (12 BSC^2 ... ) / 2
    assert sparse.tc_dense == dense.tc == 281_008_963_584
    assert halved == 133_857_017_856 and sparse.tc == 147_151_945_728
    assert dense.tc_dense == dense.tc and not dense.sparse and dense.sparse_tc == 0


def test_backward_gemms_stay_dense_so_train_saves_only_the_forward_half():
    (_, dense), (_, sparse) = _reports("train")
    d, s = _rows(dense), _rows(sparse)
    (_, dense_fwd), _ = _reports("forward")
    fwd = _rows(dense_fwd)
    for name in LINEARS:  # train = forward (half) + backward dX and dW (dense)
        assert s[name].tc_flops == d[name].tc_flops - fwd[name].tc_flops // 2
        assert s[name].tc_flops_dense_equivalent == d[name].tc_flops
    (_, dense_bwd), (_, sparse_bwd) = _reports("backward")
    assert sparse_bwd.tc == dense_bwd.tc and sparse_bwd.sparse_tc == 0


@pytest.mark.slow  # subprocess CLI round trips / torch import: 7-10 s on 2 cores
def test_eval_json_labels_both_figures(write_spec, cli):
    path = write_spec(VIT_B_SPARSE)
    out = cli("eval", path, "--batch", "8", "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    totals = data["totals"]
    assert totals["tc_flops_dense_equivalent"] == 281_008_963_584
    assert totals["tc_flops"] == 147_151_945_728 and totals["sparse_tc_flops"] == 133_857_017_856
    titles = {c["key"]: c["title"] for c in data["columns"]}
    assert titles["tc_flops"] == "TC executed" and titles["tc_flops_dense_equivalent"] == "TC dense-eq."
    table = cli("eval", path, "--batch", "8").stdout
    assert "TC executed" in table and "TC dense-eq." in table and "2:4 sparse layers" in table


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200", "a100-80gb"])
def test_roofline_times_sparse_gemms_at_the_catalogs_sparse_peak(gpu):
    device = get_gpu(gpu)
    (dm, dense), (sm, sparse) = _reports("forward", batch=256)
    droof = estimate(dm, dense, dm.bind(256), device)
    sroof = estimate(sm, sparse, sm.bind(256), device)
    d, s = _rows(dense), _rows(sparse)
    fc1_dense, fc1_sparse = d["blocks.mlp.fc1"], s["blocks.mlp.fc1"]
    assert fc1_dense.bound == fc1_sparse.bound == "TC"  # compute bound both ways at B = 256
    # dense: F / dense peak; 2:4: F (dense-equivalent) / sparse peak, as the datasheet counts it
    assert fc1_dense.est_time_s == pytest.approx(fc1_dense.tc_flops / (device.tensor["bf16"] * 1e12))
    assert fc1_sparse.est_time_s == pytest.approx(fc1_dense.tc_flops / (device.tensor_sparse["bf16"] * 1e12))
    assert fc1_sparse.est_time_s / fc1_dense.est_time_s == pytest.approx(
        device.tensor["bf16"] / device.tensor_sparse["bf16"])
    assert s["blocks.attn.sdpa"].est_time_s == pytest.approx(d["blocks.attn.sdpa"].est_time_s)
    assert sroof.time_s < droof.time_s
    assert any("sparse Tensor-Core peak" in n for n in sroof.notes)


def test_the_sparse_peak_is_read_from_the_catalog_not_derived(tmp_path):
    path = tmp_path / "mine.yaml"  # a made-up GPU whose sparse peak is 3x dense: times follow the catalog
    path.write_text("gpus:\n  odd: {name: Odd, memory_gb: 80, memory_bw_gbps: 1000000000, tensor: {bf16: 100},"
                    " tensor_sparse: {bf16: 300}, cuda: {fp32: 10}}\n")
    odd = catalog(path)["odd"]
    (dm, dense), (sm, sparse) = _reports("forward")
    estimate(dm, dense, dm.bind(8), odd)
    estimate(sm, sparse, sm.bind(8), odd)
    fc2_dense, fc2_sparse = _rows(dense)["blocks.mlp.fc2"], _rows(sparse)["blocks.mlp.fc2"]
    assert fc2_sparse.est_time_s == pytest.approx(fc2_dense.est_time_s / 3)


def test_sparse_weights_are_read_compressed():
    (dm, dense), (sm, sparse) = _reports("forward")
    estimate(dm, dense, dm.bind(8), H100)
    estimate(sm, sparse, sm.bind(8), H100)
    C, L = 768, 12
    weight = C * 4 * C  # fc1's weight: bf16 2 B dense; 2:4: half the values (2 B) + a 2-bit index each
    assert Precision("bf16", "2:4").sparse_weight_bytes(sympy.Integer(weight)) == weight * 9 // 8
    saved = L * (2 * weight - weight * 9 // 8)
    assert _rows(dense)["blocks.mlp.fc1"].bytes - _rows(sparse)["blocks.mlp.fc1"].bytes == saved
    assert _rows(dense)["blocks.attn.sdpa"].bytes == _rows(sparse)["blocks.attn.sdpa"].bytes


def test_metadata_bits_per_kept_value():
    assert sparse_metadata_bits("bf16") == sparse_metadata_bits("fp8") == sparse_metadata_bits("int8") == 2
    assert sparse_metadata_bits("tf32") == 4  # tf32's 1:2 pattern, indexed as 2:4 over 16-bit halves


def test_sweep_gpu_uses_the_sparse_peak_like_the_roofline():
    from costspec.analysis.sweep import make_grid
    from costspec.analysis.sweep_time import grid_times

    (_, _), (sm, _) = _reports("forward")
    grid = make_grid(sm, [("B", [1, 8, 256])])
    times = grid_times(sm, grid, "forward", H100, quiet=True)
    for i, b in enumerate([1, 8, 256]):
        values = sm.bind(b)
        report = sm.report("forward", values)
        assert times.time_s[i] == pytest.approx(estimate(sm, report, values, H100).time_s)


def test_sweep_reports_executed_and_dense_equivalent_columns():
    from costspec.analysis.sweep import sweep

    (dm, _), (sm, _) = _reports("forward")
    _, sparse = sweep(sm, [("B", [1, 8])])
    _, dense = sweep(dm, [("B", [1, 8])])
    assert list(sparse["tc_flops_dense_equivalent"]) == list(dense["tc_flops"])
    assert sparse["tc_flops"][1] == 147_151_945_728 and "tc_flops_dense_equivalent" not in dense


def test_a_gpu_without_sparse_tensor_cores_cannot_time_a_sparse_layer():
    (_, _), (sm, _) = _reports("forward")
    fp16 = sm.with_precision("fp16")  # V100 runs fp16 on Tensor Cores, but has no Sparse Tensor Cores
    values = fp16.bind(8)
    with pytest.raises(UsageError, match=r"v100-sxm2 has no sparse \(2:4\) Tensor-Core fp16 peak"):
        estimate(fp16, fp16.report("forward", values), values, get_gpu("v100-sxm2"))
    assert not get_gpu("t4").tensor_sparse and not get_gpu("v100-sxm2").tensor_sparse


def test_model_level_sparsity_and_layer_opt_out(write_spec):
    spec = write_spec("""costspec: 1
name: mlp
dims: {B: 4, C: 64}
precision: {dtype: fp16, sparsity: "2:4"}
input: [B, C]
layers:
  - linear: {out: 256}
  - activation: {fn: gelu}
  - linear: {out: 64}
    precision: {sparsity: none}
  - linear: {out: 64}
    precision: fp8
""")
    model = costspec.load(spec)
    rows = _rows(model.report("forward", model.bind()))
    assert model.precision.label == "fp16 2:4" and str(model.precision) == "fp16"
    assert rows["linear1"].tc_flops == 4 * 64 * 256  # 2*B*C*256 dense, half executed
    assert rows["linear2"].tc_flops == 2 * 4 * 256 * 64 and rows["linear2"].sparse_tc_flops == 0
    assert rows["linear3"].tc_flops == 4 * 64 * 64  # a dtype string keeps the enclosing sparsity
    assert rows["act"].tc_flops == 0 and rows["act"].sparse_tc_flops == 0


def test_the_published_schema_accepts_sparse_precisions():
    schema = json.loads((ROOT / "schemas/costspec.schema.json").read_text())
    jsonschema.validate(__import__("yaml").safe_load(VIT_B_SPARSE), schema)


BASE = """costspec: 1
name: s
dims: {B: 4, C: 64}
input: [B, C]
"""


@pytest.mark.parametrize("text, message", [
    (BASE + 'precision: {dtype: fp32, sparsity: "2:4"}\nlayers:\n  - linear: {out: 8}\n',
     r"\$\.precision: sparsity 2:4 runs on Sparse Tensor Cores, and fp32 runs matmuls on CUDA cores"),
    (BASE + 'layers:\n  - linear: {out: 8}\n    precision: {dtype: fp32, sparsity: "2:4"}\n',
     r"\$\.layers\[0\]\.precision: sparsity 2:4 runs on Sparse Tensor Cores"),
    (BASE + 'precision: {sparsity: "2:4"}\nlayers:\n  - linear: {out: 8}\n    precision: fp32\n',
     r"fp32 runs matmuls on CUDA cores \(expected a Tensor-Core dtype .* or sparsity: none on this layer\)"),
    (BASE + 'precision: {sparsity: 2:4}\nlayers:\n  - linear: {out: 8}\n',
     r"\$\.precision\.sparsity: bad value 124 \(expected \"2:4\" \(quoted"),
    (BASE + 'precision: {sparsity: "1:4"}\nlayers:\n  - linear: {out: 8}\n', r"\$\.precision\.sparsity"),
])
def test_bad_sparsity_is_a_located_one_line_error(text, message):
    with pytest.raises(SpecError, match=message):
        costspec.loads(text, "s.yaml")


@pytest.mark.slow  # subprocess CLI round trips / torch import: 7-10 s on 2 cores
def test_cli_refuses_fp32_sparse_with_exit_2(write_spec, cli):
    path = write_spec(BASE + 'precision: {dtype: fp32, sparsity: "2:4"}\nlayers:\n  - linear: {out: 8}\n')
    out = cli("eval", path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "sparsity 2:4 runs on Sparse Tensor Cores, and fp32 runs matmuls on CUDA cores" in out.stderr
    sparse = write_spec(BASE + 'precision: {dtype: bf16, sparsity: "2:4"}\nlayers:\n  - linear: {out: 8}\n', "b.yaml")
    out = cli("eval", sparse, "--dtype", "fp32")
    assert out.returncode == 2 and "--dtype fp32 runs matmuls on CUDA cores" in out.stderr
    out = cli("eval", sparse, "--gpu", "t4")
    assert out.returncode == 2 and "t4 has no sparse (2:4) Tensor-Core bf16 peak" in out.stderr


@pytest.mark.slow  # subprocess CLI round trips / torch import: 7-10 s on 2 cores
def test_validate_compares_the_dense_equivalent_and_says_so():
    pytest.importorskip("torch")
    from costspec.runtime.validate import validate

    model = costspec.loads(BASE + 'precision: {dtype: bf16, sparsity: "2:4"}\nlayers:\n'
                                  '  - linear: {out: 32}\n  - activation: {fn: gelu}\n  - linear: {out: 64}\n')
    result = validate(model, model.bind(), "train")
    assert result.ok
    assert any("2:4 sparse layers (linear1, linear2)" in n and "dense-equivalent" in n for n in result.notes)


TC_DTYPES = ("tf32", "fp16", "bf16", "fp8", "int8", "nvfp4")


@given(m=st.integers(1, 4096), k=st.integers(1, 4096), n=st.integers(1, 4096), bias=st.booleans(),
       dtype=st.sampled_from(TC_DTYPES))
def test_any_sparse_linear_executes_half_its_dense_gemm(m, k, n, bias, dtype):
    text = (f"costspec: 1\nname: l\ndims: {{M: {m}, K: {k}}}\ninput: [M, K]\n"
            f"precision: {{dtype: {dtype}, sparsity: \"2:4\"}}\nlayers:\n  - linear: {{out: {n}, bias: {str(bias).lower()}}}\n")
    sparse = costspec.loads(text)
    dense = costspec.loads(text.replace(', sparsity: "2:4"', ""))
    fwd, dfwd = sparse.cost("forward"), dense.cost("forward")
    at = sparse.bind()
    assert fwd.tc.xreplace(at) == m * k * n and dfwd.tc.xreplace(at) == 2 * m * k * n  # half executed
    assert fwd.tc_dense == dfwd.tc and fwd.sparse_tc == fwd.tc
    assert fwd.cuda == dfwd.cuda and fwd.params == dfwd.params and fwd.matmul == dfwd.matmul
    assert sparse.cost("backward").tc == dense.cost("backward").tc  # dW dense (no dX: the input needs none)
    with pytest.raises(SpecError, match="fp32 runs matmuls on CUDA cores"):
        costspec.loads(text.replace(f"dtype: {dtype}", "dtype: fp32"))


def test_formula_and_latex_give_executed_and_dense_equivalent_closed_forms():
    from costspec.analysis.formula import formulas
    from costspec.export.formulas import render_text

    model = costspec.loads(BASE + 'precision: {dtype: bf16, sparsity: "2:4"}\nlayers:\n  - linear: {out: 256}\n')
    result = formulas(model, "forward", keep=["B", "C"])
    B, C = sympy.symbols("B C", positive=True, integer=True)
    assert sympy.simplify(result.tc.expr - 256 * B * C) == 0  # 2*B*C*256 dense, half executed
    assert result.tc_dense is not None and sympy.simplify(result.tc_dense.expr - 512 * B * C) == 0
    text = render_text(result)
    assert "TC executed  = 256*B*C" in text and "TC dense-eq. = 512*B*C" in text
    latex = model.latex(keep=["B", "C"])
    assert r"F^{\mathrm{TC}} &= 256 B C" in latex and r"F^{\mathrm{TC}}_{\text{dense-eq.}} &= 512 B C" in latex
    dense = formulas(costspec.loads(BASE + "layers:\n  - linear: {out: 256}\n"), "forward", keep=["B", "C"])
    assert dense.tc_dense is None and "tc_dense_equivalent" not in dense.totals()


def test_the_ladder_of_a_sparse_spec_keeps_the_rungs_with_a_sparse_peak():
    from costspec.analysis.ladder import ladder

    (_, _), (sm, _) = _reports("forward")
    result = ladder(sm, sm.bind(8), H100)
    assert result.meta["rungs"] == ["tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8"]  # no fp32: CUDA cores
    assert any("no sparse peak" in n and "fp32" in n for n in result.notes)


def test_model_level_sparsity_leaves_gathered_relative_positions_dense():
    text = (ROOT / "specs/sam_vit_b.yaml").read_text().replace("precision: {dtype: bf16}",
                                                               'precision: {dtype: bf16, sparsity: "2:4"}')
    sparse, dense = costspec.loads(text), costspec.load(ROOT / "specs/sam_vit_b.yaml")
    s, d = _rows(sparse.report("forward", sparse.bind())), _rows(dense.report("forward", dense.bind()))
    rel = [n for n in s if n.endswith(".rel_pos")]
    assert rel and all(s[n].tc_flops == d[n].tc_flops > 0 and s[n].sparse_tc_flops == 0 for n in rel)
    qkv = [n for n in s if n.endswith(".qkv")]
    assert qkv and all(2 * s[n].tc_flops == d[n].tc_flops for n in qkv)
    assert 2 * s["patch_embed"].tc_flops == d["patch_embed"].tc_flops  # the patch conv's weight is pruned too


def test_the_html_report_shows_executed_and_dense_equivalent_cards():
    from costspec.export.html_page import render_page
    from costspec.export.html_report import gather

    (dm, _), (sm, _) = _reports("forward")
    sparse_page = render_page(gather(sm, sm.bind(8), "forward", {}, H100, quiet=True))
    dense_page = render_page(gather(dm, dm.bind(8), "forward", {}, H100, quiet=True))
    assert "Tensor-Core FLOPs executed (2:4 GEMMs at half)" in sparse_page
    assert "Tensor-Core FLOPs dense-equivalent" in sparse_page and "dense-equivalent" not in dense_page


def test_a_reduction_dim_that_is_not_whole_groups_of_4_is_named():
    model = costspec.loads('costspec: 1\nname: odd\ndims: {B: 4, K: 6}\nprecision: {dtype: bf16, sparsity: "2:4"}\n'
                           "input: [B, K]\nlayers:\n  - linear: {out: 64}\n  - linear: {out: 8}\n")
    notes = model.report("forward", model.bind()).notes
    assert any("not a multiple of 4" in n and "linear1 (k=6)" in n and "linear2" not in n for n in notes)
    at_8 = model.report("forward", model.bind(sets={"K": 8})).notes
    assert not any("not a multiple of 4" in n for n in at_8)
