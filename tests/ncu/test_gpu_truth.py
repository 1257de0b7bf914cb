"""tools/gpu_truth.py end to end without a GPU: ncu, nvidia-smi and CUDA replaced by the fakes of
tools/gpu_truth_fakes.py (`--fake`), so that only the GPU itself is left untested.

Three calls, as on the device machine: call A with a short deadline (big steps are deferred), one
capture failing and one timing step hanging (injected); call B resumes A's files and does the rest;
call C retries the failed capture. Checked: the plan printed first, the files under --out and the
device tool's limits on them (count, size, depth, names), FAKE marks in every file, the resume
(done steps are not run again, the archive keeps the earlier files), the failure and the timeout
recorded while the other steps run, the summary table printed last, and that costspec's `ncu
compare` / `ncu calibrate` consumed the fake captures (the toy study's coefficients come back).
"""
from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_truth.py"


def _script():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("gpu_truth", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_truth", module)
    spec.loader.exec_module(module)
    return module


gt = _script()
# one xdist worker runs the module (`--dist loadgroup`), so the three calls of the `calls` fixture run once,
# not once per worker that gets one of its tests
pytestmark = pytest.mark.xdist_group("gpu_truth")
FAIL, HANG = "ncu.sparse24.*", "time.vit_b.bf16.b1.forward"
UNKNOWN = "sm__ops_path_tensor_src_int1.sum"  # a metric the fake ncu refuses, as ncu refuses a name it lacks


def _call(args: list[str], fail: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, gt.FAKE_ENV: "1", gt.FAKE_HANG_ENV: HANG, "COSTSPEC_FAKE_NCU_UNKNOWN_METRICS": UNKNOWN,
           "PYTHONPATH": str(ROOT)}
    if fail:
        env[gt.FAKE_FAIL_ENV] = FAIL
    else:
        env.pop(gt.FAKE_FAIL_ENV, None)
    done = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def calls(tmp_path_factory):
    base = tmp_path_factory.mktemp("gpu_truth")
    # call A: the probe and the vit_b captures get budgets that do not fit its deadline (deferred)
    a = _call(["--out", str(base / "a"), "--work", str(base / "wa"), "--deadline", "300", "--budget", "probe.*=1000",
               "--budget", "ncu.vit_b.*=1000", "--budget", f"{HANG}=2"])
    b = _call(["--resume", str(base / "a"), "--out", str(base / "b"), "--work", str(base / "wb")])
    c = _call(["--resume", str(base / "b" / gt.ARCHIVE), "--out", str(base / "c"), "--work", str(base / "wc"),
               "--retry-failed", "--only", "ncu.sparse24.*,compare.sparse24.*"], fail=False)
    return {"a": (a, base / "a"), "b": (b, base / "b"), "c": (c, base / "c")}


def _summary(out: Path) -> dict:
    return json.loads((out / gt.SUMMARY).read_text(encoding="utf-8"))


def _members(out: Path) -> dict[str, bytes]:
    files = {}
    for name in (gt.ARCHIVE, gt.REPORTS):
        if (out / name).exists():
            with tarfile.open(out / name, "r:gz") as tar:
                for member in tar.getmembers():
                    if member.isfile():
                        files[member.name] = tar.extractfile(member).read()
    return files


def _status(out: Path) -> dict[str, str]:
    return {k: v["status"] for k, v in _summary(out)["steps"].items()}


def test_the_plan_comes_first_with_budgets(calls):
    stdout = calls["a"][0].stdout
    lines = stdout.splitlines()
    assert lines[0].startswith("== FAKE")
    first_run = stdout.index("-> env")
    plan = stdout[:first_run]
    ids = [s.id for s in gt.build_plan()]
    assert [i for i in ids if i in plan] == ids  # every step listed before anything runs
    positions = [plan.index(f" {i} ") for i in ids]
    assert positions == sorted(positions)
    assert re.search(r"ncu\.vit_b\.bf16\.b8\.train\s+1000s\s+yes", plan)  # --budget
    assert re.search(r"ncu\.toy_mlp\.fp32\.train\s+90s\s+yes", plan)
    assert "deadline 300 s" in plan and "mode FAKE" in plan


@pytest.mark.parametrize("call", ["a", "b", "c"])
def test_out_files_come_back_through_the_device_tool(calls, call):
    out = calls[call][1]
    assert gt.check_out_dir(out) == []
    files = [p for p in out.rglob("*") if p.is_file()]
    assert sorted(p.name for p in files) == sorted([gt.ARCHIVE, gt.REPORTS, gt.SUMMARY, gt.LOG])
    assert len(files) <= 8 and sum(p.stat().st_size for p in files) <= 64 * 2**20
    for path in files:
        assert path.stat().st_size <= 16 * 2**20
        assert len(path.relative_to(out).parts) <= 3  # at most 2 folders down
        assert re.fullmatch(r"[A-Za-z0-9._-]+", path.name)


def test_every_file_says_fake(calls):
    out = calls["b"][1]
    members = _members(out)
    assert len(members) > 80
    unmarked = [name for name, data in members.items() if b"fake" not in data.lower()]
    assert unmarked == []
    for path in out.iterdir():
        assert b"fake" in path.read_bytes()[:4000].lower() or path.suffix == ".gz"
    summary = _summary(out)
    assert summary["fake"] is True and "FAKE" in summary["fake_note"]
    assert "FAKE RUN" in calls["b"][0].stdout.splitlines()[-1]


def test_a_short_call_defers_and_records_failures(calls):
    done, out = calls["a"]
    stdout = done.stdout
    status = _status(out)
    assert status["env"] == "ok" and status["ncu.toy_mlp.fp32.forward"] == "ok"
    assert status["probe.gemm"] == "deferred" and status["ncu.vit_b.bf16.b8.train"] == "deferred"
    assert status["calibrate.vit_b.bf16.b8.L1.train"] == "blocked"
    # costspec has --phase now: the decode capture and its comparison run (as ncu run --phase decode)
    assert status["ncu.llama_1b.bf16.L2.decode"] == "ok" and status["compare.llama_1b.bf16.L2.decode"] == "ok"
    members = _members(out)
    decode = json.loads(next(v for k, v in members.items() if k.endswith("ncu/llama_1b.bf16.L2.decode.json")))
    assert decode["phase"] == "decode" and "--phase" in decode["runner_argv"]
    failed = _summary(out)["steps"]["ncu.sparse24.bf16.forward"]
    assert failed["status"] == "failed" and "fake failure injected" in failed["reason"]
    hung = _summary(out)["steps"][HANG]
    assert hung["status"] == "timeout" and hung["seconds"] < 30
    assert status["time.vit_b.bf16.b1.train"] == "ok"  # the steps after a failure and a timeout ran
    assert status["compare.sparse24.bf16.forward"] == "blocked"
    tail = stdout[stdout.index("== gpu_truth summary"):]
    assert all(step_id in tail for step_id in status)  # the table is the last thing printed
    assert "to do: call again with --resume" in tail and "--retry-failed" in tail


def test_resume_skips_done_steps_and_keeps_their_files(calls):
    (_, a), (b_out, b) = calls["a"], calls["b"]
    before, after = _summary(a)["steps"], _summary(b)["steps"]
    assert [c["call"] for c in _summary(b)["calls"]] == [1, 2]
    for step_id, rec in before.items():
        if rec["status"] in ("ok", "skipped") and step_id != "env":
            assert after[step_id]["call"] == 1, step_id  # not run again
            assert f"-> {step_id} " not in b_out.stdout
    assert after["probe.gemm"]["status"] == "ok" and after["probe.gemm"]["call"] == 2
    assert after["ncu.vit_b.bf16.b8.train"]["status"] == "ok"
    assert after["ncu.sparse24.bf16.forward"]["status"] == "failed" and after["ncu.sparse24.bf16.forward"]["call"] == 1
    assert after[HANG]["status"] == "timeout"  # failures are retried only with --retry-failed
    members = _members(b)
    assert "ncu/toy_mlp.fp32.forward.csv" in members  # call A's capture, still in call B's archive
    assert "ncu/vit_b.bf16.b8.train.csv" in members and "ncu/vit_b.bf16.b8.train.ncu-rep" in members
    assert "*: from an earlier call" in b_out.stdout


def test_retry_failed_completes_the_run(calls):
    status = _status(calls["c"][1])
    assert status["ncu.sparse24.bf16.forward"] == "ok" and status["compare.sparse24.bf16.forward"] == "ok"
    left = {k: v for k, v in status.items() if v not in ("ok", "skipped")}
    assert left == {HANG: "timeout"}
    assert "ncu/sparse24.bf16.forward.csv" in _members(calls["c"][1])


def test_costspec_consumed_the_captures(calls):
    members = _members(calls["c"][1])
    calibration = yaml.safe_load(io.BytesIO(members["calib/toy_mlp.fp32.train.yaml"]))
    # the fake toy capture holds the reconstructed toy study: its coefficients come back exactly
    assert calibration["forward"]["epsilon"]["gemm"]["exact"] == "7/1024"
    assert calibration["forward"]["rho"]["exact"] == "3"
    assert calibration["backward"]["epsilon"]["gemm"]["exact"] == "1/256"
    compare = json.loads(members["compare/vit_b.bf16.b8.train.json"])
    forward = compare["tables"]["forward"]["total"]
    assert Fraction(forward["tc_measured"], forward["tc_analytic"]) - 1 == Fraction(1, 64)  # the fake's epsilon
    assert json.loads(members["eval/vit_l.bf16.b8.train.calibrated.json"])["tables"]["executed"]["total"]["ratio"] > 1
    sidecar = json.loads(members["ncu/vit_b.bf16.b8.train.json"])
    assert sidecar["fake"] is True and sidecar["kernels"] > 100 and sidecar["dims"]["L"] == 12
    assert sidecar["gpu_truth"]["clock_control"] == "none" and sidecar["gpu_truth"]["metrics_left_out"] == [UNKNOWN]
    assert "--clock-control none" in sidecar["command"] and UNKNOWN not in sidecar["command"]
    assert "--clock-control base" in sidecar["gpu_truth"]["costspec_printed_command"]
    steps = _summary(calls["c"][1])["steps"]
    # the first ncu step learnt from ncu's error that it refuses UNKNOWN; every later one (call B too) left it out
    assert steps["ncu.toy_mlp.fp32.forward"]["data"]["dropped_metrics"] == [UNKNOWN]
    assert "ncu refused sm__ops_path_tensor_src_int1.sum" in calls["a"][0].stdout
    for name, data in members.items():
        if name.startswith("ncu/") and name.endswith(".json"):
            assert UNKNOWN not in json.loads(data)["command"], name
    toy = steps["ncu.toy_mlp.fp32.train"]["data"]
    assert toy["nvtx_columns"][0].startswith("thread Domain:Push/Pop_Range") and toy["kernels_with_nvtx"] == 69
    assert toy["printed_units"]["gpu__time_duration.sum"] == "nsecond"
    assert steps["export.toy_mlp.fp32.train.details"]["data"]["kernels"] == 69
    fp16 = steps["probe.fp16"]["data"]["answers"]
    assert set(fp16["counter_per_instruction"]) == set(gt.FP16_PROBE_KERNELS) and fp16["bf16_hfma2_lands_in_hfma"]
    probe = steps["probe.gemm"]["data"]
    assert probe["dropped_metrics"] == [] and UNKNOWN not in probe["command"]
    assert probe["answers"] == {"tc_equals_2mnk": True, "wgmma_in_aggregate": True, "hmma_zero_for_wgmma": True}
    time_ = json.loads(members["time/vit_l.bf16.b256.train.json"])
    assert time_["fake"] is True and time_["gpu"] == "h100-sxm" and time_["total"]["ratio"] > 0
    versions = json.loads(members["env/versions.json"])["versions"]
    assert versions["costspec"]["tree_sha256"] == gt.tree_hash() and "FAKE" in versions["gpu"]["name"]


def test_dry_run_prints_the_exact_commands(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert gt.main(["--dry-run", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "w")]) == 0
    text = capsys.readouterr().out
    assert not (tmp_path / "out").exists()
    lines = {line.split("] ", 1)[0].lstrip("["): line for line in text.splitlines() if line.startswith("[")}
    assert set(lines) == {s.id for s in gt.build_plan()}
    from costspec.ncu.metrics import metrics_for

    capture = lines["ncu.vit_b.bf16.b8.train"]
    assert capture.split("] ", 1)[1].startswith("LC_ALL=C ncu ") and "--clock-control none" in capture
    assert ",".join(metrics_for("9.0")) in capture
    assert "-m costspec.ncu.runner specs/vit_b.yaml --batch 8 --pass train --dtype bf16" in capture
    assert lines["time.vit_l.bf16.b256.train"].endswith(
        "-m costspec time specs/vit_l.yaml --batch 256 --pass train --dtype bf16 --gpu h100-sxm --format json -q")
    assert "--gemm-probe-program" in lines["probe.gemm"] and gt.PROBE_REGEX in lines["probe.gemm_regex"]
    assert re.search(r"ncu\.vit_b\.bf16\.b8\.train\s+480s\s+yes", text)  # the default budgets


def test_the_restriction_estimate_and_the_deadline_rule():
    assert gt.estimate_restriction(30, 50, 1.0, 12, 480) == (None, 250)
    value, estimate = gt.estimate_restriction(30, 80, 1.0, 12, 480)
    assert (value, estimate) == (8, 580)  # 30 + 7 * 50 = 380 <= 0.85 * 480 = 408
    assert gt.estimate_restriction(30, 80, 0.4, 12, 480) == (None, 250)  # forward: 40% of a block's kernels
    assert gt.estimate_restriction(300, 900, 1.0, 12, 480)[0] == 2  # never below L=2
    step = gt.Step("x", "capture", 100, "")
    assert gt.decide(step, 40) == (False, 0.0) and gt.decide(step, 60) == (True, 60) and gt.decide(step, 500) == (
        True, 100)
    offline = gt.Step("y", "compare", 30, "", gpu=False)
    assert gt.decide(offline, 6) == (True, 6)


def test_missing_jsonschema_says_what_to_carry(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(gt.importlib.util, "find_spec", lambda name, *a: None if name == "jsonschema" else real(name))
    run = gt.Run(gt.parse_args(["--out", str(tmp_path / "o"), "--work", str(tmp_path / "w"),
                                "--wheels", str(tmp_path / "no-wheels")]))
    message = run.ensure_deps()
    assert message and "jsonschema" in message and ".whl" in message and "rpds-py" in message


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc here")
def test_the_fp16_probe_compiles_to_one_instruction_kind_per_kernel(tmp_path):
    source = tmp_path / "fp16probe.cu"
    source.write_text(gt.FP16_PROBE_SOURCE, encoding="utf-8")
    ptx = tmp_path / "fp16probe.ptx"
    done = subprocess.run(["nvcc", "-O3", "-arch=sm_90", "-ptx", "-o", str(ptx), str(source)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    wanted = {"probe_hfma2_packed": "fma.rn.f16x2", "probe_hfma_scalar": "fma.rn.f16", "probe_hmul_scalar": "mul.f16",
              "probe_hadd2_packed": "add.f16x2", "probe_bf16_hfma2_packed": "fma.rn.bf16x2",
              "probe_ffma_scalar": "fma.rn.f32"}
    assert set(wanted) == set(gt.FP16_PROBE_KERNELS)
    bodies = re.split(r"\.entry\s+", ptx.read_text(encoding="utf-8"))[1:]
    for name, op in wanted.items():
        body = next(b for b in bodies if name in b.split("(")[0])
        fp_ops = re.findall(r"\b((?:fma|mul|add|sub)\.[a-z.0-9]+)", body)
        fp_ops = [o for o in fp_ops if not re.match(r"(add|mul|sub)\.(s|u|lo|wide)", o) and "lo." not in o]
        assert fp_ops and set(fp_ops) == {op}, (name, fp_ops)  # the loop does this instruction and no other FP op
