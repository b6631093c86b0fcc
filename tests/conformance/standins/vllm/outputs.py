"""Stand-in of `vllm.outputs`: the request outputs vLLM's engine yields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar


@dataclass
class CompletionOutput:
    """One of a request's `n` sequences, cumulative (the text and tokens so far)."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Any]] | None
    finish_reason: str | None = None  # "length" | "stop" | "abort" | None while running
    stop_reason: str | int | None = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: Any
    outputs: list[CompletionOutput]
    finished: bool
    metrics: Any = None
    lora_request: Any = None


@dataclass
class PoolingOutput:
    data: list[float]


@dataclass
class EmbeddingOutput:
    embedding: list[float]

    @property
    def hidden_size(self) -> int:
        return len(self.embedding)


_O = TypeVar("_O")


@dataclass
class PoolingRequestOutput(Generic[_O]):
    request_id: str
    outputs: _O
    prompt_token_ids: list[int]
    finished: bool = True


@dataclass
class EmbeddingRequestOutput(PoolingRequestOutput[EmbeddingOutput]):
    @classmethod
    def from_base(cls, request_output: PoolingRequestOutput[Any]) -> EmbeddingRequestOutput:
        return cls(
            request_id=request_output.request_id,
            outputs=EmbeddingOutput(embedding=list(request_output.outputs.data)),
            prompt_token_ids=request_output.prompt_token_ids,
            finished=request_output.finished,
        )


__all__ = [
    "CompletionOutput",
    "EmbeddingOutput",
    "EmbeddingRequestOutput",
    "PoolingOutput",
    "PoolingRequestOutput",
    "RequestOutput",
]
