"""The analysis layer: numbers and formulas from the built tree, without torch.

Evaluation at bound dims, the roofline and the GPU catalog, sweeps, the precision ladder, ragged
batches, Tensor-Core alignment, closed forms, calibration of executed FLOPs and the analytic ncu
slots. May import `core`, `ops`, `spec` and `tree`; never torch.
"""
