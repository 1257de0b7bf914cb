"""--checkpoint none|blocks|every:N on eval, formula, sweep and validate: the same numbers as the spec's
own `checkpoint:` keys, replaced by the option; bad values and bad places are errors (exit 2)."""
from __future__ import annotations

import csv
import io
import json

import pytest

from tests.common import invoke

SPEC = """costspec: 1
name: ck_cli
dims: {{B: 2, S: 4, C: 8, L: 3}}
input: [B, S, C]
blocks:
  blk:
    - residual: [{{layernorm: {{}}}}, {{attention: {{heads: 2, backend: math}}}}]
    - residual: [{{layernorm: {{}}}}, {{mlp: {{hidden: 4*C}}}}]
layers:
  - linear: {{out: C}}
  - repeat: L
    name: blocks
    body: blk
{extra}
  - layernorm: {{}}
"""


@pytest.fixture
def specs(tmp_path):
    out = {}
    for name, extra in (("plain", ""), ("each", "    checkpoint: true"), ("every2", "    checkpoint: {every: 2}")):
        path = tmp_path / f"{name}.yaml"
        path.write_text(SPEC.format(extra=extra))
        out[name] = path
    return out


def totals(*args) -> dict:
    out = invoke("eval", *args, "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["totals"]


def test_eval_checkpoint_equals_the_spec_keys_and_replaces_them(specs):
    plain, each, every2 = specs["plain"], specs["each"], specs["every2"]
    for pass_ in ("train", "backward"):
        assert totals(plain, "--pass", pass_, "--checkpoint", "blocks") == totals(each, "--pass", pass_)
        assert totals(plain, "--pass", pass_, "--checkpoint", "every:2") == totals(every2, "--pass", pass_)
        assert totals(each, "--pass", pass_, "--checkpoint", "none") == totals(plain, "--pass", pass_)
        assert totals(every2, "--pass", pass_, "--checkpoint", "blocks") == totals(each, "--pass", pass_)
    assert totals(plain, "--checkpoint", "blocks") == totals(plain)  # forward: nothing is recomputed
    gained = totals(each, "--pass", "train")["total_flops"] - totals(plain, "--pass", "train")["total_flops"]
    one = invoke("eval", plain, "--format", "json")
    rows = {r["name"]: r for r in json.loads(one.stdout)["rows"]}
    assert gained == rows["blocks"]["total_flops"]  # L instances' forward, once more
    every = totals(every2, "--pass", "train")["total_flops"] - totals(plain, "--pass", "train")["total_flops"]
    assert every == rows["blocks"]["total_flops"] // 3 * 2  # instances 0 and 2 of 3


def test_formula_and_sweep_take_checkpoint(specs):
    plain, each = specs["plain"], specs["each"]
    by_option = invoke("formula", plain, "--pass", "train", "--checkpoint", "blocks", "--format", "json")
    by_key = invoke("formula", each, "--pass", "train", "--format", "json")
    without = invoke("formula", plain, "--pass", "train", "--format", "json")
    assert by_option.returncode == by_key.returncode == 0, by_option.stderr
    assert json.loads(by_option.stdout)["totals"] == json.loads(by_key.stdout)["totals"]
    assert json.loads(by_option.stdout)["totals"] != json.loads(without.stdout)["totals"]
    swept = invoke("sweep", plain, "--vary", "B=1,2", "--pass", "train", "--checkpoint", "blocks")
    assert swept.returncode == 0, swept.stderr
    got = {int(r["B"]): int(r["total_flops"]) for r in csv.DictReader(io.StringIO(swept.stdout))}
    assert got == {b: totals(each, "--pass", "train", "--batch", str(b))["total_flops"] for b in (1, 2)}


def test_validate_checkpoint_passes_against_the_checkpointed_module(specs):
    out = invoke("validate", specs["plain"], "--pass", "train", "--checkpoint", "every:2", "--format", "json")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    assert json.loads(out.stdout)["ok"] is True


@pytest.mark.parametrize("value", ["all", "every:0", "every:x", "every"])
def test_a_bad_value_is_a_usage_error(specs, value):
    out = invoke("eval", specs["plain"], "--checkpoint", value)
    assert out.returncode == 2 and "none, blocks or every:N" in out.stderr and "Traceback" not in out.stderr


def test_a_spec_without_a_repeat_is_told_so(tmp_path):
    path = tmp_path / "flat.yaml"
    path.write_text("costspec: 1\nname: flat\ndims: {B: 2, C: 8}\ninput: [B, C]\nlayers:\n  - linear: {out: C}\n")
    out = invoke("eval", path, "--checkpoint", "blocks", "--pass", "train")
    assert out.returncode == 2 and "no repeat to checkpoint" in out.stderr


def test_checkpoint_on_an_op_names_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    text = SPEC.format(extra="").replace("  - layernorm: {}\n", "  - layernorm: {}\n    checkpoint: true\n")
    path.write_text(text)
    line = text.splitlines().index("    checkpoint: true") + 1
    out = invoke("eval", path, "--pass", "train")
    assert out.returncode == 2
    assert f"{path}:{line}:5: $.layers[2].checkpoint" in out.stderr and "belongs to a block use or a repeat" in out.stderr
