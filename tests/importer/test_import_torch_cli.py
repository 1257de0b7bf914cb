"""`costspec import torch` at the command line: writes, checks and states the verdict; refuses an incomplete
spec unless --allow-unmapped (then eval shows the gaps); bad input is exit 2 with a message."""
from __future__ import annotations

import json

from costspec.cli import main

MODELS = "tests.importer.torch_models"


def test_writes_checks_and_states_the_verdict(cli, tmp_path):
    out = tmp_path / "decoder.yaml"
    run = cli("import", "torch", f"{MODELS}:decoder", "--dim", "S=tokens:1", "-o", out, "-q")
    assert run.returncode == 0, run.stderr
    assert f"wrote {out}" in run.stdout
    assert f"checked: costspec validate {out} --against {MODELS}:decoder --pass train" in run.stdout
    assert "verdict: structure exact: matmul-class FLOPs and parameters equal the real model's in every row; " \
           "CUDA-core work equal too" in run.stdout
    ev = cli("eval", out, "--set", "S=32", "--set", "L=3", "--format", "json")
    assert ev.returncode == 0, ev.stderr
    assert json.loads(ev.stdout)["dims"]["S"] == 32


def run_main(args: list[str], capsys) -> tuple[int, str, str]:
    """The CLI in this process (torch is imported once): exit code, stdout, stderr."""
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_an_unmapped_part_is_listed_and_nothing_written(capsys, tmp_path):
    out = tmp_path / "gapped.yaml"
    code, _, err = run_main(["import", "torch", f"{MODELS}:gapped", "--dim", "S=x:1", "-o", out, "-q"], capsys)
    assert code == 2
    assert "2 part(s) map to no op of the registry; the spec is not written" in err
    assert "(model): hardswish (aten.hardswish)" in err and "rnn: GRU" in err
    assert not out.exists()


def test_allow_unmapped_writes_gaps_that_eval_shows(capsys, tmp_path):
    out = tmp_path / "gapped.yaml"
    code, stdout, _ = run_main(["import", "torch", f"{MODELS}:gapped", "--dim", "S=x:1", "-o", out,
                                "--allow-unmapped", "-q"], capsys)
    assert code == 1  # the GRU's GEMMs are missing: the structure is not exact, and said so
    assert "verdict: structure NOT exact" in stdout
    assert "forward: unmapped2: matmul: spec 0" in stdout
    text = out.read_text()
    assert "- unmapped: {what: GRU, module: rnn, shape: [B, S, C], params: 1632}  # 1,632 parameters at these " \
           "sizes only" in text
    code, stdout, err = run_main(["eval", out], capsys)
    assert code == 0, err
    assert "unmapped2: NOT COUNTED: GRU in rnn maps to no op" in stdout


def test_json_without_the_check(capsys):
    code, stdout, err = run_main(["import", "torch", f"{MODELS}:unet", "--dim", "img=x:2,3", "--no-check",
                                  "--format", "json", "-q"], capsys)
    assert code == 0, err
    report = json.loads(stdout)
    assert report["check"] is None and report["unmapped"] == [] and report["spec"].count("\n") == report["lines"]
    assert report["check_command"] == f"costspec validate SPEC.yaml --against {MODELS}:unet --pass train"


def test_bad_input_is_exit_2_with_a_message(capsys):
    cases = [
        (["nosuchmodule:build"], "cannot import nosuchmodule"),
        ([f"{MODELS}:decoder", "--dim", "S=tokens"], "expected NAME=INPUT:AXIS"),
        ([f"{MODELS}:decoder", "--dim", "S=ids:1"], "the model's inputs are tokens"),
        ([f"{MODELS}:module_only"], "returned a module alone"),
        ([f"{MODELS}:needs_config"], "building the model failed: TypeError"),
    ]
    for args, message in cases:
        code, _, err = run_main(["import", "torch", *args, "--no-check", "-q"], capsys)
        assert code == 2, (args, err)
        assert message in err and "Traceback" not in err and "internal error" not in err, (args, err)
