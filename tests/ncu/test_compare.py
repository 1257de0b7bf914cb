"""`costspec ncu compare`: parser -> attribution -> per-layer comparison, on the committed fixtures."""
from __future__ import annotations

import json

import pytest

import costspec
from costspec.core.errors import CostspecError
from costspec.ncu.attribute import AttributionError, role_of, short_name
from costspec.ncu.compare import compare, render_json, render_table
from costspec.ncu.inputs import load_measured, read_sidecar, sidecar_path
from tests.common import ROOT
from tests.common import invoke as cli
from tests.ncu.synth_ncu import FADD, FFMA, HFMA, TC_BF16_H100, raw_csv

DATA = ROOT / "tests" / "data" / "ncu"
TOY = str(ROOT / "specs" / "toy_mlp.yaml")
FWD, BWD = str(DATA / "toy_forward.details.csv"), str(DATA / "toy_backward.details.csv")




def _row(rows, name):
    return next(r for r in rows if r.name == name)


@pytest.fixture(scope="module")
def toy():
    return compare(load_measured(costspec.load(TOY), [FWD, BWD]))


def test_sidecars_give_the_passes_and_dims():
    assert sidecar_path(FWD).name == "toy_forward.details.json"
    assert read_sidecar(FWD)["pass"] == "forward" and read_sidecar(BWD)["pass"] == "backward"
    measured = load_measured(costspec.load(TOY), [FWD, BWD])
    assert measured.pass_ == "train" and measured.attribution.phases == ("forward", "backward")
    assert {str(k): int(v) for k, v in measured.values.items()} == {"M": 128, "D": 1024, "N": 10}


def test_forward_per_layer(toy):
    rows = toy.rows["forward"]
    fc, act, total = _row(rows, "layers.fc"), _row(rows, "layers.act"), rows[-1]
    # analytic: 2*M*D*D per layer + the bias add; measured: sgemm + split-K reduce (2,702,704,640 + 3,932,160)
    assert (fc.cuda_analytic, fc.cuda_measured, fc.kernels, fc.no_term) == (2_685_665_280, 2_706_636_800, 20, 10)
    assert (act.cuda_analytic, act.cuda_measured, act.kernels) == (1_310_720, 20_969_786, 10)
    assert (total.analytic, total.measured, total.kernels) == (2_686_976_000, 2_727_606_586, 30)
    assert total.tc_analytic == total.tc_measured == 0  # fp32: sgemm on CUDA cores


def test_backward_per_layer_and_the_unattributed_loss(toy):
    rows = toy.rows["backward"]
    fc, act, total = _row(rows, "layers.fc"), _row(rows, "layers.act"), rows[-1]
    assert (fc.cuda_analytic, fc.cuda_measured, fc.kernels) == (5_101_584_384, 5_130_813_440, 28)
    assert (act.cuda_analytic, act.cuda_measured) == (3_932_160, 3_932_160)
    loss = _row(rows, "(unattributed)")
    assert (loss.measured, loss.kernels, loss.analytic) == (207_344, 1, 0)
    assert (total.analytic, total.measured, total.kernels) == (5_105_516_544, 5_134_952_944, 39)
    assert [(u.phase, u.kernel, u.count, u.flops) for u in toy.unattributed] == [
        ("backward", "reduce_kernel", 1, 207_344)]
    assert toy.unattributed[0].layer == "toy / loss" and "toy_backward.details.csv:2" in toy.unattributed[0].reason


def test_kernels_with_no_model_term_are_listed(toy):
    splitk = [(n.phase, n.layer, n.kernel, n.count, n.flops) for n in toy.no_term]
    assert splitk == [("forward", "layers.fc", "splitKreduce_kernel", 10, 3_932_160),
                      ("backward", "layers.fc", "splitKreduce_kernel", 9, 10_616_832)]


def test_table_and_json(toy):
    text = render_table(toy)
    assert "TC measured" in text and "n/a" in text  # the fixtures carry no tensor counters
    assert "+1499.87%" in text  # the activation: 16 executed FLOPs per element for 1 analytic
    assert "2*FMA + ADD + MUL" in text and "2*hadd + 2*hmul + 4*hfma" in text
    data = json.loads(render_json(toy))
    table = data["tables"]["forward"]
    fwd = {r["name"]: r for r in table["rows"] + [table["total"]]}
    assert fwd["total"]["cuda_measured"] == 2_727_606_586
    assert fwd["layers.fc"]["cuda_rel_diff"] == pytest.approx(20_971_520 / 2_685_665_280)
    assert data["unattributed"][0]["flops"] == 207_344


def test_cli_compare_json():
    result = cli("ncu", "compare", TOY, FWD, "--format", "json")
    assert result.returncode == 0, result.stderr
    assert list(json.loads(result.stdout)["tables"]) == ["forward"]


@pytest.mark.parametrize(("name", "line"), [("bad_ragged.csv", 4), ("bad_value_locale.csv", 5),
                                            ("bad_no_header.csv", 1), ("bad_duplicate_id.csv", 4)])
def test_malformed_csv_exits_2_with_file_and_line(name, line):
    result = cli("ncu", "compare", TOY, str(DATA / name), "--pass", "forward")
    assert result.returncode == 2
    assert f"{name}:{line}:" in result.stderr and "Traceback" not in result.stderr


def test_train_without_phase_ranges_is_an_error():
    with pytest.raises(AttributionError) as info:
        load_measured(costspec.load(TOY), [FWD], pass_="train")
    assert "toy_forward.details.csv:2" in str(info.value) and "--pass forward" in str(info.value)
    assert cli("ncu", "compare", TOY, FWD, "--pass", "train").returncode == 2


def test_same_phase_twice_is_an_error():
    with pytest.raises(CostspecError, match="forward phase is given twice"):
        load_measured(costspec.load(TOY), [FWD, FWD])


VIT = """\
costspec: 1
name: tiny
dims: {B: 2, S: 4, C: 8}
precision: {dtype: bf16}
input: [B, S, C]
layers:
  - linear: {out: C}
    name: fc
  - dropout: {p: 0.1}
  - layernorm: {}
"""


def test_tensor_counters_phase_ranges_and_the_model_root(write_spec, tmp_path):
    spec = write_spec(VIT)
    F, B = "costspec:forward", "costspec:backward"
    kernels = [
        {"kernel": "nvjet_tst_64x8_64x16_1x4_h_bz_bias_TNT", "stack": (F, "tiny", "fc"),
         "metrics": {TC_BF16_H100: 1024, FADD: 64}},
        {"kernel": "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float>(int)",
         "stack": (F, "tiny", "drop"), "metrics": {FFMA: 5}},
        {"kernel": "void at::native::vectorized_layer_norm_kernel<c10::BFloat16, float>(int)",
         "stack": (F, "tiny", "norm"), "metrics": {FFMA: 200, FADD: 100}},
        {"kernel": "void at::native::elementwise_kernel<128, 2, at::native::copy_kernel>(int)",
         "stack": (F, "tiny"), "metrics": {}},
        {"kernel": "void at::native::reduce_kernel<512, 1>(float)", "stack": ("costspec:loss",), "metrics": {FADD: 63}},
        {"kernel": "nvjet_tst_64x8_64x16_1x4_h_bz_TNT", "stack": (B, "tiny", "fc"),
         "metrics": {TC_BF16_H100: 2048, HFMA: 1}},
    ]
    csv = tmp_path / "run.csv"
    csv.write_text(raw_csv(kernels))
    result = compare(load_measured(costspec.load(str(spec)), [str(csv)], pass_="train"))
    assert result.has_tensor_counters and list(result.rows) == ["forward", "backward"]
    fwd = result.rows["forward"]
    assert (_row(fwd, "fc").tc_measured, _row(fwd, "fc").cuda_measured) == (1024, 64)
    assert _row(fwd, "fc").tc_analytic == 2 * 8 * 8 * 8  # bf16: the GEMM is Tensor-Core work
    assert _row(fwd, "norm").cuda_measured == 500
    assert _row(fwd, "(model)").kernels == 1  # a copy in the model's range but in no layer
    assert _row(fwd, "drop").no_term == 1  # RNG: no model term
    assert [u.kernel for u in result.unattributed] == ["reduce_kernel"]
    bwd = result.rows["backward"]
    assert (_row(bwd, "fc").tc_measured, _row(bwd, "fc").cuda_measured) == (2048, 4)  # hfma = 4 FLOPs (half2)
    assert "no term" in render_table(result)


@pytest.mark.parametrize(("name", "short", "role"), [
    ("void cutlass::Kernel<cutlass_80_simt_sgemm_64x64_8x5_nt_align1>(T1::Params)",
     "cutlass_80_simt_sgemm_64x64_8x5_nt_align1", "matmul"),
    ("void splitKreduce_kernel<32, 16, int, float>(cublasSplitKParams<float>)", "splitKreduce_kernel", "splitk"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::sigmoid_kernel_cuda>(int)",
     "vectorized_elementwise_kernel", "pointwise"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>(int)",
     "unrolled_elementwise_kernel", "no_term"),
    ("void at::native::distribution_elementwise_grid_stride_kernel<float, 4>(int)",
     "distribution_elementwise_grid_stride_kernel", "no_term"),
])
def test_kernel_short_names_and_roles(name, short, role):
    from costspec.ncu.kernels import classify

    assert short_name(name) == short
    assert role_of(classify(name), name) == role


@pytest.mark.parametrize("spec", sorted((ROOT / "specs").glob("*.yaml")), ids=lambda p: p.stem)
def test_slots_add_up_to_the_report_for_every_spec(spec):
    """compare's per-slot analytic terms sum to `costspec eval`'s totals; with no coefficients the
    'executed' prediction is the analytic count."""
    import costspec
    from costspec.analysis.calibration import Calibration, PhaseCoefficients, executed_report
    from costspec.analysis.slots import analytic_slots

    model = costspec.load(spec)
    values = model.bind()
    for phase in ("forward", "backward"):
        slots = analytic_slots(model, values, phase)
        report = model.report(phase, values)
        assert (sum(t.tc for t in slots.values()), sum(t.cuda for t in slots.values())) == (report.tc, report.cuda)
    empty = Calibration(model.name, {}, "", {"forward": PhaseCoefficients(), "backward": PhaseCoefficients()})
    assert executed_report(model, values, "train", empty).total.executed.total == model.report("train", values).total
