"""Stand-in of `vllm.lora` (a test double)."""
