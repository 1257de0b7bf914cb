"""The tree layer: a validated spec document -> the model tree (named nodes, symbolic shapes,
dataflow, repeats kept as multipliers) and the one walk over it that every consumer reads
(rows, instance counts, gradient state, symbolic `Cost`). May import `core`, `ops` and `spec`.

Modules, each importing only those after it: `network` (the built tree with its dims), `build` (the
builder that walks the spec), `walk`, then `dataflow` (named values, joins, fanouts, gradient state),
`naming` (dotted names) and `attributes` (sizes and op attributes as sympy), `nodes` (the node types)
and `cost`.
"""
