"""Stand-in of `vllm.v1.metrics.stats`: what the engine reports to stat loggers each step."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SchedulerStats:
    num_running_reqs: int = 0
    num_waiting_reqs: int = 0


@dataclass
class MultiModalCacheStats:
    queries: int = 0
    hits: int = 0


@dataclass
class FinishedRequestStats:
    finish_reason: str
    e2e_latency: float
    num_prompt_tokens: int
    num_generation_tokens: int


@dataclass
class IterationStats:
    """One engine step: tokens processed, latencies observed, requests finished."""

    num_prompt_tokens: int = 0
    num_generation_tokens: int = 0
    time_to_first_tokens_iter: list[float] = field(default_factory=list)
    inter_token_latencies_iter: list[float] = field(default_factory=list)
    n_params_iter: list[int] = field(default_factory=list)
    finished_requests: list[FinishedRequestStats] = field(default_factory=list)
