"""Token log probabilities: a vLLM-style model's `logprobs` output read, and OpenAI's two shapes.

The model (Triton's vLLM backend, src/utils/request.py) answers `logprobs` as one JSON string
per response: the tokens generated since the previous response, each a map of token id to
`{"logprob", "rank", "decoded_token"}` — the sampled token first, then the top ones by rank
(vLLM's order), or `"null"` when none were asked:

    [{"72": {"logprob": -0.3, "rank": 1, "decoded_token": "H"},
      "11": {"logprob": -2.1, "rank": 2, "decoded_token": ","}}, ...]

    completions  {"tokens", "token_logprobs", "text_offset", "top_logprobs": [{token: logprob}]}
    chat         {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
                  "logprob", "bytes"}]}]}

`text_offset` counts characters of the choice's text: the echoed prompt, then each earlier
token's text, so a streamed choice's offsets are the whole answer's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runtime.openai.errors import OpenAIError

__all__ = ["TokenLogprob", "chat_logprobs", "completion_logprobs", "parse_logprobs"]

_FLOOR = -9999.0
_UNRANKED = 1 << 62  # a token without a rank sorts after every ranked one (Triton's frontend)


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One generated token: its text, its log probability, and the `top` most likely tokens
    at its position (text, log probability), most likely first."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...]


def parse_logprobs(model: str, raw: str, *, top: int) -> list[TokenLogprob]:
    """The tokens one response's `logprobs` output describes (`top`: how many of the most
    likely tokens to keep per position). A model's answer in another shape is its error (500)."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        raise _bad(model, "not JSON") from None
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise _bad(model, "not a JSON list")
    return [_position(model, entry, top) for entry in doc if entry]


def _position(model: str, entry: Any, top: int) -> TokenLogprob:
    if not isinstance(entry, dict):
        raise _bad(model, "a position is not a JSON object")
    tokens = [_token(model, value) for value in entry.values()]
    chosen = tokens[0]  # vLLM writes the sampled token first
    ranked = sorted(tokens, key=lambda t: t[2])
    return TokenLogprob(chosen[0], chosen[1], tuple((t, lp) for t, lp, _ in ranked[:top]))


def _token(model: str, value: Any) -> tuple[str, float, int]:
    if not isinstance(value, dict):
        raise _bad(model, "a token is not a JSON object")
    token, logprob, rank = value.get("decoded_token"), value.get("logprob"), value.get("rank")
    if not isinstance(token, str):
        raise _bad(model, "a token has no 'decoded_token' string")
    if not _is_text(token):  # a lone surrogate (JSON's `\ud800`): its UTF-8 `bytes` are none
        raise _bad(model, "a token's 'decoded_token' is not Unicode text")
    number = _logprob(logprob)
    if number is None:
        raise _bad(model, "a token has no 'logprob' number")
    if isinstance(rank, bool) or not isinstance(rank, int):
        rank = _UNRANKED
    # JSON has no -Infinity: OpenAI's API (and vLLM's server) write an impossible token so.
    return token, max(number, _FLOOR), rank


def _logprob(value: Any) -> float | None:
    """A log probability as a float: finite, or -inf (an impossible token); None for anything
    else (not a number, NaN, +inf: no JSON answer can carry it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range
        number = -math.inf if value < 0 else math.inf
    return None if math.isnan(number) or number == math.inf else number


def _is_text(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _bad(model: str, why: str) -> OpenAIError:
    return OpenAIError(
        f"model '{model}' answered 'logprobs' in an unknown shape: {why}", status=500
    )


def completion_logprobs(tokens: Sequence[TokenLogprob], *, offset: int) -> dict[str, Any]:
    """The completions shape of `tokens`, the first of which starts at character `offset`."""
    offsets = []
    for token in tokens:
        offsets.append(offset)
        offset += len(token.token)
    return {
        "tokens": [t.token for t in tokens],
        "token_logprobs": [t.logprob for t in tokens],
        "text_offset": offsets,
        "top_logprobs": [dict(t.top) for t in tokens],
    }


def chat_logprobs(tokens: Sequence[TokenLogprob]) -> dict[str, Any]:
    """The chat shape of `tokens`."""
    return {
        "content": [
            {
                "token": t.token,
                "logprob": t.logprob,
                "bytes": list(t.token.encode("utf-8")),
                "top_logprobs": [
                    {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}
                    for text, lp in t.top
                ],
            }
            for t in tokens
        ]
    }
