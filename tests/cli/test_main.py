"""CLI smoke tests: one invocation per command and format, exit codes."""
import csv
import io
import json
import re

import pytest

from tests.common import SPECS


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
        assert result.stdout.startswith("**vit\\_b\\_16")  # markdown-escaped name (renders as vit_b_16)


def test_eval_depth_collapses_the_tree(cli):
    result = cli("eval", "specs/vit_b.yaml", "--depth", "1")
    assert "qkv" not in result.stdout and "blocks (repeat x12)" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["eval", "specs/vit_b.yaml", "--set", "X=3"], "no dim 'X'"),
    (["eval", "specs/vit_b.yaml", "--set", "heads=7"], "not divisible by heads 7"),
    (["eval", "specs/nope.yaml"], "no such file"),
    (["eval", "specs/toy_mlp.yaml", "--batch", "2"], "--batch 2 binds the dim B"),
])
def test_bad_usage_exits_2_with_one_line(cli, args, message):
    result = cli(*args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_check_passes_the_zoo(cli):
    result = cli("check", *SPECS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": ok") == len(SPECS)


@pytest.mark.parametrize("args, message", [
    (["sweep", "specs/vit_b.yaml", "--vary", "B=1..4", "-o", "/nonexistent/dir/x.csv"], "No such file or directory"),
    (["latex", "specs/vit_b.yaml", "-o", "/nonexistent/dir/x.tex"], "No such file or directory"),
    (["roofline", "specs/vit_b.yaml", "--gpu", "h100-sxm", "-o", "roof.txt"], "written as .png, .svg or .pdf"),
    (["sweep", "specs/vit_b.yaml", "--vary", "B=99999999999999999999"], "below 2**62"),
    (["sweep", "specs/vit_b.yaml", "--vary", "B=1..1000000000000"], "grid limit"),
    (["sweep", "specs/vit_b.yaml", "--vary", "B=1..3", "--set", "B=2"], "both varied"),
    (["ncu", "compare", "specs/toy_mlp.yaml", "tests/data/ncu/toy_forward.details.csv", "--set", "M=64"],
     "was profiled at M=128"),
])
def test_review_findings_exit_2_with_one_line(cli, args, message):
    result = cli(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_huge_numbers_print_in_scientific_notation_not_float_noise(write_spec, cli):
    path = write_spec("costspec: 1\nname: huge\ndims: {C: 8}\ninput: [2, C]\n"
                      "layers: [{linear: {out: 'C**8 * 10**300'}}]\n")
    result = cli("eval", path)
    assert result.returncode == 0, result.stderr
    assert re.search(r"\d\.\d{3}e30\d FLOP", result.stdout), result.stdout


def test_reshape_minus_one_must_divide_evenly(write_spec, cli):
    path = write_spec("costspec: 1\nname: r\ndims: {B: 2, S: 8, C: 16}\ninput: [B, S, C]\n"
                      "layers: [{reshape: {shape: [B, 3, -1]}}, {linear: {out: C}}]\n")
    result = cli("check", path)
    assert result.returncode == 2 and "cannot reshape 3-d input of 256 elements to [2, 3, -1]" in result.stdout


def test_zero_modulus_at_the_bound_dims_is_a_clear_error(write_spec, cli):
    path = write_spec("costspec: 1\nname: z\ndims: {S: 8, C: 16}\ninput: [S, C]\n"
                      "layers: [{linear: {out: 'C % (S - 8)'}}]\n")
    result = cli("eval", path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
