"""Stand-in of `vllm.usage.usage_lib`: `UsageContext`."""

from __future__ import annotations

import enum


class UsageContext(enum.StrEnum):
    UNKNOWN_CONTEXT = "UNKNOWN_CONTEXT"
    LLM_CLASS = "LLM_CLASS"
    API_SERVER = "API_SERVER"
    OPENAI_API_SERVER = "OPENAI_API_SERVER"
    ENGINE_CONTEXT = "ENGINE_CONTEXT"
