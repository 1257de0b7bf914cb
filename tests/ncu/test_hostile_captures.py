"""A broken ncu capture never becomes a number: negative counters, counters not collected, a CSV
with no kernel, wrong or unknown units on the counters costspec reads, old-Mac line endings; and a
calibration never predicts negative work, nor is written when its own reader would refuse it."""
from __future__ import annotations

import json
import re
import shutil
from fractions import Fraction
from pathlib import Path

import pytest

import costspec
from costspec.analysis.calibration import CalibrationError, load_calibration, loads_calibration
from costspec.cli import main
from costspec.ncu.calibrate import IncompleteCapture, calibrate, calibration_text
from costspec.ncu.inputs import load_measured
from costspec.ncu.parse import NcuFormatError, parse_csv
from tests.ncu.synth_ncu import FADD, FFMA, raw_csv

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "ncu"
TOY = str(ROOT / "specs" / "toy_mlp.yaml")
FWD = DATA / "toy_forward.details.csv"
FFMA_CELL = re.compile(r'("smsp__sass_thread_inst_executed_op_ffma_pred_on\.sum","inst",")([0-9,]+)"')


def _capture(tmp_path: Path, name: str, edit=None, text: str | None = None) -> str:
    """A copy of the toy forward capture (and its sidecar), edited."""
    body = FWD.read_text() if text is None else text
    (tmp_path / f"{name}.csv").write_text(edit(body) if edit else body, newline="")
    shutil.copyfile(FWD.with_suffix(".json"), tmp_path / f"{name}.json")
    return str(tmp_path / f"{name}.csv")


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def _ffma(value):
    return lambda text: FFMA_CELL.sub(lambda m: m.group(1) + value(m.group(2)) + '"', text)


# ----------------------------------------------------------------------------------------------
# counts: non-negative, whole, in a unit of the counter
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["ncu", "compare", TOY], ["ncu", "calibrate", TOY], ["ncu", "show"]])
def test_a_negative_counter_is_an_error_naming_it(args, tmp_path, capsys):
    csv = _capture(tmp_path, "neg", _ffma(lambda v: "-" + v))
    extra = ["-o", str(tmp_path / "c.yaml")] if args[1] == "calibrate" else []
    code, out, err = _run([*args, csv, *extra], capsys)
    assert code == 2 and out == ""
    assert "neg.csv:6: metric 'smsp__sass_thread_inst_executed_op_ffma_pred_on.sum' of kernel ID 0: value " \
           "'-134,217,728' is negative" in err
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize("unit, says", [("Mbyte", "is not a unit of this counter"),
                                        ("furlong", "is not a unit costspec knows"),
                                        ("nsecond", "is not a unit of this counter")])
def test_an_instruction_counter_in_another_unit_is_an_error(unit, says, tmp_path, capsys):
    csv = _capture(tmp_path, "unit", lambda t: t.replace('op_ffma_pred_on.sum","inst"', f'op_ffma_pred_on.sum","{unit}"'))
    code, out, err = _run(["ncu", "compare", TOY, csv], capsys)
    assert code == 2 and out == ""
    assert f"unit '{unit}' {says} (expected 'inst' or no unit" in err


def test_units_of_bytes_and_time_are_checked_and_converted(tmp_path):
    header = '"ID","Kernel Name","dram__bytes_read.sum","gpu__time_duration.sum"\n'
    good = header + '"","","Kbyte","usecond"\n"0","k","16.896","2.5"\n'
    (record,) = parse_csv(good)
    assert record.metrics == {"dram__bytes_read.sum": 16_896.0, "gpu__time_duration.sum": 2.5e-6}
    with pytest.raises(NcuFormatError, match=r"unit 'inst' is not a unit of this counter \(expected 'byte'"):
        parse_csv(header + '"","","inst","usecond"\n"0","k","1","2"\n')
    with pytest.raises(NcuFormatError, match=r"unit 'Gbyte' is not a unit of this counter \(expected 'second'"):
        parse_csv(header + '"","","byte","Gbyte"\n"0","k","1","2"\n')
    with pytest.raises(NcuFormatError, match="value '-1' is negative"):
        parse_csv(header + '"","","byte","usecond"\n"0","k","-1","2"\n')


def test_a_fractional_flop_count_and_a_negative_instance_are_errors():
    head = f'"ID","Kernel Name","{FFMA}"\n"","","inst"\n'
    with pytest.raises(NcuFormatError, match="value '12.5' is not a whole number of inst"):
        parse_csv(head + '"0","k","12.5"\n')
    with pytest.raises(NcuFormatError, match="is negative"):
        parse_csv(head + '"0","k","-4; 10"\n')  # the roll-up (6) is positive; an instance is not
    # a count in another metric (not read by costspec) is checked for its sign only
    with pytest.raises(NcuFormatError, match="is negative"):
        parse_csv('"ID","Kernel Name","launch__registers_per_thread"\n"","","register"\n"0","k","-3"\n')
    (record,) = parse_csv('"ID","Kernel Name","sm__throughput.avg.pct"\n"","","%"\n"0","k","-3.5"\n')
    assert record.metrics == {"sm__throughput.avg.pct": -3.5}  # a signed ratio is not a count


# ----------------------------------------------------------------------------------------------
# counters not collected; no kernels
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("missing", ["n/a", "", "nan", "(!) n/a"])
def test_a_counter_not_collected_makes_the_figure_na_in_compare(missing, tmp_path, capsys):
    csv = _capture(tmp_path, "na", _ffma(lambda v: missing))
    code, out, err = _run(["ncu", "compare", TOY, csv, "--format", "json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    table = data["tables"]["forward"]
    rows = {r["name"]: r for r in [*table["rows"], table["total"]]}
    assert all(rows[name]["cuda_measured"] is None and rows[name]["cuda_rel_diff"] is None and
               rows[name]["measured"] is None for name in ("layers", "layers.fc", "layers.act", "total"))
    assert rows["total"]["cuda_analytic"] == 2_686_976_000  # the analytic side is still there
    assert any("measured CUDA-core FLOPs are n/a where smsp__sass_thread_inst_executed_op_ffma_pred_on.sum was not "
               "collected (n/a or absent) in 30 kernel(s), first ampere_sgemm_64x32_sliced1x4_nn at " in n
               for n in data["notes"])
    code, out, _ = _run(["ncu", "compare", TOY, csv], capsys)
    assert code == 0 and "CUDA measured" in out
    assert "2,727,606,586" not in out and re.search(r"^total .* n/a +n/a$", out, re.M)


def test_calibrate_refuses_a_capture_without_the_counters_it_needs(tmp_path, capsys):
    csv = _capture(tmp_path, "na", _ffma(lambda v: "n/a"))
    code, out, err = _run(["ncu", "calibrate", TOY, csv, "-o", str(tmp_path / "c.yaml")], capsys)
    assert code == 2 and out == ""
    assert "cannot calibrate from" in err and "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum (in 30 kernel(s)" in err
    assert not (tmp_path / "c.yaml").exists()


def test_an_absent_cuda_core_counter_is_named_and_refused_by_calibrate(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("costspec: 1\nname: s\ndims: {M: 4, C: 8}\nprecision: {dtype: fp32}\ninput: [M, C]\n"
                    "layers:\n  - linear: {out: C}\n    name: fc\n")
    kernels = [{"kernel": "ampere_sgemm_32x128_tn", "stack": ("s", "fc"), "metrics": {FFMA: 128, FADD: 32}}]
    (tmp_path / "partial.csv").write_text(raw_csv(kernels, cc="8.0", cuda_columns=False))
    measured = load_measured(costspec.load(str(spec)), [str(tmp_path / "partial.csv")])
    (kernel,) = measured.attribution.kernels
    assert "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum" in kernel.cuda_unknown
    with pytest.raises(IncompleteCapture, match="fmul_pred_on.sum"):
        calibrate(measured)
    (tmp_path / "full.csv").write_text(raw_csv(kernels, cc="8.0"))
    result = calibrate(load_measured(costspec.load(str(spec)), [str(tmp_path / "full.csv")]))
    assert result.coefficients["forward"].epsilon == {"gemm": Fraction(2 * 128 + 32, 2 * 4 * 8 * 8) - 1}


def test_calibrate_refuses_tensor_core_work_without_tensor_counters(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("costspec: 1\nname: s\ndims: {M: 64, C: 64}\nprecision: {dtype: bf16}\ninput: [M, C]\n"
                    "layers:\n  - linear: {out: C, bias: false}\n    name: fc\n")
    kernels = [{"kernel": "sm90_xmma_gemm_bf16bf16", "stack": ("s", "fc"), "metrics": {FFMA: 0}}]
    (tmp_path / "c.csv").write_text(raw_csv(kernels, cc="9.0"))
    measured = load_measured(costspec.load(str(spec)), [str(tmp_path / "c.csv")])
    with pytest.raises(IncompleteCapture, match=r"524,288 analytic Tensor-Core FLOPs and the capture has no "
                                                r"Tensor-Core counter \(expected sm__ops_path_tensor_op_hgmma_src_bf16"):
        calibrate(measured)


def test_calibrate_refuses_a_matmul_class_without_kernels(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("costspec: 1\nname: s\ndims: {M: 4, C: 8}\nprecision: {dtype: fp32}\ninput: [M, C]\n"
                    "layers:\n  - linear: {out: C}\n    name: fc\n  - activation: {fn: gelu}\n    name: act\n")
    kernels = [{"kernel": "vectorized_elementwise_kernel<gelu>", "stack": ("s", "act"), "metrics": {FFMA: 64}}]
    (tmp_path / "c.csv").write_text(raw_csv(kernels, cc="8.0"))
    with pytest.raises(IncompleteCapture, match=r"epsilon\[gemm\] of the forward phase .* no kernel was attributed to "
                                                r"its 512 analytic FLOPs \(slots fc\)"):
        calibrate(load_measured(costspec.load(str(spec)), [str(tmp_path / "c.csv")]))


@pytest.mark.parametrize("command", ["compare", "calibrate"])
def test_a_csv_with_a_header_and_no_kernel_is_refused(command, tmp_path, capsys):
    csv = _capture(tmp_path, "empty", lambda t: t.split("\n")[0] + "\n")
    extra = ["-o", str(tmp_path / "c.yaml")] if command == "calibrate" else []
    code, out, err = _run(["ncu", command, TOY, csv, *extra], capsys)
    assert code == 2 and out == ""
    assert "empty.csv: no kernel launch in this ncu CSV (a header and no rows): nothing was measured" in err
    assert not (tmp_path / "c.yaml").exists()


def test_a_phase_without_kernels_is_refused(tmp_path, capsys):
    """A train capture whose kernels are all in the costspec:forward range has no backward to compare."""
    kernels = [{"kernel": "ampere_sgemm_32x128_tn", "stack": ("costspec:forward", "toy_mlp", "layers.0.fc"),
                "metrics": {FFMA: 10}}]
    (tmp_path / "t.csv").write_text(raw_csv(kernels, cc="8.0"))
    code, _, err = _run(["ncu", "compare", TOY, str(tmp_path / "t.csv"), "--pass", "train"], capsys)
    assert code == 2 and "t.csv is in the backward phase: nothing was measured for it" in err


# ----------------------------------------------------------------------------------------------
# line endings
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("newline", ["\r", "\r\n"])
def test_old_mac_and_windows_line_endings_read_as_unix_ones(newline, tmp_path, capsys):
    unix = FWD.read_text()
    csv = _capture(tmp_path, "eol", text=unix.replace("\n", newline))
    assert parse_csv(csv) == parse_csv(FWD)
    assert [r.line for r in parse_csv(csv)] == [r.line for r in parse_csv(FWD)]
    code, out, err = _run(["ncu", "compare", TOY, csv, "--format", "json"], capsys)
    assert code == 0, err
    total = json.loads(out)["tables"]["forward"]["total"]
    assert total["cuda_measured"] == 2_727_606_586
    code, _, err = _run(["ncu", "show", csv], capsys)
    assert code == 0, err
    bad = _capture(tmp_path, "bad", text=unix.replace("\n", newline).replace('"inst","786,432"', '"inst","x"', 1))
    with pytest.raises(NcuFormatError, match=r"bad.csv:5: "):  # the line numbers count \r as a line end
        parse_csv(bad)


# ----------------------------------------------------------------------------------------------
# the calibration file: never negative work, never written when its reader would refuse it
# ----------------------------------------------------------------------------------------------
CAL = """costspec_calibration: 1
spec: toy_mlp
precision: fp32
dims: {M: 128, D: 1024, N: 10}
forward:
  epsilon: {gemm: {value: 0.5, exact: "1/2"}}
  rho: 3
  kappa: {sigmoid: 14}
"""


@pytest.mark.parametrize("edit, where", [
    (("1/2", "-3"), "forward.epsilon.gemm: -3 predicts negative work"),
    (("rho: 3", "rho: -1/2"), "forward.rho: -1/2 predicts negative work"),
    (("sigmoid: 14", "sigmoid: -1.5"), "forward.kappa.sigmoid: -3/2 predicts negative work"),
])
def test_the_calibration_reader_refuses_coefficients_that_predict_negative_work(edit, where, tmp_path, capsys):
    path = tmp_path / "cal.yaml"
    path.write_text(CAL.replace(*edit))
    with pytest.raises(CalibrationError, match=re.escape(where)):
        load_calibration(path)
    code, out, err = _run(["eval", TOY, "--calibration", str(path)], capsys)
    assert code == 2 and out == "" and where in err
    path.write_text(CAL.replace(edit[0], edit[0].replace("3", "1").replace("14", "-1")))  # the edges hold
    assert load_calibration(path).phases["forward"]


def test_calibrate_never_writes_a_file_its_reader_refuses(tmp_path, monkeypatch):
    measured = load_measured(costspec.load(TOY), [str(FWD)])
    result = calibrate(measured, TOY)
    assert loads_calibration(calibration_text(result, "c.yaml"), "c.yaml").phases["forward"].rho == 3
    result.data["forward"]["kappa"]["sigmoid"]["exact"] = "10000001"  # beyond the reader's 1,000,000
    with pytest.raises(IncompleteCapture, match=r"refusing to write c.yaml: the fit gives a calibration its reader "
                                                r"refuses: c.yaml: forward.kappa.sigmoid: 10000001 is out of range"):
        calibration_text(result, "c.yaml")


def test_a_huge_counter_gives_an_error_not_an_unreadable_file(tmp_path, capsys):
    """A counter of 10^20 fits kappa ~ 10^13: beyond the reader's bound, so nothing is written."""
    csv = _capture(tmp_path, "huge", lambda t: t.replace('"inst","20,969,786"', '"inst","100000000000000000000"')
                   if '"inst","20,969,786"' in t else re.sub(
                       r'(<default domain>:layers\.0\.act:[^\n]*op_fadd_pred_on\.sum","inst",")[0-9,]+"',
                       lambda m: m.group(1) + '100000000000000000000"', t))
    code, out, err = _run(["ncu", "calibrate", TOY, csv, "-o", str(tmp_path / "c.yaml")], capsys)
    assert code == 2 and out == "", err
    assert "refusing to write" in err and "is out of range for a coefficient" in err
    assert not (tmp_path / "c.yaml").exists()
