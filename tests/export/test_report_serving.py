"""The report's memory section and prefill / decode panel, and `report --phase --context`: the section's
numbers are `costspec memory`'s for the same spec, pass and phase; the panel's points are
`costspec eval --phase decode|prefill --context N --gpu`'s; a decode report's cards give the time per step
and tokens/s of that eval; an encoder (vit_b) has the memory section and no decode panel."""
from __future__ import annotations

import json
import re
import textwrap

import pytest

from costspec.analysis.decode_curve import contexts_for
from costspec.export.svg_bars import stacked_bar

from .browser_page import browser

TINY_DECODER = textwrap.dedent("""\
    costspec: 1
    name: tiny_decoder
    dims: {B: 2, S: 48, C: 64, heads: 4, KV: 2, L: 2, V: 100}
    input: [B, S]
    blocks:
      block:
        - residual:
            - rmsnorm: {}
            - attention: {heads: heads, kv_heads: KV, causal: true, rope: true, fused_qkv: false, q_bias: false,
                          o_bias: false}
        - residual:
            - rmsnorm: {}
            - mlp: {hidden: 2*C, fn: silu, gated: true, bias: false}
    layers:
      - embedding: {vocab: V, dim: C}
      - repeat: L
        name: layers
        body: block
      - rmsnorm: {}
    """)
KIND_ROW = re.compile(r'<tr(?: class="total")? data-kind="([^"]*)" data-bytes="(\d+)">')
POINT_ROW = re.compile(r'<tr data-context="(\d+)" data-decode-flops="(\d+)" data-decode-bytes="(\d+)" '
                       r'data-decode-time="([^"]+)" data-prefill-flops="(\d+)" data-prefill-time="([^"]+)">')


@pytest.fixture
def decoder(write_spec):
    return write_spec(TINY_DECODER, "decoder.yaml")


def _report(cli, tmp_path, spec, *args) -> str:
    out = tmp_path / "r.html"
    result = cli("report", spec, *args, "-o", out)
    assert result.returncode == 0, result.stderr
    return out.read_text(encoding="utf-8")


def _memory(cli, spec, *args) -> dict:
    result = cli("memory", spec, *args, "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _eval(cli, spec, *args) -> dict:
    result = cli("eval", spec, *args, "--gpu", "h100-sxm", "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["total"]


def _kinds(html: str) -> dict[str, int]:
    return {name.replace("&#x27;", "'"): int(n) for name, n in KIND_ROW.findall(html)}


def test_memory_section_is_costspec_memory_for_vit_b_train(cli, tmp_path):
    html = _report(cli, tmp_path, "vit_b", "--batch", "4", "--pass", "train", "--gpu", "h100-sxm")
    expected = _memory(cli, "vit_b", "--batch", "4", "--pass", "train", "--gpu", "h100-sxm")
    kinds = _kinds(html)
    assert kinds.pop("total") == expected["total_bytes"]
    assert kinds == {name: k["bytes"] for name, k in expected["kinds"].items()}
    assert 'id="memory"' in html and "svg class=\"chart stacked\"" in html
    assert f"h100-sxm {expected['gpu']['capacity_bytes'] / 1e9:.3f} GB" in html  # the capacity line's label
    assert 'id="decode"' not in html and "data-context" not in html  # an encoder: no decode panel


def test_forward_report_counts_the_weights_only(cli, tmp_path, decoder):
    html = _report(cli, tmp_path, decoder)
    expected = _memory(cli, decoder)
    assert _kinds(html) == {**{n: k["bytes"] for n, k in expected["kinds"].items()}, "total": expected["total_bytes"]}
    assert list(expected["kinds"]) == ["weights"]
    assert 'id="decode"' not in html  # the panel needs a GPU to time the steps


def test_decode_panel_points_are_eval_decode_and_prefill(cli, tmp_path, decoder):
    html = _report(cli, tmp_path, decoder, "--gpu", "h100-sxm")
    points = POINT_ROW.findall(html)
    assert [int(p[0]) for p in points] == contexts_for(48) == [512, 1024, 2048, 4096]
    for n, d_flops, d_bytes, d_time, p_flops, p_time in points[:2]:
        decode = _eval(cli, decoder, "--phase", "decode", "--context", n)
        prefill = _eval(cli, decoder, "--phase", "prefill", "--context", n)
        assert (int(d_flops), int(d_bytes), float(d_time)) == (decode["total_flops"], decode["bytes"],
                                                               decode["est_time_s"])
        assert (int(p_flops), float(p_time)) == (prefill["total_flops"], prefill["est_time_s"])
    # decode is memory-bound: every decode row says 100% of its time in memory-bound layers
    table = html[html.index('<table class="data decode">'):]
    assert table.count("<td>100%</td>") >= len(points)
    decode_times = [float(p[3]) for p in points]
    assert decode_times == sorted(decode_times)  # the cache grows, and so does the step


def test_decode_report_shows_the_step_and_the_cache(cli, tmp_path, decoder):
    args = ("--batch", "3", "--phase", "decode", "--context", "100")
    html = _report(cli, tmp_path, decoder, *args, "--gpu", "h100-sxm")
    step = _eval(cli, decoder, *args)
    memory = _memory(cli, decoder, *args)
    assert f'title="{step["total_flops"]:,}"' in html  # the tree's total: one token per sequence
    assert "<b>phase</b> decode" in html
    assert "decode: one new token per sequence" in html  # the serving note
    assert f"{3 / step['est_time_s']:,.0f}" in html and "tokens/s (3 per step)" in html
    kinds = _kinds(html)
    assert kinds["kv cache"] == memory["kinds"]["kv cache"]["bytes"] > 0
    assert kinds["total"] == memory["total_bytes"]
    assert "train FLOPs" not in html  # served: forward forms only
    refused = cli("report", decoder, "--phase", "decode", "--pass", "train", "-o", tmp_path / "t.html")
    assert refused.returncode == 2 and "forward only" in refused.stderr


def test_vit_b_refuses_the_decode_phase(cli, tmp_path):
    out = cli("report", "vit_b", "--phase", "decode", "-o", tmp_path / "v.html")
    assert out.returncode == 2 and "no causal attention" in out.stderr


def test_stacked_bar_draws_every_part_and_the_limit():
    svg = stacked_bar([("a<b", 30), ("c", 70)], "t", str, ("cap", 200))
    assert svg.count('class="segment"') == 2 and "a&lt;b: 30" in svg and 'class="limit"' in svg
    widths = [float(w) for w in re.findall(r'class="segment" x="[^"]+" y="\d+" width="([^"]+)"', svg)]
    assert widths[1] == pytest.approx(widths[0] * 70 / 30, rel=1e-3)


needs_chromium = pytest.mark.skipif(not browser.CHROMIUM, reason="headless Chromium is not installed")

SECTIONS = r"""(() => ['memory', 'decode'].map(id => {
  const e = document.getElementById(id);
  if (!e) return null;
  const next = e.parentElement.querySelectorAll('#' + id + ' ~ .charts svg');
  const r = next.length ? next[0].getBoundingClientRect() : null;
  return {id, svg: r ? {width: r.width, height: r.height, right: r.right} : null};
}))()"""


@needs_chromium
def test_the_browser_shows_both_sections_at_every_width(cli, tmp_path, decoder):
    from .browser_page import LAYOUT

    out = tmp_path / "d.html"
    result = cli("report", decoder, "--gpu", "h100-sxm", "--pass", "train", "-o", out)
    assert result.returncode == 0, result.stderr
    with browser.Browser() as chromium:
        for width in (1280, 390):
            page = chromium.open(out, width)
            page.wait_for("document.body.dataset.ready === '1'")
            layout, sections = page.evaluate(LAYOUT), page.evaluate(SECTIONS)
            assert layout["errors"] == "" and layout["page"] <= width and layout["outside"] == [], layout
            for section in sections:
                assert section and section["svg"], (width, sections)
                assert 0 < section["svg"]["width"] <= width and section["svg"]["right"] <= width
            if width == 1280:
                assert layout["scrolled"] == [], layout["scrolled"]
