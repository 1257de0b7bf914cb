"""The GPU catalog: every required GPU, peaks per engine, sources, user catalogs."""
import pytest

from costspec.analysis.gpus import catalog, get_gpu
from costspec.core.errors import UsageError

REQUIRED = ["v100-sxm2", "t4", "a100-40gb", "a100-80gb", "a10", "l4", "l40s", "h100-sxm", "h100-pcie", "h200",
            "b200", "rtx-4090"]


@pytest.mark.parametrize("key", REQUIRED)
def test_every_required_gpu_has_peaks_bandwidth_and_a_source(key):
    gpu = get_gpu(key)
    assert gpu.cuda_peak("fp32") > 0 and gpu.bandwidth > 0 and gpu.memory_gb > 0 and gpu.source
    assert gpu.tensor_peak("fp16") > gpu.cuda_peak("fp32")  # Tensor Cores out-run CUDA cores


def test_h100_sxm_matches_the_datasheet():
    h100 = get_gpu("h100-sxm")
    assert h100.tensor_peak("bf16") == pytest.approx(989.4e12) and h100.cuda_peak() == pytest.approx(66.9e12)
    assert h100.bandwidth == pytest.approx(3350e9)


def test_missing_peaks_and_unknown_gpus_are_clear_errors():
    with pytest.raises(UsageError, match="v100-sxm2 has no Tensor-Core bf16 peak"):
        get_gpu("v100-sxm2").tensor_peak("bf16")
    with pytest.raises(UsageError, match="unknown GPU 'h1000'"):
        get_gpu("h1000")


def test_a_user_catalog_adds_gpus(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("gpus:\n  mygpu: {name: My GPU, memory_gb: 8, memory_bw_gbps: 100, tensor: {bf16: 10},"
                    " cuda: {fp32: 1}, source: [lab measurement]}\n")
    gpus = catalog(path)
    assert gpus["mygpu"].tensor_peak("bf16") == 10e12 and "h100-sxm" in gpus
