"""The proof an import ends with: `validate --against` of the written spec on the same model, and its
verdict in one line.

*Structure exact* means matmul-class FLOPs and parameters agree in every matched row and in total,
forward and backward, and no real module with parameters is left unclaimed; the CUDA-core
(pointwise) kinds that differ are listed beside it, each by row, kind and count.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from costspec.against.check import AgainstResult, validate_against
from costspec.against.compare import MATMUL, PARAMS
from costspec.against.target import load_target
from costspec.core.results import Result
from costspec.tree.network import Network


@dataclass
class Verdict:
    """The check of an imported spec against the model it came from."""

    structure_exact: bool
    passed: bool  # validate --against's own result (pointwise included)
    structure: list[str] = field(default_factory=list)  # matmul / parameter differences
    pointwise: list[str] = field(default_factory=list)  # CUDA-core kind differences
    unclaimed: list[str] = field(default_factory=list)  # real modules with parameters no layer claims
    result: AgainstResult | None = None

    def line(self) -> str:
        if self.structure_exact:
            head = "structure exact: matmul-class FLOPs and parameters equal the real model's in every row"
        else:
            head = f"structure NOT exact: {len(self.structure) + len(self.unclaimed)} difference(s) in matmul-class " \
                   "FLOPs or parameters"
        tail = "CUDA-core work equal too" if self.passed else \
            f"CUDA-core work: {len(self.pointwise)} difference(s) (listed)"
        return f"{head}; {tail}"

    def as_dict(self) -> dict[str, Any]:
        return {"structure_exact": self.structure_exact, "passed": self.passed, "structure": self.structure,
                "pointwise": self.pointwise, "unclaimed": self.unclaimed}


def check(text: str, name: str, target: str, config: str | None, config_sets: dict[str, Any],
          output_field: str | None, pass_: str = "train") -> Verdict:
    """Load the imported spec from `text` and run validate --against `target` on meta at its defaults."""
    from costspec.spec.load import parse_spec

    model = Network(parse_spec(text, name))
    values = model.bind()
    real = load_target(target, model, values, "meta", config, config_sets, output_field)
    result = validate_against(model, values, real, pass_, "meta")
    structure: list[str] = []
    pointwise: list[str] = []
    for phase, ph in result.phases.items():
        for row, kind, a, b in ph.failures:  # differences no rule explains (scope-boundary moves are not)
            line = f"{phase}: {row or 'total'}: {kind}: spec {a:,}, real {b:,} ({b - a:+,})"
            (structure if kind in (MATMUL, PARAMS) else pointwise).append(line)
    pointwise += result.problems
    unclaimed = list(result.rowmap.unmatched_real)
    return Verdict(not structure and not unclaimed, result.ok, structure, pointwise, unclaimed, result)


def as_result(verdict: Verdict) -> Result | None:
    from costspec.against.report import to_result

    return to_result(verdict.result) if verdict.result is not None else None
