"""costspec: exact symbolic Tensor-Core / CUDA-core costs of neural networks from a YAML spec.

    >>> import costspec
    >>> model = costspec.load("specs/vit_b.yaml")
    >>> model.cost("forward").tc          # sympy expression in the spec's dims
    >>> model.evaluate("forward", B=8)     # exact integers per layer

The names below are imported when first used, so that `import costspec` (and the command line,
which lives in `costspec.cli`) does not import sympy until something needs it.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from costspec.core.errors import CostspecError, SpecError
from costspec.core.version import __version__

if TYPE_CHECKING:
    from costspec.analysis.reporting import Report
    from costspec.core.results import Row
    from costspec.model import Model, load, loads

_LAZY = {"load": "costspec.model", "loads": "costspec.model", "Model": "costspec.model",
         "Report": "costspec.analysis.reporting", "Row": "costspec.core.results"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'costspec' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = ["load", "loads", "Model", "Report", "Row", "CostspecError", "SpecError", "__version__"]
