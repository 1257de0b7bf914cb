"""costspec: exact symbolic Tensor-Core / CUDA-core costs of neural networks from a YAML spec.

    >>> import costspec
    >>> model = costspec.load("specs/vit_b.yaml")
    >>> model.cost("forward").tc          # sympy expression in the spec's dims
    >>> model.evaluate("forward", B=8)     # exact integers per layer
"""
from costspec.core.errors import CostspecError, SpecError
from costspec.analysis.evaluation import Report
from costspec.model import Model, load, loads
from costspec.core.results import Row

__all__ = ["load", "loads", "Model", "Report", "Row", "CostspecError", "SpecError"]
__version__ = "0.1.0"
