"""Stand-in of `vllm.utils`: `random_uuid`."""

from __future__ import annotations

import uuid


def random_uuid() -> str:
    return uuid.uuid4().hex
