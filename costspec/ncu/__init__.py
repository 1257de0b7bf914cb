"""Nsight Compute (ncu) side of costspec: metric lists, CSV parsing, kernel classification."""
