"""Stand-in of `vllm.inputs` (a test double)."""
