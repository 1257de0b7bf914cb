"""torch modules the op builders return: each computes exactly the work its op definition costs,
with the aten ops the runtime counter maps to cost-table kinds; shape comments use the op's names
(B, S, C, h, d). One module per op family (attention, positions, conv, embed, mlp, moe, norm, join,
layout, shape_ops, pool, scale, activation), and `autograd`: how they shape the autograd graph.

Imported only lazily, by an op's `build()` and by `costspec.runtime`, so that `eval`, `check`
and the other analytic commands never import torch. Imports torch and nothing from costspec
outside this package.
"""
