"""Request ids: `random_uuid`, which vLLM keeps in `vllm.utils` (this package answers that import
with this module: see its `__init__`)."""

from __future__ import annotations

import uuid


def random_uuid() -> str:
    return uuid.uuid4().hex
