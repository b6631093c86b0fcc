"""Stand-in of `vllm.v1.metrics` (a test double)."""
