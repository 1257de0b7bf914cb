"""costspec.ncu.eligibility: the DLProf-style list of layers eligible for Tensor Cores whose kernels ran
without them, from an attribution and through `costspec ncu compare` on a synthetic ncu CSV."""
from __future__ import annotations

from costspec.model import loads
from costspec.ncu.attribute import Attribution, Kernel
from costspec.ncu.eligibility import tensor_core_misses
from tests.common import run_cli as cli

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


def _kernel(i: int, slot: str, tensor: int, cuda: int, role: str = "matmul") -> Kernel:
    return Kernel(i, "k", "ampere_h16816gemm" if tensor else "ampere_sgemm_128x64_nn", "gemm", role, "forward",
                  slot, slot, tensor, cuda, {"fp32": cuda}, i + 2)


def test_eligible_layers_that_ran_without_tensor_cores():
    model = loads(FP16_HEAD)
    attribution = Attribution([_kernel(0, "fc", 524_288, 0), _kernel(1, "lm_head", 0, 16_400_000),
                               _kernel(2, "lm_head", 0, 0, "pointwise")], ("forward",), ["x.csv"], True, "7.0")
    lines = tensor_core_misses(attribution, model, model.bind())
    assert lines[0].endswith("ran without them (DLProf-style):") and len(lines) == 2
    assert ("forward: lm_head (fp16): 1 matmul kernel(s) (ampere_sgemm_128x64_nn), 16,400,000 CUDA-core FLOPs"
            in lines[1])
    assert "N = 1001 is not a multiple of 8" in lines[1]
    fine = Attribution([_kernel(0, "fc", 524_288, 0)], ("forward",), ["x.csv"], True, "8.0")
    assert tensor_core_misses(fine, model, model.bind()) == [
        "eligible for Tensor Cores but ran without them (DLProf-style): none"]
    blind = Attribution([], ("forward",), ["x.csv"], False, "8.0")
    assert "unknown" in tensor_core_misses(blind, model)[0]


ODD = """\
costspec: 1
name: tiny_odd
dims: {B: 2, S: 4, C: 8, V: 13}
precision: {dtype: bf16}
input: [B, S, C]
layers:
  - linear: {out: C}
    name: fc
  - lm_head: {vocab: V}
"""


def test_ncu_compare_lists_the_layer_that_ran_without_tensor_cores(tmp_path):
    """A synthetic ncu CSV: fc's GEMM has Tensor-Core ops, lm_head's (N = 13) ran as an sgemm on CUDA cores."""
    from tests.ncu.synth_ncu import FFMA, TC_BF16_H100, raw_csv

    spec = tmp_path / "odd.yaml"
    spec.write_text(ODD)
    F = "costspec:forward"
    kernels = [{"kernel": "nvjet_tst_64x8_64x16_1x4_h_bz_bias_TNT", "stack": (F, "tiny_odd", "fc"),
                "metrics": {TC_BF16_H100: 1024}},
               {"kernel": "void cutlass::Kernel<cutlass_80_simt_sgemm_64x64_8x5_nt_align1>(T1::Params)",
                "stack": (F, "tiny_odd", "lm_head"), "metrics": {FFMA: 832}}]
    csv = tmp_path / "run.csv"
    csv.write_text(raw_csv(kernels))
    out = cli("ncu", "compare", str(spec), str(csv), "--pass", "forward")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    i = lines.index("eligible for Tensor Cores but ran without them (DLProf-style):")
    assert lines[i + 1].startswith("  forward: lm_head (bf16): 1 matmul kernel(s) "
                                   "(cutlass_80_simt_sgemm_64x64_8x5_nt_align1), 1,664 CUDA-core FLOPs")
    assert "N = 13 is not a multiple of 8: pad to 16" in lines[i + 1]
    assert not lines[i + 2].startswith("  forward: fc")
