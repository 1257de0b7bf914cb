"""The report's memory section and its prefill / decode panel (HTML; the data is gathered in
`costspec.export.html_report`).

Memory: `costspec memory`'s rows for the page's pass and phase, read by kind (whatever kinds the
analysis lists), as one stacked bar with the GPU's capacity as a line, and a table of the exact bytes
and formulas. Prefill / decode (a decoder on a GPU): time per generated token against the context
length, for a decode step and a prefill chunk, and a table of each point's FLOPs, bytes, intensity and
the share of the time in memory-bound layers. Every number carries its exact value in a data attribute
(the tests read them back)."""
from __future__ import annotations

from html import escape

from costspec.analysis.decode_curve import DecodeCurve
from costspec.analysis.gpus import POINTWISE_DTYPE, Gpu
from costspec.core import units
from costspec.core.errors import UsageError
from costspec.core.results import Result
from costspec.export.svg import line_chart, seconds
from costspec.export.svg_bars import stacked_bar


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _bytes(value: float) -> str:
    return units.si(int(value), "B")


def memory_section(memory: Result | str | None) -> str:
    """The memory section: the stacked bar, the table by kind, the fit; a line saying why when the memory
    cannot be counted."""
    if memory is None:
        return ""
    head = '<h2 id="memory">Memory</h2>'
    if isinstance(memory, str):
        return head + f'<p class="muted">Device memory is not shown: {_e(memory)}</p>'
    meta = memory.meta
    kinds = meta["kinds"]
    gpu = meta.get("gpu")
    limit = (f"{gpu['key']} {_bytes(gpu['capacity_bytes'])}", gpu["capacity_bytes"]) if gpu else None
    step = f"{meta['pass']}" + (f", {meta['phase']}" if meta.get("phase") else "")
    bar = stacked_bar([(name, k["bytes"]) for name, k in kinds.items()], f"device memory by kind ({step})", _bytes,
                      limit)
    total = meta["total_bytes"]
    rows = "".join(
        f'<tr data-kind="{_e(name)}" data-bytes="{k["bytes"]}"><td>{_e(name)}</td><td title="{k["bytes"]:,}">'
        f'{_e(_bytes(k["bytes"]))}</td><td>{100 * k["bytes"] / total if total else 0:.1f}%</td>'
        f'<td class="formula">{_e(k["formula"])}</td></tr>' for name, k in kinds.items())
    label = memory.tables[0].total.label if memory.tables and memory.tables[0].total else "total"
    rows += (f'<tr class="total" data-kind="total" data-bytes="{total}"><td>{_e(label)}</td>'
             f'<td title="{total:,}">{_e(_bytes(total))}</td><td>100%</td><td></td></tr>')
    table = ('<div class="scroll"><table class="data memory"><thead><tr><th>kind</th><th>bytes</th><th>share</th>'
             f"<th>formula (bytes)</th></tr></thead><tbody>{rows}</tbody></table></div>")
    notes = "".join(f"<li>{_e(n)}</li>" for n in memory.notes)
    return (head + f'<p class="muted">What the device holds for a {_e(step)} step, by kind, as '
            "<code>costspec memory</code> counts it" + (" (the dashed line: the GPU's capacity)" if gpu else "")
            + f'.</p><div class="charts">{bar}</div>{table}<ul class="notes">{notes}</ul>')


def ridge_point(gpu: Gpu, dtype: str) -> float:
    """FLOP per byte at which `gpu`'s matmul peak in `dtype` (its CUDA-core peak without a Tensor-Core one)
    meets its memory roof."""
    try:
        peak = gpu.tensor_peak(dtype)
    except UsageError:
        peak = gpu.cuda_peak(dtype if dtype in gpu.cuda else POINTWISE_DTYPE)
    return peak / gpu.bandwidth


def decode_panel(curve: DecodeCurve | None, dtype: str) -> str:
    """The prefill / decode panel (`dtype`: the spec's, for the GPU's ridge point): time per token against
    the context length, and the points' table."""
    if curve is None or not curve.points:
        return ""
    ns = [p.context for p in curve.points]
    decode = [curve.per_token_s(p)[0] for p in curve.points]
    prefill = [curve.per_token_s(p)[1] for p in curve.points]
    chart = line_chart([("decode: one token per sequence per step", ns, decode),
                        (f"prefill: per token of a {curve.chunk}-token chunk", ns, prefill)],
                       f"context {curve.context_dim} (cached tokens)", "time per token", "time per token vs context",
                       yfmt=seconds, logx=True, logy=True, legend_below=True)
    head = ["context", "decode: time per step", "tokens/s", "FLOPs", "bytes", "FLOP/B", "memory-bound",
            "prefill: time per token", "FLOP/B", "memory-bound"]
    body = []
    for p in curve.points:
        d, f = p.decode, p.prefill
        body.append(
            f'<tr data-context="{p.context}" data-decode-flops="{d.flops}" data-decode-bytes="{d.bytes}" '
            f'data-decode-time="{d.time_s!r}" data-prefill-flops="{f.flops}" data-prefill-time="{f.time_s!r}">'
            f"<td>{p.context:,}</td><td>{units.seconds(d.time_s)}</td><td>{curve.tokens_per_s(p):,.1f}</td>"
            f'<td title="{d.flops:,}">{units.si(d.flops)}</td><td title="{d.bytes:,}">{_bytes(d.bytes)}</td>'
            f"<td>{d.intensity:.2f}</td><td>{100 * d.memory_share:.0f}%</td>"
            f"<td>{units.seconds(curve.per_token_s(p)[1])}</td><td>{f.intensity:.1f}</td>"
            f"<td>{100 * f.memory_share:.0f}%</td></tr>")
    table = ('<div class="scroll"><table class="data decode"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head)
             + "</tr></thead><tbody>" + "".join(body) + "</tbody></table></div>")
    ridge = ridge_point(curve.gpu, dtype)
    skipped = "".join(f"<li>{_e(s)}</li>" for s in curve.skipped)
    return ('<h3 id="decode">Prefill and decode</h3><p class="muted">'
            f"On {_e(curve.gpu.name)} at batch {curve.batch:,}: a decode step generates one token per sequence, "
            "reading every weight and the whole key/value cache, so its intensity (FLOP/B) stays near the batch "
            f"size, far below the GPU's ridge point (about {ridge:,.0f} FLOP/B): it is memory-bound and its time "
            f"grows with the cache. A prefill chunk of {curve.chunk:,} tokens per sequence (after the same cached "
            "tokens) runs its GEMMs over every token. Exact costs as <code>costspec eval --phase decode|prefill "
            "--context N</code> gives them.</p>"
            f'<div class="charts">{chart}</div>{table}' + (f'<ul class="notes">{skipped}</ul>' if skipped else ""))


__all__ = ["decode_panel", "memory_section", "ridge_point"]
