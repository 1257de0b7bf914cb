"""Time per generated token against the context length, on a GPU's roofline: a decoder's decode step (one
new token per sequence after N cached ones) and a chunked prefill (the spec's S new tokens per sequence
after N cached ones), each costed exactly (`costspec.analysis.serving`'s rewrites, the same as
`eval --phase decode|prefill --context N`) and estimated on the GPU at a range of N.

A decode step reads every weight and the whole key/value cache for one token per sequence: its
arithmetic intensity is about the batch size, far below a GPU's ridge point, so it is memory-bound;
the prefill's GEMMs over S tokens are not. `memory_share` is the share of the estimated time spent in
memory-bound layers (leaf rows whose bound is memory).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import sympy

from costspec.analysis.evaluation import Report, build_report
from costspec.analysis.gpus import Gpu
from costspec.analysis.roofline import Efficiency, RooflineReport, estimate
from costspec.analysis.serving import context_dim, serving_doc
from costspec.core.errors import SpecError, UsageError
from costspec.core.vocab import Fusion, Serve
from costspec.tree.network import Network

FIRST_CONTEXT = 512  # the curve's first context; then doubling up to the spec's token count (at least LAST_CONTEXT)
LAST_CONTEXT = 4096


@dataclass(frozen=True)
class PhaseCost:
    """One phase at one context: exact FLOPs and bytes of the step, its estimated time, and the share of
    that time spent in memory-bound layers."""

    flops: int
    bytes: int
    time_s: float
    memory_share: float

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved by the whole step."""
        return self.flops / self.bytes if self.bytes else 0.0


@dataclass(frozen=True)
class CurvePoint:
    context: int  # N: tokens already cached per sequence
    decode: PhaseCost  # one new token per sequence
    prefill: PhaseCost  # `chunk` new tokens per sequence


@dataclass
class DecodeCurve:
    """The curve of one decoder on one GPU at batch `batch`: decode steps and prefill chunks of `chunk`
    tokens per sequence, one point per context (`context_dim` names the dim it binds)."""

    gpu: Gpu
    batch: int
    chunk: int
    context_dim: str
    points: list[CurvePoint]
    skipped: list[str] = field(default_factory=list)  # contexts the spec's constraints refuse, with why

    def per_token_s(self, point: CurvePoint) -> tuple[float, float]:
        """(decode, prefill) seconds per generated token of one sequence: a decode step gives every sequence
        one token; a prefill chunk gives each `chunk`."""
        return point.decode.time_s, point.prefill.time_s / self.chunk

    def tokens_per_s(self, point: CurvePoint) -> float:
        """Tokens a decode step generates per second over the batch."""
        return self.batch / point.decode.time_s if point.decode.time_s else 0.0


def contexts_for(tokens: int) -> list[int]:
    """FIRST_CONTEXT, doubling, up to the spec's token count `tokens` (at least up to LAST_CONTEXT)."""
    out, n = [], FIRST_CONTEXT
    while n <= max(tokens, LAST_CONTEXT):
        out.append(n)
        n *= 2
    return out


def memory_share(report: Report, roof: RooflineReport) -> float:
    """The share of the estimated time spent in memory-bound leaf rows."""
    rows = report.rows
    total = memory = 0.0
    for i, row in enumerate(rows):
        if i + 1 < len(rows) and rows[i + 1].depth > row.depth:
            continue  # a parent: its time is its children's
        time_s = row.values.get("est_time_s") or 0.0
        total += time_s
        if str(row.values.get("bound", "")).rstrip("*") == "memory":
            memory += time_s
    return memory / total if total else 0.0


def phase_cost(network: Network, values: Mapping, gpu: Gpu, fusion: Fusion | str,
               efficiency: Efficiency | None) -> PhaseCost:
    """The forward cost of `network` (a served spec) at bound `values`, on `gpu`'s roofline."""
    report = build_report(network, "forward", values)
    roof = estimate(network, report, values, gpu, fusion, efficiency)
    return PhaseCost(report.total, roof.bytes, roof.time_s, memory_share(report, roof))


def servable(network: Network) -> bool:
    """Whether `network` (as written, not served) can be served a decode step (see `serving_doc`)."""
    try:
        serving_doc(network, Serve.DECODE, 1)
    except UsageError:
        return False
    return True


def decode_curve(network: Network, gpu: Gpu, batch: int | None, sets: Mapping[str, int], dtype: str | None = None,
                 fusion: Fusion | str = Fusion.DEFAULT, efficiency: Efficiency | None = None,
                 contexts: Sequence[int] | None = None) -> DecodeCurve | None:
    """Decode and prefill at each context (default `contexts_for` the spec's token count) for `network` as
    written (not served: its own attention layers without a cache), at `batch` and the dims `sets`, built in
    `dtype` (None: the spec's); None when the spec cannot be decoded (no causal attention, a layer that
    mixes tokens)."""
    if not servable(network):
        return None
    name = context_dim(network.doc)
    decode = Network(serving_doc(network, Serve.DECODE, 1), dtype=dtype)
    prefill = Network(serving_doc(network, Serve.PREFILL, 1), dtype=dtype)
    sets = {k: v for k, v in sets.items() if k != name}
    base = network.bind(batch, sets)
    b, chunk = (int(sympy.sympify(size).xreplace(base)) for size in network.in_shape[:2])
    curve = DecodeCurve(gpu, b, chunk, name, [])
    for n in contexts if contexts is not None else contexts_for(chunk):
        try:
            costs = [phase_cost(net, net.bind(batch, {**sets, name: n}), gpu, fusion, efficiency)
                     for net in (decode, prefill)]
        except SpecError as exc:  # e.g. learned positions shorter than the context
            curve.skipped.append(f"{name}={n}: {exc}")
            continue
        curve.points.append(CurvePoint(n, costs[0], costs[1]))
    return curve


__all__ = ["CurvePoint", "DecodeCurve", "PhaseCost", "contexts_for", "decode_curve", "memory_share", "phase_cost",
           "servable"]
