"""Op definitions. Importing this package registers every op (explicit list, no discovery)."""
from costspec.ops import (  # noqa: F401
    attention,
    conv,
    disentangled,
    embed,
    join,
    layout,
    linear,
    mla,
    mlp,
    moe,
    norm,
    pointwise,
    pool,
    position_table,
    resample,
    scale,
    shape_ops,
    similarity,
    ssm,
    unmapped,
)
from costspec.ops.registry import OPS, register_op, spec_ops  # noqa: F401
