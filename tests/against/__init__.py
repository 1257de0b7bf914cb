"""Tests of `costspec validate --against` (costspec/against/)."""
