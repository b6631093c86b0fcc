"""Stand-in of `vllm.v1.engine.async_llm`: `AsyncLLM`, an asyncio engine that "generates"
deterministic words (see the package docstring: a test double, no model runs).

    generate(prompt, params, id) ─▶ one step per `THAW_VLLM_STANDIN_STEP_S`: every running
        sequence gets one word; a RequestOutput (cumulative, as vLLM's default) per step;
        stat loggers get the step's IterationStats; `abort(id)` ends it with "abort"
    guided (params.structured_outputs.json set) ─▶ the stand-in constrains nothing: its whole
        text, in one step, is the JSON schema it was given, so a check sees what reached the
        engine through vllm_backend's parsing; `json_object` set: its text is "{}"
    with a LoRA adapter (a LoRARequest) ─▶ likewise, its whole text is the adapter's
        `{"lora_int_id", "lora_path"}`
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import zlib
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from vllm.config import VllmConfig
from vllm.engine.protocol import EngineClient
from vllm.logprobs import Logprob
from vllm.outputs import CompletionOutput, PoolingOutput, PoolingRequestOutput, RequestOutput
from vllm.pooling_params import PoolingParams
from vllm.sampling_params import SamplingParams, StructuredOutputsParams
from vllm.usage.usage_lib import UsageContext
from vllm.v1.metrics.loggers import StatLoggerBase, StatLoggerFactory
from vllm.v1.metrics.stats import FinishedRequestStats, IterationStats, SchedulerStats

# The stand-in's vocabulary: a token id is an index here.
WORDS = (
    "the", "a", "model", "wakes", "from", "zero", "and", "serves", "every", "request", "on",
    "time", "while", "it", "sleeps", "quietly", "in", "cold", "storage", "until", "called",
    "again", "with", "tokens", "that", "stream", "one", "by", "step", "is", ".", "\n",
)  # fmt: skip


class EngineDeadError(Exception):
    """The engine is shut down (vLLM's `vllm.v1.engine.exceptions.EngineDeadError`)."""


def piece(token: int) -> str:
    """A token's text: a word after a space, punctuation as it is."""
    word = WORDS[token]
    return word if word in (".", "\n") else " " + word


def prompt_token_ids(prompt: str) -> list[int]:
    """The stand-in's tokenizer: one token per whitespace-separated word."""
    return [zlib.crc32(word.encode()) % 50_000 for word in prompt.split()]


def next_token(prompt: str, sequence: int, step: int, params: SamplingParams) -> int:
    """The word a sequence "samples" at `step`: from the prompt alone when greedy
    (temperature 0: every sequence the same), else also from the sequence and seed."""
    key = zlib.crc32(prompt.encode())
    if params.temperature > 0:
        key += 104_729 * sequence + 15_485_863 * (params.seed or 0)
    return (key + 7_919 * step) % len(WORDS)


def guided_text(params: SamplingParams) -> str | None:
    """A guided request's whole text: the JSON schema of its `structured_outputs` (None when
    not guided by a schema)."""
    structured = params.structured_outputs
    if structured is None:
        return None
    if not isinstance(structured, StructuredOutputsParams):
        raise TypeError(f"structured_outputs must be StructuredOutputsParams, not {structured!r}")
    if structured.json_object:
        return "{}"  # any one JSON object: the stand-in's is the empty one
    schema = structured.json
    return None if schema is None else schema if isinstance(schema, str) else json.dumps(schema)


def lora_text(lora_request: Any) -> str | None:
    """A request run with a LoRA adapter: its whole text names the adapter the engine was given
    (None without one)."""
    if lora_request is None:
        return None
    given = {"lora_int_id": lora_request.lora_int_id, "lora_path": lora_request.lora_path}
    return json.dumps(given)


class _Sequence:
    def __init__(self, index: int) -> None:
        self.index = index
        self.tokens: list[int] = []
        self.text = ""
        self.logprobs: list[dict[int, Logprob]] = []
        self.finish_reason: str | None = None
        self.stop_reason: str | None = None

    def output(self, with_logprobs: bool) -> CompletionOutput:
        cumulative = sum(lp.logprob for d in self.logprobs for lp in d.values())
        return CompletionOutput(
            index=self.index,
            text=self.text,
            token_ids=list(self.tokens),
            cumulative_logprob=cumulative if with_logprobs else None,
            logprobs=list(self.logprobs) if with_logprobs else None,
            finish_reason=self.finish_reason,
            stop_reason=self.stop_reason,
        )


class AsyncLLM(EngineClient):
    """vLLM's v1 async engine client, as vllm_backend drives it."""

    def __init__(
        self, vllm_config: VllmConfig, stat_loggers: Sequence[StatLoggerBase], step_s: float
    ) -> None:
        self.vllm_config = vllm_config
        self._stat_loggers = list(stat_loggers)
        self._step_s = step_s
        self._aborted: set[str] = set()
        self._running: set[str] = set()
        self._dead = False
        self._health_checks = 0

    @classmethod
    def from_vllm_config(
        cls,
        vllm_config: VllmConfig,
        usage_context: UsageContext = UsageContext.ENGINE_CONTEXT,
        stat_loggers: list[StatLoggerFactory] | None = None,
        enable_log_requests: bool = False,
        aggregate_engine_logging: bool = False,
        disable_log_stats: bool = False,
        **kwargs: Any,
    ) -> AsyncLLM:
        loggers = []
        if not disable_log_stats:
            for factory in stat_loggers or ():
                stat_logger = factory(vllm_config, 0)
                stat_logger.log_engine_initialized()
                loggers.append(stat_logger)
        step_s = float(os.environ.get("THAW_VLLM_STANDIN_STEP_S", "0.01"))
        return cls(vllm_config, loggers, step_s)

    async def reset_mm_cache(self) -> None:
        pass

    def shutdown(self) -> None:
        self._dead = True

    async def get_supported_tasks(self) -> tuple[str, ...]:
        return self.vllm_config.model_config.supported_tasks

    async def check_health(self) -> None:
        self._alive()
        # vllm_backend's L0_check_health_vllm patches vLLM's AsyncLLM.check_health to fail from
        # its 2nd call; `THAW_VLLM_STANDIN_HEALTHY_CHECKS=N` is that patch: N calls pass.
        healthy = os.environ.get("THAW_VLLM_STANDIN_HEALTHY_CHECKS")
        if healthy is not None:
            self._health_checks += 1
            if self._health_checks > int(healthy):
                raise RuntimeError("Simulated vLLM check_health() failure")

    def _alive(self) -> None:
        if self._dead:
            raise EngineDeadError(
                "EngineCore encountered an issue. See stack trace for the root cause."
            )

    async def abort(self, request_id: str | Sequence[str]) -> None:
        ids = [request_id] if isinstance(request_id, str) else list(request_id)
        self._aborted.update(i for i in ids if i in self._running)

    async def generate(
        self,
        prompt: Any,
        sampling_params: SamplingParams,
        request_id: str,
        lora_request: Any = None,
        **kwargs: Any,
    ) -> AsyncGenerator[RequestOutput, None]:
        self._alive()
        text = prompt.get("prompt", "") if isinstance(prompt, dict) else str(prompt)
        prompt_ids = prompt_token_ids(text)
        limit = min(
            sampling_params.max_tokens or self.vllm_config.model_config.max_model_len,
            self.vllm_config.model_config.max_model_len - len(prompt_ids),
        )
        sequences = [_Sequence(i) for i in range(sampling_params.n)]
        with_logprobs = sampling_params.logprobs is not None
        started = last = time.monotonic()
        self._running.add(request_id)
        try:
            for step in range(max(limit, 1)):
                await asyncio.sleep(self._step_s)
                if request_id in self._aborted:
                    for seq in sequences:
                        seq.finish_reason = seq.finish_reason or "abort"
                    yield self._output(request_id, text, prompt_ids, sequences, with_logprobs)
                    return
                for seq in sequences:
                    if seq.finish_reason is None:
                        self._step(seq, text, step, sampling_params, limit,
                                   lora=lora_text(lora_request))  # fmt: skip
                now = time.monotonic()
                done = all(seq.finish_reason is not None for seq in sequences)
                self._record(step, prompt_ids, sequences, sampling_params, now - last,
                             now - started, done)  # fmt: skip
                last = now
                yield self._output(request_id, text, prompt_ids, sequences, with_logprobs)
                if done:
                    return
        finally:
            self._running.discard(request_id)
            self._aborted.discard(request_id)

    async def encode(
        self, prompt: Any, pooling_params: PoolingParams, request_id: str, **kwargs: Any
    ) -> AsyncGenerator[PoolingRequestOutput[Any], None]:
        self._alive()
        text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt["prompt_token_ids"]))
        size = pooling_params.dimensions or 8
        key = zlib.crc32(text.encode())
        vector = [((key >> (i % 24)) % 1000) / 1000.0 for i in range(size)]
        await asyncio.sleep(self._step_s)
        yield PoolingRequestOutput(request_id, PoolingOutput(vector), prompt_token_ids(text))

    @staticmethod
    def _step(seq: _Sequence, prompt: str, step: int, params: SamplingParams, limit: int, *,
              lora: str | None = None) -> None:  # fmt: skip
        token = next_token(prompt, seq.index, step, params)
        seq.tokens.append(token)
        guided = lora if lora is not None else guided_text(params)
        if guided is not None:
            seq.text, seq.finish_reason = guided, "stop"
            seq.logprobs.append({token: Logprob(-0.1, 1, guided)})
            return
        seq.text += piece(token)
        seq.logprobs.append({token: Logprob(-0.1 * (1 + token % 5), 1, piece(token))})
        for stop in params.stop_strings():
            at = seq.text.find(stop)
            if at >= 0:
                end = at + len(stop) if params.include_stop_str_in_output else at
                seq.text, seq.finish_reason, seq.stop_reason = seq.text[:end], "stop", stop
                return
        if len(seq.tokens) >= limit:
            seq.finish_reason = "length"

    def _record(
        self,
        step: int,
        prompt_ids: list[int],
        sequences: list[_Sequence],
        params: SamplingParams,
        step_s: float,
        elapsed_s: float,
        done: bool,
    ) -> None:
        stats = IterationStats(
            num_prompt_tokens=len(prompt_ids) if step == 0 else 0,
            num_generation_tokens=sum(1 for seq in sequences if len(seq.tokens) == step + 1),
            time_to_first_tokens_iter=[step_s] if step == 0 else [],
            inter_token_latencies_iter=[step_s] if step > 0 else [],
            n_params_iter=[params.n] if step == 0 else [],
        )
        if done:
            stats.finished_requests.append(
                FinishedRequestStats(
                    finish_reason=sequences[0].finish_reason or "length",
                    e2e_latency=elapsed_s,
                    num_prompt_tokens=len(prompt_ids),
                    num_generation_tokens=sum(len(seq.tokens) for seq in sequences),
                )
            )
        for stat_logger in self._stat_loggers:
            stat_logger.record(SchedulerStats(num_running_reqs=len(self._running)), stats)

    @staticmethod
    def _output(
        request_id: str,
        prompt: str,
        prompt_ids: list[int],
        sequences: list[_Sequence],
        with_logprobs: bool,
    ) -> RequestOutput:
        return RequestOutput(
            request_id=request_id,
            prompt=prompt,
            prompt_token_ids=prompt_ids,
            prompt_logprobs=None,
            outputs=[seq.output(with_logprobs) for seq in sequences],
            finished=all(seq.finish_reason is not None for seq in sequences),
        )
