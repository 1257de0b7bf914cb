"""`costspec ncu calibrate`: the toy-network study of the reference notes, reproduced exactly.

The notes (shared/reference/ncu-vs-analytic-toy-network.md): 10 x [Linear(1024, 1024) + sigmoid] on
M = 128 tokens, fp32 on an A100. Forward: GEMM kernels 2,702,704,640 FLOPs, split-K reduces
3,932,160, activation 20,969,786, total 2,727,606,586; eps = 0.0068, rho = 3.0, kappa = 14.9987.
Backward total 5,134,952,944. The fixtures rebuild those counts per launch (tests/data/ncu/README.md).
"""
from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction

import pytest
import yaml

import costspec
from costspec.analysis.calibration import executed_report, load_calibration
from costspec.ncu.calibrate import bucket_phase, calibrate, render_summary
from costspec.ncu.compare import compare
from costspec.ncu.inputs import load_measured
from tests.common import ROOT
from tests.common import invoke as cli
from tests.ncu.synth_ncu import FADD, FFMA, raw_csv

DATA = ROOT / "tests" / "data" / "ncu"
TOY = str(ROOT / "specs" / "toy_mlp.yaml")
FWD, BWD = str(DATA / "toy_forward.details.csv"), str(DATA / "toy_backward.details.csv")
N, D, M = 10, 1024, 128


@pytest.fixture(scope="module")
def toy():
    measured = load_measured(costspec.load(TOY), [FWD, BWD])
    return measured, calibrate(measured, TOY)


def test_forward_coefficients_and_exact_reconstruction(toy):
    _, result = toy
    c, f = result.coefficients["forward"], result.data["forward"]
    # eps = 2,702,704,640 / (N * 2*D*D*M = 2,684,354,560) - 1 = 18,350,080 / 2,684,354,560 = 7/1024
    assert c.epsilon == {"gemm": Fraction(7, 1024)}
    assert round(float(c.epsilon["gemm"]), 4) == 0.0068 and f"{float(c.epsilon['gemm']):.6f}" == "0.006836"
    # rho = 3,932,160 / (N*D*M = 1,310,720 output elements)
    assert c.rho == 3
    # kappa = 20,969,786 / (1 FLOP x N*D*M) - 1 (the spec charges the sigmoid 1 FLOP/element, as the notes do)
    assert c.kappa == {"sigmoid": Fraction(20_969_786, 1_310_720) - 1}
    assert round(float(c.kappa["sigmoid"]), 4) == 14.9987
    assert c.fused == {"bias_add"}  # in the GEMM epilogue / split-K reduce: inside eps, nothing added
    assert f["measured_total"] == f["reconstructed_total"] == 2_727_606_586
    assert f["reconstruction_exact"] is True and f["analytic_total"] == 2_686_976_000
    # the notes' closed form, with our exact coefficients
    closed = N * (2 * (1 + c.epsilon["gemm"]) * D * D * M + (1 + c.kappa["sigmoid"] + c.rho) * D * M)
    assert closed == 2_727_606_586


def test_backward_coefficients_and_exact_reconstruction(toy):
    _, result = toy
    c, b = result.coefficients["backward"], result.data["backward"]
    # GEMM: 5,120,196,608 / (dW: N * 2*D*D*M + dX: (N-1) * 2*D*D*M = 5,100,273,664) - 1 = 1/256 (notes: 0.0039)
    assert c.epsilon == {"gemm": Fraction(1, 256)}
    # split-K (dX GEMMs only): 10,616,832 / (dW: N*D*D + dX: (N-1)*M*D = 11,665,408 output elements) = 81/89
    assert c.rho == Fraction(10_616_832, 11_665_408) == Fraction(81, 89)
    # sigmoid_backward: 3 FLOPs/element in costspec's table; executed exactly 1 FADD + 2 FMUL per element
    assert c.kappa == {"sigmoid_backward": 0}
    assert c.fused == {"bias_grad"}  # no reduction kernel of its own in the fixtures
    assert b["outside_flops"] == 207_344  # the loss reduction, outside the model (listed, not fitted)
    assert b["measured_total"] == b["reconstructed_total"] == 5_134_952_944
    assert b["reconstruction_exact"] is True


def test_relation_to_the_notes_backward_coefficients(toy):
    """The notes fitted the backward against another model: GEMM (N-1)*4DDM + 2DDM (the same), activation
    (N-1)*2DM + DM = 2,490,368 FLOPs, and split-K per (2N-1)*D*M with the loss reduce counted as split-K.
    Both reconstruct the same measured total; the coefficients convert exactly."""
    measured, result = toy
    b = bucket_phase(measured, "backward")
    c = result.coefficients["backward"]
    splitk, loss, act = b.splitk.measured, 207_344, b.kinds["sigmoid_backward"].measured
    rho_notes = (splitk + loss) / ((2 * N - 1) * D * M)
    kappa_notes = act / ((N - 1) * 2 * D * M + D * M) - 1
    assert (round(float(rho_notes), 4), round(float(kappa_notes), 4), round(float(c.epsilon["gemm"]), 4)) == (
        4.3464, 0.5789, 0.0039)
    assert c.rho * b.splitk.analytic + loss == rho_notes * (2 * N - 1) * D * M
    assert (1 + c.kappa["sigmoid_backward"]) * 3 * N * D * M == (1 + kappa_notes) * ((N - 1) * 2 * D * M + D * M)


def test_calibration_file_round_trip_and_eval(toy, tmp_path):
    _, result = toy
    path = tmp_path / "calib.yaml"
    from costspec.analysis.calibration import dump_calibration

    path.write_text(dump_calibration(result.data))
    data = yaml.safe_load(path.read_text())
    assert data["spec"] == "toy_mlp" and data["dims"] == {"M": 128, "D": 1024, "N": 10}
    assert [s["csv"] for s in data["sources"]] == [FWD, BWD]
    assert data["forward"]["epsilon"]["gemm"]["exact"] == "7/1024"
    assert data["forward"]["epsilon"]["gemm"]["kernels"] == {"ampere_sgemm_64x32_sliced1x4_nn": 10}
    cal = load_calibration(path)
    model = costspec.load(TOY)
    values = model.bind()
    fwd = executed_report(model, values, "forward", cal)
    assert fwd.total.executed.total == 2_727_606_586 and fwd.total.analytic == 2_686_976_000
    bwd = executed_report(model, values, "backward", cal)
    assert bwd.total.executed.total == 5_134_952_944 - 207_344  # the loss is outside the model
    train = executed_report(model, values, "train", cal)
    assert train.total.executed.total == 2_727_606_586 + 5_134_952_944 - 207_344
    rows = {r.name: r for r in fwd.rows}
    assert rows["layers.act"].executed.total == 20_969_786 and rows["layers.fc"].executed.total == 2_706_636_800
    # another size: the same coefficients applied to the new analytic terms
    big = executed_report(model, model.bind(sets={"M": 256}), "forward", cal)
    gemm, outputs, act = N * 2 * D * D * 256, N * D * 256, N * D * 256
    assert big.total.executed.total == Fraction(1031, 1024) * gemm + 3 * outputs + (1 + cal.phases["forward"].kappa[
        "sigmoid"]) * act


def test_compare_with_calibration_has_zero_residuals(toy):
    measured, result = toy
    c = compare(measured, result.calibration("calib.yaml"))
    for rows in c.rows.values():
        assert all(r.measured == r.executed for r in rows)




PROBE = """
import sys
from costspec.cli import main
try:
    main({args!r})
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
assert "torch" not in sys.modules
"""


@pytest.mark.slow
def test_cli_calibrate_then_eval_and_compare_without_torch(tmp_path):
    out = tmp_path / "calib.yaml"
    result = cli("ncu", "calibrate", TOY, FWD, BWD, "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "reconstructed 2,727,606,586 (exact)" in result.stdout
    assert "reconstructed 5,134,952,944 (exact)" in result.stdout
    for args in (["eval", TOY, "--pass", "train", "--calibration", str(out)],
                 ["eval", TOY, "--calibration", str(out), "--format", "json"],
                 ["ncu", "compare", TOY, FWD, BWD, "--calibration", str(out)]):
        probe = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], cwd=ROOT, capture_output=True,
                               text=True, timeout=120)
        assert probe.returncode == 0, probe.stderr
    table = cli("eval", TOY, "--calibration", str(out)).stdout
    assert "EXECUTED FLOPs" in table and "2,727,606,586" in table and "TC FLOPs" in table  # analytic kept
    data = json.loads(cli("eval", TOY, "--calibration", str(out), "--format", "json").stdout)
    assert data["totals"]["total_flops"] == 2_686_976_000
    assert data["tables"]["executed"]["total"]["executed_total"] == 2_727_606_586
    csv_text = cli("eval", TOY, "--calibration", str(out), "--format", "csv").stdout
    assert "executed,total,total,0" in csv_text and "2727606586" in csv_text  # one CSV, a `table` column


def test_bad_calibration_file_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: x\n")
    result = cli("eval", TOY, "--calibration", str(bad))
    assert result.returncode == 2 and "not a costspec calibration file" in result.stderr


SPEC = """\
costspec: 1
name: ln_mlp
dims: {M: 4, C: 8}
precision: {dtype: fp32}
input: [M, C]
layers:
  - linear: {out: C}
    name: fc
  - layernorm: {}
"""


def test_separate_bias_grad_kernel_gets_a_kappa_and_summary(write_spec, tmp_path):
    spec = write_spec(SPEC)
    B = "costspec:backward"
    kernels = [
        {"kernel": "ampere_sgemm_32x128_tn", "stack": (B, "ln_mlp", "fc"), "metrics": {FFMA: 2 * 4 * 8 * 8 // 2}},
        {"kernel": "void at::native::reduce_kernel<512, 1>(float)", "stack": (B, "ln_mlp", "fc"),
         "metrics": {FADD: 40}},
        {"kernel": "void at::native::layer_norm_grad_input_kernel<float>(int)", "stack": (B, "ln_mlp", "norm"),
         "metrics": {FADD: 100, FFMA: 100}},
    ]
    csv = tmp_path / "b.csv"
    csv.write_text(raw_csv(kernels, cc="8.0"))
    result = calibrate(load_measured(costspec.load(str(spec)), [str(csv)], pass_="backward"))
    c = result.coefficients["backward"]
    assert c.epsilon == {"gemm": Fraction(256, 256) - 1}  # dW only: 2*4*8*8 = 512 FLOPs = 256 FFMA x 2
    assert c.kappa["bias_grad"] == Fraction(40, 32) - 1  # the bias gradient's own reduction: 40 vs M*C = 32
    assert c.kappa["layernorm_backward"] == Fraction(300, 11 * 32) - 1
    assert not c.fused
    assert result.data["backward"]["reconstruction_exact"] is True
    assert "kappa[bias_grad] = 0.25" in render_summary(result)
