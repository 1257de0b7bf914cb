"""Roofline: bytes per op, intensity, bound and time; the CLI's --gpu columns and the plot."""
import pytest

import costspec
from costspec.analysis.gpus import get_gpu
from costspec.analysis.roofline import Efficiency, estimate
from tests.common import ROOT, SPECS

H100 = get_gpu("h100-sxm")


def _estimate(spec, pass_="forward", fusion="default", **dims):
    model = costspec.load(spec)
    values = model.bind(sets=dims)
    report = model.report(pass_, values)
    return model, report, estimate(model, report, values, H100, fusion)


def test_toy_linear_bytes_and_time_by_hand():
    _, report, roof = _estimate(ROOT / "specs/toy_mlp.yaml")
    rows = {r.name: r for r in roof.rows}
    M, D = 128, 1024
    # fp32 Linear: read x (M*D) + W (D*D) + b (D), write y (M*D); 4 bytes each; 10 layers
    assert rows["layers.fc"].bytes == 10 * 4 * (M * D + D * D + D + M * D)
    # sigmoid: read and write M*D
    assert rows["layers.act"].bytes == 10 * 4 * (2 * M * D)
    fc = {r.name: r for r in report.rows}["layers.fc"]
    assert rows["layers.fc"].bound == "CUDA"  # fp32 sgemm: CUDA-core compute bound
    assert rows["layers.fc"].est_time_s == pytest.approx(fc.cuda_flops / 66.9e12)
    assert rows["layers.act"].bound == "memory"
    assert rows["layers.act"].est_time_s == pytest.approx(10 * 4 * 2 * M * D / 3350e9)
    assert roof.time_s == pytest.approx(rows["layers.fc"].est_time_s + rows["layers.act"].est_time_s)


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
@pytest.mark.parametrize("pass_", ["forward", "backward", "train"])
def test_every_spec_has_bytes_and_times_that_add_up(spec, pass_):
    _, report, roof = _estimate(spec, pass_)
    top = [rr for r, rr in zip(report.rows, roof.rows) if r.depth == 0]
    assert roof.bytes == sum(r.bytes for r in top) > 0
    assert roof.time_s == pytest.approx(sum(r.est_time_s for r in top))
    assert all(r.bytes >= 0 and r.est_time_s >= 0 for r in roof.rows)


def test_flash_sdpa_never_moves_scores_unless_unfused():
    _, _, fused = _estimate(ROOT / "specs/vit_b.yaml", B=8)
    _, _, unfused = _estimate(ROOT / "specs/vit_b.yaml", fusion="none", B=8)
    B, h, S, d, L = 8, 12, 197, 64, 12
    sdpa = lambda roof: {r.name: r for r in roof.rows}["blocks.attn.sdpa"].bytes  # noqa: E731
    assert sdpa(fused) == L * 2 * (3 * B * h * S * d + B * h * S * d)  # bf16: q, k, v in, O out
    assert sdpa(unfused) - sdpa(fused) == L * 2 * 6 * B * h * S * S


def test_bounds_move_from_memory_to_compute_with_batch():
    _, _, small = _estimate(ROOT / "specs/vit_b.yaml", B=1)
    _, _, large = _estimate(ROOT / "specs/vit_b.yaml", B=256)
    b1 = {r.name: r.bound for r in small.rows}
    b256 = {r.name: r.bound for r in large.rows}
    assert b1["blocks.mlp.act"] == b256["blocks.mlp.act"] == "memory"
    assert b256["blocks.mlp.fc1"] == "TC"
    assert 0 < small.mfu < large.mfu <= 1


def test_efficiency_factors_scale_the_time():
    model, report, roof = _estimate(ROOT / "specs/vit_b.yaml", B=64)
    slow = estimate(model, report, model.bind(64), H100, "default", Efficiency(tc=0.5, cuda=0.5, memory=0.5))
    assert slow.time_s == pytest.approx(2 * roof.time_s)


@pytest.mark.slow
def test_eval_gpu_columns_and_roofline_plot(cli, tmp_path):
    result = cli("eval", "specs/vit_b.yaml", "--batch", "8", "--gpu", "h100-sxm")
    assert result.returncode == 0, result.stderr
    assert "est. time" in result.stdout and "MFU at that time" in result.stdout
    pytest.importorskip("matplotlib")
    out = tmp_path / "roof.png"
    result = cli("roofline", "specs/vit_b.yaml", "--gpu", "h100-sxm", "--batch", "8", "-o", out)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:4] == b"\x89PNG"
