"""`costspec ncu run`: the printed ncu command per architecture, and the no-GPU path."""
from __future__ import annotations

import shlex

import pytest

from costspec.ncu.metrics import metrics_for
from costspec.ncu.run import plan_run, resolve_arch, runner_argv
from tests.common import invoke as cli

T = "sm__ops_path_tensor_"




def _printed(*args: str) -> tuple[dict[str, str], list[str]]:
    result = cli("ncu", "run", *args, "--print-command")
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    words = shlex.split(first)
    env = dict(w.split("=", 1) for w in words[:1])
    return env, words[1:]


def _flag(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


@pytest.mark.parametrize(("how", "cc"), [(("--arch", "9.0"), "9.0"), (("--gpu", "h100-sxm"), "9.0"),
                                         (("--arch", "8.0"), "8.0"), (("--gpu", "a100-80gb"), "8.0")])
def test_print_command_has_the_metric_list_of_the_arch(how, cc, tmp_path):
    out = str(tmp_path / "vit.ncu.csv")
    env, words = _printed("specs/vit_b.yaml", "--batch", "8", "--pass", "train", "-o", out, *how)
    assert env == {"LC_ALL": "C"} and words[0] == "ncu"
    metrics = _flag(words, "--metrics").split(",")
    assert metrics == metrics_for(cc)
    tensor = {m for m in metrics if m.startswith(T)}
    other = "8.0" if cc == "9.0" else "9.0"
    other_only = {m for m in metrics_for(other) if m.startswith(T)} - tensor
    assert tensor and other_only and not other_only & set(metrics)  # only this arch's tensor counters
    if cc == "9.0":
        assert f"{T}src_fp16.sum" in tensor and f"{T}src_bf16_dst_fp32.sum" in tensor  # cross-check aggregates
        assert f"{T}op_hgmma_src_fp16_sparsity_off.sum" in tensor  # wgmma
        assert f"{T}op_hmma_src_fp16_dst_fp32_sparsity_off.sum" in tensor  # mma.sync
        assert "sm__inst_executed_pipe_tensor_op_gmma.sum" in metrics
    else:
        assert f"{T}src_bf16_dst_fp32_sparsity_off.sum" in tensor and f"{T}src_fp16.sum" not in tensor
        assert "sm__inst_executed_pipe_tensor_op_gmma.sum" not in metrics
    assert _flag(words, "--nvtx-push-pop-scope") == "process" and "--nvtx" in words
    assert _flag(words, "--profile-from-start") == "off"
    assert _flag(words, "--print-units") == "base" and _flag(words, "--page") == "raw" and "--csv" in words
    assert _flag(words, "--log-file") == out
    assert _flag(words, "--export") == str(tmp_path / "vit.ncu.ncu-rep")
    program = words[words.index("costspec.ncu.runner") - 2:]
    assert program[1:3] == ["-m", "costspec.ncu.runner"]
    assert program[3:] == ["specs/vit_b.yaml", "--batch", "8", "--pass", "train", "--dtype", "bf16", "--warmup", "3",
                           "--sidecar", str(tmp_path / "vit.ncu.json")]


def test_printed_runner_arguments_parse():
    from costspec.ncu.runner import parse_args, parse_sets

    argv = runner_argv("specs/vit_b.yaml", 8, {"img": 384}, "train", "bf16", 2, "out.json", python="python")
    args = parse_args(argv[3:])
    assert (args.spec, args.batch, parse_sets(args.sets), args.pass_, args.dtype, args.warmup, args.sidecar) == (
        "specs/vit_b.yaml", 8, {"img": 384}, "train", "bf16", 2, "out.json")


def test_plan_details_export_and_sidecar(tmp_path):
    plan = plan_run("specs/toy_mlp.yaml", str(tmp_path / "toy.csv"), "8.0", None, {}, "forward", "fp32", 3)
    assert plan.sidecar == tmp_path / "toy.json" and plan.report == tmp_path / "toy.ncu-rep"
    assert plan.export_details[:3] == ["ncu", "--import", str(tmp_path / "toy.ncu-rep")]


def test_resolve_arch():
    assert resolve_arch("sm_90", None) == "9.0"
    assert resolve_arch(None, "a100-40gb") == "8.0"
    assert resolve_arch(None, None) is None


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.slow
@pytest.mark.skipif(_has_cuda(), reason="a GPU is present")
def test_no_gpu_without_print_command_exits_2(tmp_path):
    for extra in ((), ("--arch", "9.0")):
        result = cli("ncu", "run", "specs/toy_mlp.yaml", "-o", str(tmp_path / "x.csv"), *extra)
        assert result.returncode == 2
        assert "no CUDA GPU" in result.stderr and "--print-command" in result.stderr
        assert "Traceback" not in result.stderr


def test_bad_arch_exits_2(tmp_path):
    result = cli("ncu", "run", "specs/toy_mlp.yaml", "-o", str(tmp_path / "x.csv"), "--print-command", "--arch", "6.1")
    assert result.returncode == 2 and "known: 7.0" in result.stderr


@pytest.mark.slow
def test_print_command_without_output_and_the_new_archs():
    # no -o: the printed command writes SPEC_STEM.ncu.csv in the working directory
    _, words = _printed("specs/vit_b.yaml", "--batch", "8", "--arch", "9.0")
    assert _flag(words, "--log-file") == "vit_b.ncu.csv" and _flag(words, "--export") == "vit_b.ncu.ncu-rep"
    assert _flag(words, "--sidecar") == "vit_b.ncu.json"
    hopper = _flag(words, "--metrics").split(",")
    assert f"{T}op_hgmma_src_bf16_dst_fp32_sparsity_off.sum" in hopper  # wgmma
    assert f"{T}op_hmma_src_bf16_dst_fp32_sparsity_off.sum" in hopper  # mma.sync
    assert f"{T}src_bf16_dst_fp32.sum" in hopper  # the aggregate, as a cross-check
    _, words = _printed("specs/toy_mlp.yaml", "--arch", "10.0")
    assert "smsp__sass_thread_inst_executed_op_ffma2_pred_on.sum" in _flag(words, "--metrics").split(",")
    for cc in ("10.3", "11.0", "12.1"):
        _, words = _printed("specs/toy_mlp.yaml", "--arch", cc)
        assert _flag(words, "--metrics").split(",") == metrics_for(cc)


def test_run_without_output_needs_print_command(tmp_path):
    result = cli("ncu", "run", "specs/toy_mlp.yaml", "--gpu", "h100-sxm")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "ncu run needs -o OUT.csv" in result.stderr
