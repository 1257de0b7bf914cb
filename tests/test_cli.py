"""CLI smoke tests: one invocation per command and format, exit codes."""
import csv
import io
import json

import pytest

from conftest import SPECS


def test_eval_table_is_the_readme_command(cli):
    result = cli("eval", "specs/vit_b.yaml", "--batch", "8")
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("vit_b_16 | pass: forward | precision: bf16 | B=8")
    assert "blocks (repeat x12)" in result.stdout and "qkv x12" in result.stdout
    assert "281.009 GFLOP" in result.stdout and "85.80 M" in result.stdout


@pytest.mark.parametrize("fmt", ["json", "csv", "markdown"])
def test_eval_formats_carry_exact_integers(cli, fmt):
    result = cli("eval", "specs/vit_b.yaml", "--batch", "8", "--format", fmt, "--set", "img=384")
    assert result.returncode == 0, result.stderr
    if fmt == "json":
        data = json.loads(result.stdout)
        assert data["dims"]["S"] == 577 and isinstance(data["totals"]["tc_flops"], int)
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(result.stdout)))
        assert rows[-1]["name"] == "total" and int(rows[-1]["tc_flops"]) > 0
    else:
        assert result.stdout.startswith("**vit_b_16")


def test_eval_depth_collapses_the_tree(cli):
    result = cli("eval", "specs/vit_b.yaml", "--depth", "1")
    assert "qkv" not in result.stdout and "blocks (repeat x12)" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["eval", "specs/vit_b.yaml", "--set", "X=3"], "no dim 'X'"),
    (["eval", "specs/vit_b.yaml", "--set", "heads=7"], "not divisible by heads 7"),
    (["eval", "specs/nope.yaml"], "no such file"),
    (["eval", "specs/toy_mlp.yaml", "--batch", "2"], "--batch binds the dim B"),
])
def test_bad_usage_exits_2_with_one_line(cli, args, message):
    result = cli(*args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_check_passes_the_zoo(cli):
    result = cli("check", *SPECS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": ok") == len(SPECS)
