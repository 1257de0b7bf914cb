"""`--backend flash|math|eager` on every command that costs a spec: each command's numbers follow the
backend (the attention's backward drops flash's recomputed QK^T under math), and validate runs the
matching SDPA kernel in the generated module (math on cpu counts exactly, with no rule)."""
from __future__ import annotations

import json
import textwrap

import click
import pytest

import costspec.cli as cli_package
from costspec.model import load

TINY_DECODER = textwrap.dedent("""\
    costspec: 1
    name: tiny_decoder
    dims: {B: 2, S: 6, C: 16, heads: 2, L: 2, V: 50}
    input: [B, S]
    blocks:
      block:
        - residual:
            - rmsnorm: {}
            - attention: {heads: heads, causal: true, rope: true, fused_qkv: false}
        - residual:
            - rmsnorm: {}
            - mlp: {hidden: 2*C, fn: silu, gated: true}
    layers:
      - embedding: {vocab: V, dim: C}
      - repeat: L
        name: layers
        body: block
      - rmsnorm: {}
    """)

# the commands that cost a spec or run its module
COSTING = ["eval", "formula", "latex", "memory", "ncu calibrate", "ncu compare", "ncu run", "report", "roofline",
           "sweep", "time", "validate"]


def _command(name: str) -> click.Command:
    cli_package.register_all()
    command = cli_package.cli.commands[name.split()[0]]
    for sub in name.split()[1:]:
        assert isinstance(command, click.Group)
        command = command.commands[sub]
    return command


@pytest.mark.parametrize("name", COSTING)
def test_every_costing_command_takes_the_backend(name):
    params = {p.name: p for p in _command(name).params}
    assert "backend" in params, name
    assert list(params["backend"].type.choices) == ["flash", "math", "eager"]  # type: ignore[attr-defined]


@pytest.fixture
def spec(write_spec):
    return write_spec(TINY_DECODER)


def _flash_minus_math(spec) -> int:
    """What --backend math removes from a train step: flash's recomputed QK^T, 2*B*heads*S^2*d per layer."""
    flash, math = (load(spec, backend=b).evaluate("train") for b in ("flash", "math"))
    return flash.tc - math.tc


def test_the_difference_is_the_recomputed_scores(spec):
    b, heads, s, d, layers = 2, 2, 6, 8, 2
    assert _flash_minus_math(spec) == layers * 2 * b * heads * s * s * d


def test_latex_follows_the_backend(cli, spec):
    forms = {b: json.loads(cli("latex", spec, "--pass", "train", "--format", "json", "--backend", b,
                               "--set", "B=2", "--set", "S=6", "--set", "C=16", "--set", "heads=2",
                               "--set", "L=2", "--set", "V=50").stdout) for b in ("flash", "math")}
    tc = {b: int(forms[b]["totals"]["tc"]["expr"]) for b in forms}
    assert tc["flash"] - tc["math"] == _flash_minus_math(spec)


def test_roofline_follows_the_backend(cli, spec, tmp_path):
    rows = {}
    for b in ("flash", "math"):
        out = cli("roofline", spec, "--gpu", "h100-sxm", "--pass", "train", "--backend", b, "-o", tmp_path / f"{b}.svg",
                  "--format", "json")
        assert out.returncode == 0, out.stderr
        rows[b] = json.loads(out.stdout)["total"]
    assert rows["flash"]["tc_flops"] - rows["math"]["tc_flops"] == _flash_minus_math(spec)
    assert rows["flash"]["bytes"] < rows["math"]["bytes"]  # math writes and reads back the scores


def test_roofline_takes_the_decode_phase(cli, spec, tmp_path):
    out = cli("roofline", spec, "--gpu", "h100-sxm", "--phase", "decode", "--context", "64", "-o",
              tmp_path / "d.svg", "--format", "json")
    assert out.returncode == 0, out.stderr
    expected = load(spec, phase="decode", context=64).evaluate("forward")
    total = json.loads(out.stdout)["total"]
    assert total["total_flops"] == expected.total
    assert f"{2 / total['est_time_s']:,.1f} tokens/s" in out.stderr  # B = 2 tokens per step
    refused = cli("roofline", spec, "--gpu", "h100-sxm", "--phase", "decode", "--pass", "train", "-o",
                  tmp_path / "t.svg")
    assert refused.returncode == 2 and "forward only" in refused.stderr


def test_report_follows_the_backend(cli, spec, tmp_path):
    for b in ("flash", "math"):
        out = cli("report", spec, "--pass", "train", "--backend", b, "-o", tmp_path / f"{b}.html")
        assert out.returncode == 0, out.stderr
    html = {b: (tmp_path / f"{b}.html").read_text() for b in ("flash", "math")}
    for b, text in html.items():
        total = load(spec, backend=b).evaluate("train").total
        assert f'title="{total:,}"' in text, b


@pytest.mark.parametrize("backend", ["math", "eager"])
def test_validate_runs_the_matching_kernel_on_cpu(cli, spec, backend):
    """math: PyTorch's math SDPA on cpu (counted by FlopCounterMode: no rule); eager: explicit matmuls."""
    pytest.importorskip("torch")
    out = cli("validate", spec, "--pass", "train", "--device", "cpu", "--backend", backend, "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert result["ok"]
    assert not [r for r in result.get("reconciliations", []) if r["rule"].startswith("sdpa")], result


def test_validate_runs_mla_on_the_math_kernel(cli, write_spec):
    pytest.importorskip("torch")
    mla = write_spec(textwrap.dedent("""\
        costspec: 1
        name: tiny_mla
        dims: {B: 1, S: 8, C: 64}
        input: [B, S, C]
        layers:
          - mla: {heads: 4, kv_lora_rank: 32, q_lora_rank: 16, qk_nope_head_dim: 8, qk_rope_head_dim: 4,
                  v_head_dim: 8, causal: true}
        """), "mla.yaml")
    out = cli("validate", mla, "--pass", "train", "--device", "cpu", "--backend", "math", "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert not [r for r in json.loads(out.stdout).get("reconciliations", []) if r["rule"].startswith("sdpa")]


def test_validate_flash_on_cpu_runs_the_fused_kernel(cli, spec):
    """flash: cpu's fused kernel, which FlopCounterMode does not count: compensated by name."""
    pytest.importorskip("torch")
    out = cli("validate", spec, "--pass", "train", "--device", "cpu", "--backend", "flash", "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    rules = {r["rule"] for r in json.loads(out.stdout).get("reconciliations", [])}
    assert "sdpa-not-counted" in rules


def test_a_bad_backend_is_a_usage_error(cli, spec):
    out = cli("validate", spec, "--backend", "cudnn")
    assert out.returncode == 2 and "cudnn" in out.stderr


def test_ncu_run_hands_the_backend_to_the_profiled_runner(cli, spec):
    from costspec.ncu.runner import parse_args

    out = cli("ncu", "run", spec, "--print-command", "--arch", "9.0", "--backend", "math", "--format", "json")
    assert out.returncode == 0, out.stderr
    command = json.loads(out.stdout)["command"]
    runner = command[command.index("costspec.ncu.runner") + 1:]
    assert parse_args(runner).backend == "math"
