"""The tree layer: a validated spec document -> the model tree (named nodes, symbolic shapes,
dataflow, repeats kept as multipliers) and the one walk over it that every consumer reads
(rows, instance counts, gradient state, symbolic `Cost`). May import `core`, `ops` and `spec`.
"""
