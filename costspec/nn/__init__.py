"""torch modules the op builders return: each computes exactly the work its op definition costs.

Imported only lazily, by an op's `build()` and by `costspec.runtime`, so that `eval`, `check`
and the other analytic commands never import torch. Imports torch and nothing from costspec.
"""
