"""What a person reads: `zoo` one short line per spec, `eval`'s identical notes folded into one line with
a count, tables and notes fitted to the terminal width ($COLUMNS; 100 when the output is not a terminal)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import costspec
from costspec.cli.zoo_cmd import summary
from costspec.core.render import render_table, terminal_width
from costspec.core.results import Column, Result, Row, Table
from costspec.core.zoo import zoo_specs
from costspec.export.report import eval_result
from tests.common import ROOT


def run(*args: str, columns: str | None = None) -> subprocess.CompletedProcess:
    """The CLI with stdout a pipe (not a terminal) and COLUMNS as given (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "costspec", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=120)


def test_zoo_is_one_short_line_per_spec_in_100_columns():
    result = run("zoo")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= 100, max(lines, key=len)
    specs = zoo_specs()
    rows = lines[next(i for i, line in enumerate(lines) if line.startswith('---')) + 1:]
    assert [r.split()[0] for r in rows] == [z.key for z in specs]  # one line per spec, none wrapped
    assert "vit_b                 ViT-Base/16 image encoder at 224 px" in lines


def test_zoo_json_keeps_the_full_doc():
    rows = {r["name"]: r for r in json.loads(run("zoo", "--format", "json").stdout)["rows"]}
    for z in zoo_specs():
        assert rows[z.key]["doc"] == z.doc and rows[z.key]["spec_name"] == z.name
        assert rows[z.key]["summary"] == summary(z.doc)


def test_summary_is_the_docs_first_phrase():
    assert summary("BERT-base encoder at sequence length 512: token + segment") == "BERT-base encoder at sequence length 512"
    assert summary("ConvNeXt-T at 224 px (facebook/convnext-tiny-224 config.json: depths") == "ConvNeXt-T at 224 px"
    assert summary("Pythia-160M (GPT-NeoX architecture) at context 2048, as EleutherAI's config") == \
        "Pythia-160M at context 2048"
    assert summary("no phrase ends here") == "no phrase ends here"


def test_eval_folds_identical_notes_into_one_line_with_a_count():
    model = costspec.load(ROOT / "specs/resnet50.yaml")
    notes = [n for n in model.report("forward", model.bind(1, {})).notes if "batchnorm in eval mode" in n]
    assert len(notes) == 1
    assert notes[0].startswith("29 layers (embedder.stem.bn, encoder.stage1.first.conv1.bn, ..., "
                               "encoder.stage4.rest.conv3.bn): batchnorm in eval mode")


def test_eval_output_fits_100_columns_when_not_a_terminal():
    result = run("eval", "resnet50", "--batch", "8")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= 100, max(lines, key=len)
    assert sum("batchnorm in eval mode" in line for line in lines) == 1


def test_columns_sets_the_width_and_notes_wrap_whole_words():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    result = eval_result(model.report("forward", model.bind(8, {})), depth=1)
    text = render_table(result, width=60)
    notes = text.rsplit("\ntotal", 1)[1].splitlines()[1:]
    assert notes and max(map(len, notes)) <= 60
    assert " ".join(n.strip() for n in notes) == " ".join(result.notes)  # wrapped, nothing lost
    assert run("eval", "vit_b", "--depth", "1", columns="60").stdout.splitlines()[-1] == text.splitlines()[-1]


def test_a_text_column_is_cut_to_the_width_numbers_never():
    table = Table([Column("doc", "doc", "text"), Column("n", "n")],
                  [Row("a", "a", 0, {"doc": "word " * 40, "n": 123_456_789})])
    lines = render_table(Result("", [table]), width=50).splitlines()
    assert max(map(len, lines)) <= 50 and lines[2].rstrip().endswith("...  123,456,789")


def test_width_is_columns_else_100_off_a_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "77")
    assert terminal_width() == 77
    monkeypatch.delenv("COLUMNS")
    assert terminal_width() == 100  # pytest captures stdout: not a terminal


def test_a_header_of_several_lines_prints_as_lines_not_an_escape():
    text = render_table(Result("checked against: X\nspec | validate", []), width=100)
    assert text.splitlines() == ["checked against: X", "spec | validate"] and "\\n" not in text


def test_formula_and_latex_take_batch():
    result = run("formula", "vit_b", "--batch", "8")
    assert result.returncode == 0, result.stderr
    assert "substituted: B=8" in result.stdout.splitlines()[0]
    assert "TC FLOPs    = L*(192*C**2*S + 32*C*S**2) + 48*patch**2*C*(S - 1)" in result.stdout  # 8 x the B form
    both = run("latex", "vit_b", "--batch", "8", "--set", "B=2")
    assert both.returncode == 2 and "both bind B" in both.stderr


def test_a_mistyped_zoo_name_gets_a_suggestion():
    result = run("eval", "resnet")
    assert result.returncode == 2 and "did you mean resnet50?" in result.stderr, result.stderr
    assert "did you mean" not in run("eval", "no_such_thing_at_all").stderr


def test_api_objects_have_a_short_repr_and_a_notebook_table():
    model = costspec.load(ROOT / "specs/vit_b.yaml")
    assert repr(model) == "<costspec.Model vit_b_16: 8 op nodes, bf16, dims B=1 img=224 patch=16 C=768 heads=12 L=12>"
    report = model.evaluate(B=8)
    assert repr(report) == ("<costspec.Report vit_b_16 forward (bf16, B=8 img=224 patch=16 C=768 heads=12 L=12 S=197): "
                            "281.009 GFLOP TC + 932.734 MFLOP CUDA-core, 85.80 M params, 18 rows>")
    html = report._repr_html_()
    assert html.startswith("<table>") and html.count("<tr>") == 1 + len(report.rows) + 1  # head, rows, total
    assert ">qkv</td>" in html and "281.942 GFLOP" in html


def test_an_indentation_error_says_indentation_and_shows_the_line():
    import pytest

    from costspec.core.errors import SpecError

    text = "costspec: 1\nname: x\ndims: {B: 2, D: 4}\ninput: [B, D]\nlayers:\n  - linear: {out: D}\n   - linear: {out: D}\n"
    with pytest.raises(SpecError) as err:
        costspec.loads(text, "bad.yaml")
    message = str(err.value)
    assert "bad.yaml:7:4" in message and "bad indentation: line 7 '- linear: {out: D}' is indented 3 spaces, " \
        "the line before it 2" in message
    with pytest.raises(SpecError) as unclosed:  # a syntax error that indentation does not cause says nothing of it
        costspec.loads("costspec: 1\nname: [x\n", "b.yaml")
    assert "indentation" not in str(unclosed.value)


def test_unknown_ops_keys_and_activations_get_did_you_mean():
    import pytest

    from costspec.core.errors import SpecError, did_you_mean

    layers = {"linaer: {out: D}": "did you mean 'linear'?", "linear: {out: D, biass: true}": "did you mean 'bias'?",
              "mlp: {hidden: D, fn: gelu_nwe}": "did you mean 'gelu_new' or 'gelu_tanh'?"}
    for layer, guess in layers.items():
        with pytest.raises(SpecError) as err:
            costspec.loads(f"costspec: 1\nname: x\ndims: {{B: 2, D: 4}}\ninput: [B, D]\nlayers:\n  - {layer}\n", "s.yaml")
        assert str(err.value).endswith(guess), err.value
    assert did_you_mean("unknown key 'name'", "one of: bias, in, out") is None  # nothing close: no guess
    assert did_you_mean("in expression 'x': unknown", "one of: x") is None  # not an unknown-name message


def test_a_table_wider_than_the_terminal_continues_below_with_the_layer_names():
    narrow = run("eval", "vit_b", "--gpu", "h100-sxm", "--depth", "1")
    wide = run("eval", "vit_b", "--gpu", "h100-sxm", "--depth", "1", columns="200")
    assert narrow.returncode == wide.returncode == 0, narrow.stderr
    lines = narrow.stdout.splitlines()
    assert max(map(len, lines)) <= 100 and "(the table's columns, continued)" in lines
    assert max(map(len, wide.stdout.splitlines())) > 100 and "continued" not in wide.stdout
    for title in ("TC FLOPs", "params", "matmul on", "bytes", "FLOP/B", "bound", "est. time"):
        assert title in narrow.stdout
    assert sum(line.startswith("blocks (repeat x12)") for line in lines) == 2  # each part names the layers
    # the same cells, split: the wide row is the two narrow rows side by side
    first, second = [line for line in lines if line.startswith("total")]
    wide_total = next(line for line in wide.stdout.splitlines() if line.startswith("total"))
    assert wide_total.split() == first.split() + second.split()[1:]
