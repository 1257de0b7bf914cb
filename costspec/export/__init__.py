"""Renderers: reports -> text. Human units (GFLOP, M params) appear only here."""
