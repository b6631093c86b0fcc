"""Stand-in of `vllm.v1` (a test double)."""
