"""Stand-in of `vllm.engine` (see the package docstring: a test double)."""
