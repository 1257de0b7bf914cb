"""The core layer: the vocabulary every other layer speaks, with no knowledge of ops or models.

Expressions and dims (`expr`, `dims`), precision and the FLOP convention (`conventions`), the
cost table of pointwise kinds, work budgets, typed words (`vocab`), errors, the one result table
(`results`) and its renderer (`render`, `units`), the bounded file reader (`safeio`,
`yaml_marks`), the zoo's paths and the progress line. Imports nothing from costspec outside core.
"""
