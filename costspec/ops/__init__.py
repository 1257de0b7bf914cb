"""Op definitions. Importing this package registers every op (explicit list, no discovery)."""
from . import attention, conv, embed, join, layout, linear, mlp, moe, norm, pointwise, pool, resample, scale, shape_ops  # noqa: F401
from .registry import OPS, register_op, spec_ops  # noqa: F401
