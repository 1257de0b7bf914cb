"""costspec: exact symbolic Tensor-Core / CUDA-core costs of neural networks from a YAML spec.

    >>> import costspec
    >>> model = costspec.load("specs/vit_b.yaml")
    >>> model.cost("forward").tc          # sympy expression in the spec's dims
    >>> model.evaluate("forward", B=8)     # exact integers per layer
"""
from costspec.analysis.evaluation import Report
from costspec.core.errors import CostspecError, SpecError
from costspec.core.results import Row
from costspec.core.version import __version__
from costspec.model import Model, load, loads

__all__ = ["load", "loads", "Model", "Report", "Row", "CostspecError", "SpecError", "__version__"]
