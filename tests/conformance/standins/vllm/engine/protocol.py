"""Stand-in of `vllm.engine.protocol`: the `EngineClient` name vllm_backend annotates with."""

from __future__ import annotations


class EngineClient:
    """The protocol vLLM's engines implement; `vllm.v1.engine.async_llm.AsyncLLM` is one."""
