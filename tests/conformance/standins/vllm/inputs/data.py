"""Stand-in of `vllm.inputs.data`: `TokensPrompt` (a TypedDict, as vLLM's)."""

from __future__ import annotations

from typing import TypedDict


class TokensPrompt(TypedDict, total=False):
    prompt_token_ids: list[int]
