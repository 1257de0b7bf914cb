"""Genuine ncu exports from public repositories (tests/data/ncu/real/SOURCES.md), read offline.

The expected values were read by hand from the files; each is quoted from its CSV line.
"""
from __future__ import annotations

import shutil

import pytest

import costspec
from costspec.ncu.compare import compare, render_table
from costspec.ncu.inputs import load_measured
from costspec.ncu.kernels import flops_from_metrics
from costspec.ncu.parse import NcuFormatError, parse_csv
from tests.common import ROOT, invoke

REAL = ROOT / "tests" / "data" / "ncu" / "real"
T = "sm__ops_path_tensor_"
SOL = "GPU Speed Of Light Throughput :: "


def _lines(name: str) -> list[str]:
    return (REAL / name).read_text(encoding="utf-8").splitlines()


def test_every_real_export_parses():
    files = sorted(REAL.glob("*.csv"))
    assert [f.name for f in files] == [
        "gardenia_sgemm.details.csv", "llmperf_rtx5090_k0005_gemm.metrics.details.csv",
        "llmperf_rtx5090_k0005_roofline_section.details.csv", "superbench_cublaslt_b200.details.csv"]
    for path in files:
        assert parse_csv(path), path.name
    # the copies are the files of shared/reference/ncu-samples, byte for byte
    shared = ROOT.parent.parent / "shared" / "reference" / "ncu-samples"
    for path in files:
        if (shared / path.name).is_file():
            assert (shared / path.name).read_bytes() == path.read_bytes()


def test_gardenia_sgemm_a100_thousands_separators():
    # ncu 2023/24 details page, no rule columns, `--print-fp` values with ',' separators, CC 8.0
    init0, init1, gemm = parse_csv(REAL / "gardenia_sgemm.details.csv")
    assert (init0.id, init1.id, gemm.id) == (0, 1, 2) and gemm.cc == "8.0"
    assert gemm.kernel_name == "void gemm_v1<float>(float *, float *, float *, int, int, int)"
    assert gemm.attributes["Grid Size"] == "(1280, 1280, 1)" and gemm.line == 32
    # "...","dram__bytes.sum","byte","807,658,682,624.00"
    assert gemm.metrics["dram__bytes.sum"] == 807_658_682_624
    # "...op_ffma_pred_on.sum","inst","34,359,738,368,000.00" and "...op_hfma_pred_on.sum","inst","2,149,161,369,600.00"
    flops = flops_from_metrics(gemm.metrics, cc=gemm.cc)
    assert flops["cuda_fp32"] == 2 * 34_359_738_368_000
    assert flops["cuda_fp16"] == 4 * 2_149_161_369_600
    assert init0.metrics["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"] == 838_860_800
    assert init0.metrics["smsp__cycles_elapsed.avg"] == pytest.approx(5_145_083_088.72)


def test_rtx5090_2025_rows_without_rule_cells():
    # ncu 2025: 20-column header, metric rows end after "Metric Value" with a trailing comma (16 cells)
    lines = _lines("llmperf_rtx5090_k0005_gemm.metrics.details.csv")
    assert lines[0].count('","') == 19 and lines[1].endswith('"17.50",')
    (gemm,) = parse_csv(REAL / "llmperf_rtx5090_k0005_gemm.metrics.details.csv")
    assert gemm.cc == "12.0" and "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn" in gemm.kernel_name
    assert gemm.metrics["dram__bytes_read.sum"] == 17_500_000  # "Mbyte","17.50"
    assert gemm.metrics["gpu__time_duration.sum"] == pytest.approx(111.81e-6)  # "us","111.81"
    assert gemm.metrics[f"{T}src_bf16_dst_fp32.sum"] == 12_532_580_352  # "","12,532,580,352"
    assert f"{T}src_bf16_dst_bf16.sum" in gemm.missing and "flop_count_sp.sum" in gemm.missing  # "n/a"
    # labels from a section are keyed by section; the rule rows (full width) are skipped
    assert gemm.metrics[SOL + "Duration"] == pytest.approx(111.81e-6)
    assert gemm.metrics[SOL + "Compute (SM) Throughput"] == pytest.approx(32.10)
    flops = flops_from_metrics(gemm.metrics, cc=gemm.cc)
    assert flops["tensor"] == 12_532_580_352 and flops["tensor_by_dtype"]["bf16"] == 12_532_580_352


def test_rtx5090_roofline_section_with_body_item_label():
    (k,) = parse_csv(REAL / "llmperf_rtx5090_k0005_roofline_section.details.csv")
    chart = "GPU Speed Of Light Roofline Chart :: "
    # the same label in four body items: one key each
    for body in ("Single Precision Roofline", "Double Precision Roofline", "Single Precision Achieved Value",
                 "Double Precision Achieved Value"):
        assert k.metrics[f"{chart}{body} :: SM Frequency"] == pytest.approx(2.01e9)  # "Ghz","2.01"
    assert k.metrics[f"{chart}Theoretical Predicated-On FFMA Thread Instructions Executed"] == 21_760  # no body item
    assert k.units[f"{chart}Single Precision Achieved Value :: DRAM Bandwidth"] == "byte/second"
    assert k.metrics[f"{chart}Single Precision Achieved Value :: DRAM Bandwidth"] == pytest.approx(156.55e9)


def test_b200_full_set_with_program_output_before_the_header():
    lines = _lines("superbench_cublaslt_b200.details.csv")
    assert lines[0].startswith("==PROF== Connected") and lines[1].startswith("2208")  # the program's own stdout
    (k,) = parse_csv(REAL / "superbench_cublaslt_b200.details.csv")
    assert (k.id, k.cc, k.line) == (0, "10.0", 5)
    assert k.kernel_name.startswith("cutlass3x_sm100_tensorop_s64x256x32gemm_f8_f8_f32_f16_f16")
    assert k.metrics[SOL + "Duration"] == pytest.approx(406_240e-9)  # "ns","406240"
    assert k.metrics[SOL + "Memory Throughput"] == pytest.approx(21.68)  # "%","21.68"
    assert k.metrics["Occupancy :: Theoretical Occupancy"] == pytest.approx(18.75)
    assert k.attributes["Launch Statistics :: Cluster Scheduling Policy"] == "PolicySpread"
    assert k.metrics["Launch Statistics :: Registers Per Thread"] == 168


def _b200_cut(*rows: str) -> str:
    lines = _lines("superbench_cublaslt_b200.details.csv")
    return "\n".join([lines[3], *rows]) + "\n"


def test_same_label_in_two_sections_is_two_metrics():
    # cut from the B200 export: its SOL "Memory Throughput" row, and the same row moved to the Memory Workload
    # Analysis section, where ncu prints that label in Gbyte/second (the value 1.5 is made up for the test)
    lines = _lines("superbench_cublaslt_b200.details.csv")
    sol = next(line for line in lines if '"Memory Throughput","%"' in line)
    mwa = sol.replace('"GPU Speed Of Light Throughput"', '"Memory Workload Analysis"').replace(
        '"Memory Throughput","%","21.68"', '"Memory Throughput","Gbyte/second","1.5"')
    (k,) = parse_csv(_b200_cut(sol, mwa))
    assert k.metrics[SOL + "Memory Throughput"] == pytest.approx(21.68)
    assert k.metrics["Memory Workload Analysis :: Memory Throughput"] == pytest.approx(1.5e9)
    # a metric *name* has one value per launch wherever it appears: a second value is still an error
    named = sol.replace('"Memory Throughput","%","21.68"', '"gpu__time_duration.sum","ns","406240"')
    other = named.replace('"GPU Speed Of Light Throughput"', '"Memory Workload Analysis"').replace("406240", "5")
    with pytest.raises(NcuFormatError, match="appears again with a different value"):
        parse_csv(_b200_cut(named, other))


def test_short_row_only_when_the_missing_cells_are_rule_cells():
    lines = _lines("superbench_cublaslt_b200.details.csv")
    row = next(line for line in lines if '"Duration","ns"' in line)
    cut = row[: row.rindex('"ns"')]  # `..."Duration",`: 14 cells, no "Metric Value" cell: not a rule-less row
    with pytest.raises(NcuFormatError, match=r":2: row has 14 cells, the header has 20"):
        parse_csv(_b200_cut(cut))


def test_compare_takes_the_cc_from_the_csv_without_a_sidecar(tmp_path):
    fwd = tmp_path / "toy.csv"
    shutil.copy(ROOT / "tests" / "data" / "ncu" / "toy_forward.details.csv", fwd)
    table = render_table(compare(load_measured(costspec.load(ROOT / "specs" / "toy_mlp.yaml"), [str(fwd)], pass_="forward")))
    assert "measured on: no sidecar; CC 8.0 from the CSV" in table.splitlines()[0]
    (tmp_path / "toy.json").write_text('{"pass": "forward", "gpu": "A100"}', encoding="utf-8")  # no CC in it
    table = render_table(compare(load_measured(costspec.load(ROOT / "specs" / "toy_mlp.yaml"), [str(fwd)])))
    assert "measured on: A100 (CC 8.0, ncu ?)" in table.splitlines()[0]


def test_show_cli_on_every_real_export():
    for path in sorted(REAL.glob("*.csv")):
        result = invoke("ncu", "show", path)
        assert result.returncode == 0, result.stderr
        assert "ncu show" in result.stdout.splitlines()[0]
