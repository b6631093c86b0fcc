"""Stand-in of `vllm.sampling_params`: `SamplingParams`, `StructuredOutputsParams`.

No `from __future__ import annotations` here: vllm_backend reads
`SamplingParams.__annotations__` and maps the real types (`int`, `float`, `Optional[int]`) to
convert request parameters sent as strings, as vLLM's own annotations allow.
"""

from dataclasses import dataclass
from typing import Any


@dataclass
class StructuredOutputsParams:
    json: str | dict | None = None
    regex: str | None = None
    choice: list | None = None
    grammar: str | None = None
    json_object: bool | None = None


class SamplingParams:
    """vLLM's sampling parameters (a msgspec Struct in vLLM: keyword fields with defaults, an
    unknown one a TypeError). A subclass's annotated class attributes are fields too."""

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list | None = None
    stop_token_ids: list | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    structured_outputs: StructuredOutputsParams | None = None

    def __init__(self, **fields: Any) -> None:
        known: set = set()
        for cls in type(self).__mro__:
            known.update(getattr(cls, "__annotations__", {}))
        for key, value in fields.items():
            if key not in known:
                raise TypeError(f"Unexpected keyword argument '{key}'")
            setattr(self, key, value)
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}.")

    def stop_strings(self) -> list:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def __repr__(self) -> str:
        return (
            f"SamplingParams(n={self.n}, temperature={self.temperature}, top_p={self.top_p}, "
            f"seed={self.seed}, stop={self.stop}, max_tokens={self.max_tokens})"
        )
