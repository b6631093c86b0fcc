"""Stand-in of `vllm.usage` (a test double)."""
