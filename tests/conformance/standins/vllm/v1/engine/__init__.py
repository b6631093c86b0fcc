"""Stand-in of `vllm.v1.engine` (a test double)."""
