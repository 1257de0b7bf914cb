"""costspec.analysis.alignment: the Tensor-Core alignment of every GEMM (the geometry of every matmul op),
the flags on the zoo, and --alignment strict (misaligned layers charged to CUDA cores where the GPU does so).
The DLProf-style list of eligible layers whose kernels ran without Tensor Cores: tests/ncu/test_eligibility.py."""
from __future__ import annotations

import pytest

from costspec.analysis.alignment import apply, check, falls_back, multiples, strict_report
from costspec.core.conventions import Precision
from costspec.core.errors import UsageError
from costspec.model import load, loads
from tests.common import ROOT
from tests.common import invoke as cli

SPECS = ROOT / "specs"

FP16_HEAD = """
costspec: 1
name: odd_head
dims:
  B: {value: 2}
  S: {value: 64}
  C: {value: 64}
  V: {value: 1001}
input: [B, S, C]
precision: {dtype: fp16}
layers:
  - linear: {out: C}
    name: fc
  - lm_head: {vocab: V}
"""




def test_multiples_are_16_bytes_and_128_bytes():
    assert multiples(Precision("bf16")) == (8, 64)
    assert multiples(Precision("tf32")) == (4, 32)
    assert multiples(Precision("fp8_e4m3")) == (16, 128) and multiples(Precision("int8")) == (16, 128)
    assert multiples(Precision("nvfp4")) == (32, 256)


def test_gpt2_flags_its_lm_head_and_nothing_else():
    model = load(SPECS / "gpt2_small.yaml")
    flags = check(model, model.bind())
    assert [f.text() for f in flags] == [
        "lm_head: N = 50257 is not a multiple of 8: pad to 50264 (or 50304 for multiples of 64)"]


@pytest.mark.parametrize("spec, expected", [
    ("bert_base", []), ("llama_1b", []), ("vit_b", []), ("vit_l", []), ("toy_mlp", []),
    # SAM's windowed blocks: the relative-position einsum's output is the 14-wide window side
    ("sam_vit_b", ["blocks[others].attn.rel_pos"]), ("deepencoder", ["sam.blocks[others].attn.rel_pos"]),
    # patch 14 on RGB: the implicit GEMM's K = 3 * 14 * 14 = 588
    ("clip_vit_l14", ["patch_embed.proj"]), ("vit_h", ["patch_embed.proj"]),
])
def test_the_zoo(spec, expected):
    model = load(SPECS / f"{spec}.yaml")
    assert [f.layer for f in check(model, model.bind())] == expected


def test_every_gemm_matches_the_matmul_flops():
    """sum over an op's gemms of 2*m*n*k*count = its forward matmul FLOPs (gemm, conv and sdpa classes)."""
    import sympy

    for spec in ("gpt2_small", "llama_1b", "sam_vit_b", "vit_b"):
        model = load(SPECS / f"{spec}.yaml")
        for node in model.op_nodes():
            gemms = node.op.gemms(node.call)
            matmul = sum(node.forward().matmul.values(), sympy.Integer(0))
            if node.call.attrs._values.get("causal_flops") == "useful":
                continue
            geometric = sum((2 * g.m * g.n * g.k * g.count for g in gemms), sympy.Integer(0))
            assert sympy.simplify(model.dims.expand(geometric - matmul)) == 0, (spec, node.name)


def test_fp32_layers_are_not_checked():
    model = loads(FP16_HEAD.replace("dtype: fp16", "dtype: fp32"))
    assert check(model, model.bind()) == []


def test_strict_charges_misaligned_layers_to_cuda_cores_on_volta_only():
    model = loads(FP16_HEAD)
    values = model.bind()
    report = model.report("forward", values)
    head = next(r for r in report.rows if r.name == "lm_head")
    warned, flags, lines = apply(model, report, values, "warn", "7.0")
    assert warned is report and [f.layer for f in flags] == ["lm_head"] and "pad to 1008" in lines[0]
    strict, _, lines = apply(model, report, values, "strict", "7.0")
    moved = next(r for r in strict.rows if r.name == "lm_head")
    assert (moved.tc_flops, moved.cuda_flops) == (0, head.cuda_flops + head.tc_flops)
    assert moved.matmul_engine == "CUDA(fallback)"
    assert (strict.tc, strict.cuda) == (report.tc - head.tc_flops, report.cuda + head.tc_flops)
    assert strict.total == report.total
    ampere, _, lines = apply(model, report, values, "strict", "8.0")
    assert ampere is report and "peak is kept" in lines[-1]
    with pytest.raises(UsageError, match="needs --gpu"):
        apply(model, report, values, "strict", None)
    assert falls_back("7.5") and not falls_back("9.0")


def test_strict_moves_block_rows_too():
    model = load(SPECS / "sam_vit_b.yaml")
    values = model.bind()
    report = model.report("forward", values)
    flags = check(model, values)
    strict = strict_report(report, flags)
    moved = sum(r.tc_flops for r in report.rows if r.name == "blocks[others].attn.rel_pos")
    assert moved > 0 and strict.tc == report.tc - moved
    attn_before = next(r for r in report.rows if r.name == "blocks[others].attn")
    attn_after = next(r for r in strict.rows if r.name == "blocks[others].attn")
    assert attn_after.tc_flops == attn_before.tc_flops - moved
    assert attn_after.cuda_flops == attn_before.cuda_flops + moved


@pytest.mark.slow
def test_cli_eval_prints_the_flag():
    out = cli("eval", str(SPECS / "gpt2_small.yaml"), "--depth", "1")
    assert out.returncode == 0, out.stderr
    assert "lm_head: N = 50257 is not a multiple of 8: pad to 50264 (or 50304 for multiples of 64)" in out.stdout
    out = cli("eval", str(SPECS / "gpt2_small.yaml"), "--format", "json")
    assert '"tensor_core_alignment"' in out.stdout
    out = cli("eval", str(SPECS / "vit_b.yaml"))
    assert "Tensor-Core alignment" not in out.stdout
    out = cli("eval", str(SPECS / "gpt2_small.yaml"), "--alignment", "strict")
    assert out.returncode == 2 and "needs --gpu" in out.stderr


def test_cli_strict_on_volta(tmp_path):
    spec = tmp_path / "odd_head.yaml"
    spec.write_text(FP16_HEAD)
    warn = cli("eval", str(spec), "--gpu", "v100-sxm2")
    strict = cli("eval", str(spec), "--gpu", "v100-sxm2", "--alignment", "strict")
    assert warn.returncode == strict.returncode == 0, strict.stderr
    head = next(line for line in strict.stdout.splitlines() if line.startswith("lm_head"))
    assert "CUDA(fallback)" in head and "CUDA(fallback)" not in warn.stdout
    assert "runs these layers without Tensor Cores" in strict.stdout
