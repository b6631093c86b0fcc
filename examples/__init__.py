"""Generators for Thaw's example Triton model repository (random weights, no downloads)."""
