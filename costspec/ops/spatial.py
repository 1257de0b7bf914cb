"""Spatial ranks of the per-rank op families (convolutions, pooling): for 1, 2 and 3 spatial dims,
the input layout and how the docs write it, the attribute kind of a per-dim size, and per-dim values."""
from __future__ import annotations

from dataclasses import dataclass

import sympy


@dataclass(frozen=True)
class Rank:
    """`n` spatial dims after [B, C]."""

    n: int
    layout: str  # NCL, NCHW, NCTHW
    shape: str  # [B, C, L], ...
    axes: str  # the spatial axes: L; H, W; T, H, W
    kind: str  # attribute kind of a per-dim size: size, pair, triple

    @property
    def dim_names(self) -> tuple[str, ...]:
        """The spatial dims in error messages."""
        return ("length",) if self.n == 1 else ("depth", "height", "width")[-self.n:]


RANKS = {
    1: Rank(1, "NCL", "[B, C, L]", "L", "size"),
    2: Rank(2, "NCHW", "[B, C, H, W]", "H, W", "pair"),
    3: Rank(3, "NCTHW", "[B, C, T, H, W]", "T, H, W", "triple"),
}


def per_dim(value, n: int) -> tuple:
    """One value per spatial dim: a list as given, a single value repeated.

    (A default taken from another attribute, e.g. a pool's stride = kernel, arrives as a sympy Tuple.)"""
    return tuple(value) if isinstance(value, (list, tuple, sympy.Tuple)) else (value,) * n
