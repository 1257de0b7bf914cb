"""costspec.ncu.kernels: kernel classification, NVTX layer lookup, counters -> FLOPs, toy-network totals."""
from __future__ import annotations

from collections import defaultdict

import pytest

from costspec.core.errors import CostspecError
from costspec.ncu.kernels import KERNEL_CLASSES, classify, flops_from_metrics, inner_range
from costspec.ncu.metrics import CUDA_CORE_METRICS, cuda_core_metric, metrics_for
from costspec.ncu.parse import parse_csv
from tests.common import DATA

DATA = DATA / "ncu"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ampere_sgemm_64x32_sliced1x4_nn", "gemm"),
        ("volta_sgemm_128x64_nn", "gemm"),
        ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn", "gemm"),
        ("void cutlass::Kernel<cutlass_80_simt_sgemm_64x64_8x5_nt_align1>(T1::Params)", "gemm"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm"),
        ("nvjet_tst_64x8_64x16_1x4_h_bz_splitK_bias_TNT", "gemm"),  # in-kernel split-K is still the GEMM
        ("void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>"
         "(cublasSplitKParams<float>, const float *, const float *, float *)", "splitk_reduce"),
        ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, "
         "false>(cublasLt::cublasSplitKParams<float>, const __nv_bfloat16 *)", "splitk_reduce"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase &, "
         "at::native::GeluType)::[lambda() (instance 1)]::operator ()() const::[lambda(float) (instance 1)], "
         "at::detail::Array<char *, 2>>(int, T2, T3)", "elementwise"),
        ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<"
         "float, float, float, at::native::binary_internal::MulFunctor<float>>>(at::TensorIteratorBase &, const T1 &)"
         "::[lambda(int) (instance 1)]>(int, T3)", "elementwise"),
        ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)"
         "::[lambda() (instance 3)]::operator ()() const::[lambda(float) (instance 1)], at::detail::Array<char *, 2>, "
         "TrivialOffsetCalculator<1, unsigned int>, char *, at::native::memory::LoadWithCast<1>, "
         "at::native::memory::StoreWithCast<1>>(int, T1, T2, T3, T4, T5, T6)", "elementwise"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormOps<float, float, float, "
         "float>, unsigned int, float, 4>>(T3)", "reduction"),  # a vector norm is a reduction, not a norm layer
        ("void cub::DeviceReduceKernel<cub::DeviceReducePolicy<float, float, int>::Policy600, float *>(float *)",
         "reduction"),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
         "cutlass::half_t>, false, false, false, false, true, true, false>(Flash_fwd_params)", "attention"),
        ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, "
         "true, 64, 64, 64, true, true>::Params)", "attention"),
        ("void attention_kernel_batched_impl<AttentionKernel<cutlass::half_t, cutlass::arch::Sm80, true, 64, 64, 64>>"
         "(T1::Params)", "attention"),
        ("void (anonymous namespace)::efficient_attention_forward_kernel<float>(float *)", "attention"),
        ("cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x64_4x1x1_kernel0_0", "attention"),
        ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_warpsize2x2x1_g1_"
         "tensor16x8x8_kernel", "conv"),
        ("void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int)", "conv"),
        ("void cudnn::cnn::conv2d_grouped_direct_kernel<false, true, false, false, 0, 0, int, float, float, float>"
         "(cudnn::cnn::GroupedDirectFpropParams)", "conv"),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, const T1 *)",
         "norm"),
        ("void at::native::(anonymous namespace)::LayerNormForwardCUDAKernel<float, float>(long, float, const T1 *)",
         "norm"),
        ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<float, float>(const T1 *)", "norm"),
        ("void cuApplyLayerNorm<float, float, float>(float *, float *)", "norm"),
        ("void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, float, float, float, int>()", "norm"),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
         "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(T4 *, const T2 *, int)", "softmax"),
        ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(T2 *, const T1 *, int)",
         "softmax"),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, "
         "at::native::(anonymous namespace)::SoftMaxBackwardEpilogue>(T1 *, const T3 *, const T3 *, long)", "softmax"),
        ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
         "at::native::templates::cuda::normal_and_transform<float, float>>(long, at::PhiloxCudaState, T3, T4)", "other"),
        ("void at::native::index_put_kernel_impl<float>(int)", "other"),
        ("triton_poi_fused_add_mul_0", "elementwise"),
        ("triton_red_fused_sum_1", "reduction"),
    ],
)
def test_classify(name, kind):
    assert kind in KERNEL_CLASSES
    assert classify(name) == kind


def test_inner_range_picks_innermost_known_layer():
    known = {"blocks.0.mlp.fc1", "blocks.0.mlp", "blocks.0"}
    stack = ("model", "blocks.0", "blocks.0.mlp", "blocks.0.mlp.fc1", "aten::addmm")
    assert inner_range(stack, known) == "blocks.0.mlp.fc1"
    assert inner_range(stack, ["blocks.0"]) == "blocks.0"
    assert inner_range(stack, ()) is None
    assert inner_range((), known) is None


def _ops(**counts: float) -> dict[str, float]:
    return {cuda_core_metric(op): float(value) for op, value in counts.items()}


def test_cuda_core_conventions():
    metrics = _ops(fadd=1, fmul=2, ffma=3, dadd=4, dmul=5, dfma=6, hadd=7, hmul=8, hfma=9)
    flops = flops_from_metrics(metrics)
    assert flops["cuda_fp32"] == 1 + 2 + 2 * 3
    assert flops["cuda_fp64"] == 4 + 5 + 2 * 6
    assert flops["cuda_fp16"] == 2 * 7 + 2 * 8 + 4 * 9  # ncu half roofline: half2 = 2 lanes
    assert flops["fp16_convention"] == "roofline"
    assert flops_from_metrics(metrics, "nvprof")["cuda_fp16"] == 7 + 8 + 2 * 9
    assert flops["missing"] == () and flops["tensor"] == 0 and flops["tensor_method"] == "none"


def test_missing_counters_are_reported_not_zeroed_silently():
    flops = flops_from_metrics(_ops(ffma=10))
    assert flops["cuda_fp32"] == 20
    assert flops["missing"] == tuple(m for m in CUDA_CORE_METRICS if "ffma" not in m)


def test_unknown_fp16_convention():
    with pytest.raises(CostspecError, match="fp16_convention"):
        flops_from_metrics({}, "half")  # type: ignore[arg-type]


def test_tensor_sum_and_no_double_counting():
    t = "sm__ops_path_tensor_"
    metrics = {
        f"{t}src_fp16.sum": 1000.0,  # Hopper aggregate of the wgmma + mma.sync fp16 counters below
        f"{t}src_bf16_dst_fp32.sum": 500.0,  # no per-instruction counter for bf16 here: counted
        f"{t}src_fp8_sparsity_off.sum": 70.0,
        f"{t}src_fp8_sparsity_on.sum": 30.0,
        f"{t}src_fp8.sum": 100.0,  # aggregate of the two splits above: left out
        f"{t}op_hgmma_src_fp16_sparsity_off.sum": 900.0,  # wgmma
        f"{t}op_hmma_src_fp16_dst_fp32_sparsity_off.sum": 60.0,  # mma.sync
        f"{t}src_fp16.sum.per_second": 5.0,  # not a .sum counter
    }
    flops = flops_from_metrics(metrics)
    assert flops["tensor"] == 900 + 60 + 500 + 70 + 30  # wgmma + mma.sync, never src_fp16 on top
    assert set(flops["tensor_counters"]) == {
        f"{t}op_hgmma_src_fp16_sparsity_off.sum", f"{t}op_hmma_src_fp16_dst_fp32_sparsity_off.sum",
        f"{t}src_bf16_dst_fp32.sum", f"{t}src_fp8_sparsity_off.sum", f"{t}src_fp8_sparsity_on.sum"}
    assert flops["ignored"] == (f"{t}src_fp8.sum",)
    # cross-check: the same kernel counted from the aggregate: src_fp16 in place of 900 + 60
    assert flops["tensor_aggregate_counters"] == (f"{t}src_fp16.sum",)
    assert flops["tensor_aggregate"] == 1000 + 500 + 70 + 30
    assert flops["tensor_method"] == "ops_counters"


def test_no_aggregate_no_cross_check():
    flops = flops_from_metrics({"sm__ops_path_tensor_src_bf16_dst_fp32.sum": 8.0})
    assert flops["tensor"] == 8 and flops["tensor_aggregate"] is None and flops["tensor_aggregate_counters"] == ()


def test_hopper_wgmma_plus_mma_sync_with_cc():
    t = "sm__ops_path_tensor_"
    # a wgmma bf16 GEMM (op_hmma reads 0 for wgmma work) plus a small mma.sync tf32 kernel's worth
    metrics = {name: 0.0 for name in metrics_for("9.0")}
    metrics.update({f"{t}op_hgmma_src_bf16_dst_fp32_sparsity_off.sum": 2 * 4096**3,
                    f"{t}op_hmma_src_tf32_dst_fp32_sparsity_off.sum": 2 * 128**3,
                    f"{t}src_bf16_dst_fp32.sum": 2 * 4096**3, f"{t}src_tf32_dst_fp32.sum": 2 * 128**3})
    flops = flops_from_metrics(metrics, cc="9.0")
    assert flops["tensor"] == 2 * 4096**3 + 2 * 128**3 == flops["tensor_aggregate"]
    assert flops["tensor_by_dtype"]["bf16"] == 2 * 4096**3 and flops["tensor_by_dtype"]["tf32"] == 2 * 128**3
    assert set(flops["tensor_aggregate_counters"]) == {f"{t}src_fp16.sum", f"{t}src_bf16_dst_fp32.sum",
                                                       f"{t}src_tf32_dst_fp32.sum", f"{t}src_int8.sum",
                                                       f"{t}src_int1.sum"}
    assert flops["missing"] == ()


def test_blackwell_packed_fp32_counts_two_lanes():
    metrics = {**_ops(fadd=10, fmul=20, ffma=30),
               "smsp__sass_thread_inst_executed_op_fadd2_pred_on.sum": 1.0,
               "smsp__sass_thread_inst_executed_op_fmul2_pred_on.sum": 2.0,
               "smsp__sass_thread_inst_executed_op_ffma2_pred_on.sum": 3.0}
    flops = flops_from_metrics(metrics)
    assert flops["cuda_fp32"] == 10 + 20 + 2 * 30 + 2 * 1 + 2 * 2 + 4 * 3  # FFMA2 = 2 lanes x 2 FLOPs
    assert "smsp__sass_thread_inst_executed_op_ffma2_pred_on.sum" in flops["cuda_counters"]
    # on 10.0 an export without them says so; on 9.0 they are not expected
    ffma2 = "smsp__sass_thread_inst_executed_op_ffma2_pred_on.sum"
    assert ffma2 in flops_from_metrics(_ops(ffma=1), cc="10.0")["missing"]
    assert not any("ffma2" in m for m in flops_from_metrics(_ops(ffma=1), cc="9.0")["missing"])


def test_blackwell_ultra_fp8_from_tcgen05_counters():
    t = "sm__ops_path_tensor_"
    metrics = {f"{t}op_utcqmma_src_fp8_dst_fp32_sparsity_off.sum": 64.0,  # no src_fp8 aggregate on 10.3
               f"{t}src_fp4_fp6_dst_fp32.sum": 16.0}
    flops = flops_from_metrics(metrics, cc="10.3")
    assert flops["tensor"] == 80 and flops["tensor_aggregate"] is None
    assert flops["tensor_by_dtype"]["fp8"] == 64 and flops["tensor_by_dtype"]["fp4_fp6"] == 16


def test_tensor_by_dtype_and_missing_with_cc():
    t = "sm__ops_path_tensor_"
    metrics = {**_ops(fadd=0, fmul=0, ffma=0, hadd=0, hmul=0, hfma=0, dadd=0, dmul=0, dfma=0),
               f"{t}src_fp16_dst_fp32_sparsity_off.sum": 64.0, f"{t}src_bf16_dst_fp32_sparsity_off.sum": 8.0}
    flops = flops_from_metrics(metrics, cc="8.0")
    assert flops["tensor"] == 72
    assert flops["tensor_by_dtype"] == {"fp16": 64.0, "bf16": 8.0, "tf32": 0.0, "int8": 0.0, "int4": 0.0,
                                        "int1": 0.0, "fp64": 0.0}
    assert f"{t}src_fp16_dst_fp16_sparsity_off.sum" in flops["missing"]
    assert f"{t}src_fp16_dst_fp32_sparsity_off.sum" not in flops["missing"]


def test_volta_tensor_flops_from_instructions():
    (gemm, _) = parse_csv(DATA / "raw_old_kernel_time.csv")
    flops = flops_from_metrics(gemm.metrics, cc=gemm.cc)
    assert gemm.cc == "7.0"
    assert flops["tensor"] == 512 * 32_768 and flops["tensor_method"] == "volta_inst_x512"
    assert flops["cuda_fp32"] == 2 * 131_072


# -- the toy network of shared/reference/ncu-vs-analytic-toy-network.md ---------------------------

N, D, M = 10, 1024, 128
LAYERS = {f"layers.{i}.{part}" for i in range(N) for part in ("fc", "act")} | {"loss"}


def _totals(name: str) -> tuple[dict[str, float], dict[str, float]]:
    by_kind: dict[str, float] = defaultdict(float)
    by_layer: dict[str, float] = defaultdict(float)
    for record in parse_csv(DATA / name):
        flops = flops_from_metrics(record.metrics)
        assert flops["missing"] == () and flops["tensor"] == 0 and flops["cuda_fp16"] == flops["cuda_fp64"] == 0
        by_kind[classify(record.kernel_name)] += flops["cuda_fp32"]
        by_layer[inner_range(record.nvtx_stack, LAYERS)] += flops["cuda_fp32"]
    return dict(by_kind), dict(by_layer)


def test_toy_forward_reproduces_the_notes():
    by_kind, by_layer = _totals("toy_forward.details.csv")
    assert by_kind == {"gemm": 2_702_704_640, "splitk_reduce": 3_932_160, "elementwise": 20_969_786}
    assert sum(by_kind.values()) == 2_727_606_586
    assert by_kind["gemm"] - N * 2 * D * D * M == 18_350_080  # "GEMM abs diff"
    assert by_kind["elementwise"] - N * D * M == 19_659_066  # "Activation abs diff"
    assert all(by_layer[f"layers.{i}.fc"] == 270_270_464 + 393_216 for i in range(N))
    assert sum(by_layer[f"layers.{i}.act"] for i in range(N)) == 20_969_786
    assert all(value == int(value) for value in by_layer.values())
    assert None not in by_layer


def test_toy_backward_reproduces_the_notes():
    by_kind, by_layer = _totals("toy_backward.details.csv")
    assert by_kind["gemm"] == 5_120_196_608
    assert by_kind["splitk_reduce"] + by_kind["reduction"] == 10_824_176  # the notes' "KSplit" group
    assert by_kind["elementwise"] == 3_932_160
    assert sum(by_kind.values()) == 5_134_952_944
    theory = (N - 1) * 4 * D * D * M + 2 * D * D * M
    assert by_kind["gemm"] - theory == 19_922_944  # "GEMM (bwd) abs diff"
    assert by_layer["layers.0.fc"] == 2 * 134_217_728 + 1_048_576  # wgrad only
    assert all(by_layer[f"layers.{i}.fc"] == 2 * 269_484_032 + 1_179_648 for i in range(1, N))
    assert all(by_layer[f"layers.{i}.act"] == 393_216 for i in range(N))
    assert by_layer["loss"] == 207_344


def test_toy_fixture_grouped_counts_match_the_notes_table():
    grouped: dict[tuple[str, str], float] = defaultdict(float)
    for record in parse_csv(DATA / "toy_backward.details.csv"):
        short = record.kernel_name.replace("void ", "").split("<")[0].split("(")[0].split("::")[-1]
        if short == "Kernel":  # cutlass::Kernel<cutlass_80_simt_sgemm_64x64_8x5_nt_align1>
            short = "cutlass_80_simt_sgemm_64x64_8x5_nt"
        for op in ("fadd", "ffma", "fmul"):
            grouped[(short, op)] += record.metrics[cuda_core_metric(op)]
    nonzero = {key: value for key, value in grouped.items() if value}
    assert nonzero == {
        ("ampere_sgemm_32x128_tn", "ffma"): 1_342_177_280, ("ampere_sgemm_32x128_tn", "fmul"): 10_485_760,
        ("cutlass_80_simt_sgemm_64x64_8x5_nt", "ffma"): 1_207_959_552,
        ("cutlass_80_simt_sgemm_64x64_8x5_nt", "fmul"): 9_437_184,
        ("elementwise_kernel", "fadd"): 131_072, ("elementwise_kernel", "fmul"): 262_144,
        ("reduce_kernel", "fadd"): 207_344,
        ("splitKreduce_kernel", "fadd"): 9_437_184, ("splitKreduce_kernel", "fmul"): 1_179_648,
        ("vectorized_elementwise_kernel", "fadd"): 1_179_648, ("vectorized_elementwise_kernel", "fmul"): 2_359_296,
    }
