"""Stand-in of `vllm.logprobs`: `Logprob` (one token's log probability)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None
