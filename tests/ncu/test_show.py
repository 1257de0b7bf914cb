"""`costspec ncu show`: per-launch figures of any ncu export, the counters behind them, totals."""
from __future__ import annotations

import json
import subprocess

import pytest

from costspec.ncu.metrics import metrics_for
from costspec.ncu.show import render_json, render_table, show
from tests.common import ROOT, invoke
from tests.ncu.synth_ncu import raw_csv

REAL = ROOT / "tests" / "data" / "ncu" / "real"
T = "sm__ops_path_tensor_"


def test_gardenia_per_launch_and_totals():
    report = show(str(REAL / "gardenia_sgemm.details.csv"))
    assert [(r.id, r.short, r.kclass, r.cc) for r in report.rows] == [
        (0, "randomInit", "other", "8.0"), (1, "randomInit", "other", "8.0"), (2, "gemm_v1", "gemm", "8.0")]
    gemm = report.rows[2].figures
    assert gemm["cuda_fp32"] == 2 * 34_359_738_368_000  # ffma only
    assert gemm["cuda_fp16"] == 4 * 2_149_161_369_600  # hfma, half2 = 2 lanes
    assert gemm["cuda_fp64"] == 0 and gemm["tensor"] is None  # no sm__ops_path_tensor counter: "-", not 0
    assert gemm["dram_bytes"] == 807_658_682_624 and gemm["duration_s"] is None
    assert report.rows[2].sources["dram_bytes"] == ("dram__bytes.sum",)
    # 2 x (838,860,800 + 838,860,800 + 34,359,738,368,000)
    assert report.totals["cuda_fp32"] == 68_722_832_179_200
    assert report.totals["dram_bytes"] == 5_323_503_232 + 5_420_639_360 + 807_658_682_624
    assert report.totals["tensor"] is None
    table = render_table(report)
    assert "68,722,832,179,200" in table and "818,402,825,216" in table
    assert "DRAM bytes [0, 1, 2]: dram__bytes.sum" in table


def test_rtx5090_tensor_core_gemm():
    report = show(str(REAL / "llmperf_rtx5090_k0005_gemm.metrics.details.csv"))
    (row,) = report.rows
    assert row.short == "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8"  # not "Kernel2"
    assert row.figures["tensor"] == 12_532_580_352 and row.sources["tensor"] == (f"{T}src_bf16_dst_fp32.sum",)
    assert row.figures["cuda_fp32"] is None  # the export has no CUDA-core counter
    assert row.figures["dram_bytes"] == 17_500_000  # 17.50 Mbyte read + 0 byte written
    assert row.figures["duration_s"] == pytest.approx(111.81e-6)
    out = json.loads(render_json(report))
    assert out["rows"][0]["class"] == "gemm" and out["rows"][0]["cc"] == "12.0"
    assert out["rows"][0]["sources"]["duration_s"] == ["gpu__time_duration.sum"]
    assert out["totals"]["tensor"] == 12_532_580_352


def test_b200_duration_from_the_section_label():
    report = show(str(REAL / "superbench_cublaslt_b200.details.csv"))
    (row,) = report.rows
    assert row.figures["duration_s"] == pytest.approx(406_240e-9)
    assert row.sources["duration_s"] == ("GPU Speed Of Light Throughput :: Duration",)
    assert all(row.figures[f] is None for f in ("tensor", "cuda_fp32", "cuda_fp16", "cuda_fp64", "dram_bytes"))
    assert any("no FLOP counter" in n for n in report.notes)
    assert "406.240" in render_table(report)


def test_hopper_wgmma_and_mma_sync_side_by_side_with_the_aggregate(tmp_path):
    # a wgmma bf16 GEMM and an mma.sync fp16 kernel on 9.0, every counter of the 9.0 list present
    zero = {m: 0 for m in metrics_for("9.0")}
    gemm = {**zero, f"{T}op_hgmma_src_bf16_dst_fp32_sparsity_off.sum": 2 * 512**3,
            f"{T}src_bf16_dst_fp32.sum": 2 * 512**3, "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 1000}
    small = {**zero, f"{T}op_hmma_src_fp16_dst_fp32_sparsity_off.sum": 4096, f"{T}src_fp16.sum": 4096}
    path = tmp_path / "h100.csv"
    path.write_text(raw_csv([{"kernel": "sm90_xmma_gemm_bf16bf16_bf16f32", "stack": (), "metrics": gemm},
                             {"kernel": "ampere_fp16_s1688gemm_fp16", "stack": (), "metrics": small}]))
    report = show(str(path))
    assert [r.figures["tensor"] for r in report.rows] == [2 * 512**3, 4096]
    assert [r.figures["tensor_aggregate"] for r in report.rows] == [2 * 512**3, 4096]  # the cross-check agrees
    assert f"{T}op_hgmma_src_bf16_dst_fp32_sparsity_off.sum" in report.rows[0].sources["tensor"]
    assert f"{T}op_hmma_src_fp16_dst_fp32_sparsity_off.sum" in report.rows[1].sources["tensor"]
    assert f"{T}src_fp16.sum" in report.rows[1].sources["tensor_aggregate"]
    assert report.totals["tensor"] == 2 * 512**3 + 4096
    assert report.rows[0].figures["cuda_fp32"] == 2000
    table = render_table(report)
    assert "TC aggregate (check)" in table and "CC 9.0" in table.splitlines()[0]


def test_cli_formats_and_bad_input(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        return invoke("ncu", "show", *args)

    result = run(str(REAL / "gardenia_sgemm.details.csv"), "--format", "json")
    assert result.returncode == 0, result.stderr
    assert [launch["name"] for launch in json.loads(result.stdout)["rows"]] == ["0", "1", "2"]
    bad = tmp_path / "bad.csv"
    bad.write_text('"ID","Kernel Name","Metric Name","Metric Value"\n"0","k","x"\n')
    result = run(str(bad))
    assert result.returncode == 2 and "bad.csv:2: row has 3 cells, the header has 4" in result.stderr
    assert "Traceback" not in result.stderr
