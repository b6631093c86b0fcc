"""A shared pod's budget from its memory limit: what the kernel lets its runtime container hold.

The flag (`--shared-replica-bytes`) is the budget an operator asks for; a pod whose runtime
container has a smaller `resources.limits.memory` would be OOM-killed before that budget was
booked full, taking every model on it down at once. So a shared pod's budget is the smaller
of the flag and its limit less what the runtime holds of its own (measured when the pod is
opened: its resident memory, `thaw_server_resident_memory_bytes`, less the model just loaded
into it); without a limit, the flag's.

    memory_limit(pod)                 ─▶ bytes of the runtime container's limit, or None
    shared_budget(flag, limit, own)   ─▶ the budget booked in the pod's annotation
    device_room(total, used, model)   ─▶ on a GPU pod, what its models may take of the GPUs'
                                         memory: the budget is capped by it too

A model's image is its weights, and on a GPU pod those weights live in device memory: a GPU
pod's budget is also capped by its GPUs' memory (`nv_gpu_memory_total_bytes`, summed) less
what is used there besides the model just loaded (`nv_gpu_memory_used_bytes` less the model:
the CUDA context, the frameworks' pools), read from the runtime when the pod is opened.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from activator.scaler.kubernetes.pod_state import Pod

__all__ = ["device_room", "memory_limit", "parse_quantity", "shared_budget"]

# Kubernetes' resource.Quantity suffixes (binary SI, decimal SI; "m" is a thousandth).
_SUFFIX: dict[str, int | Decimal] = {
    "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "m": Decimal("0.001"), "": 1,
}  # fmt: skip
_QUANTITY = re.compile(
    r"([+]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?"
)
_MAX_BYTES = 1 << 62  # past this a "limit" is no limit a pod can have


def parse_quantity(text: object) -> int | None:
    """Bytes of a Kubernetes memory quantity (`8Gi`, `512Mi`, `1e9`, `1500M`), rounded up as
    Kubernetes does; None for anything else (a typo in a manifest must not become a budget)."""
    if not isinstance(text, str) or len(text) > 64:
        return None
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        return None
    try:
        value = Decimal(match.group(1)) * _SUFFIX[match.group(2) or ""]
    except InvalidOperation:
        return None
    if value <= 0 or value > _MAX_BYTES:
        return None
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


def memory_limit(pod: Pod) -> int | None:
    """The memory limit of `pod`'s runtime container (the one with a port named `http`, else
    the first), in bytes; None when it has none or it does not parse."""
    containers = [c for c in pod.get("spec", {}).get("containers") or [] if isinstance(c, dict)]
    if not containers:
        return None
    runtime = next(
        (c for c in containers if any(p.get("name") == "http" for p in c.get("ports") or [])),
        containers[0],
    )
    limits = (runtime.get("resources") or {}).get("limits") or {}
    return parse_quantity(limits.get("memory")) if isinstance(limits, dict) else None


def shared_budget(flag_bytes: int, limit_bytes: int | None, own_bytes: int | None) -> int:
    """The budget of a shared pod: the flag's, capped by its limit less the runtime's own
    memory (0 when not known); never below 0."""
    if limit_bytes is None:
        return flag_bytes
    return max(0, min(flag_bytes, limit_bytes - (own_bytes or 0)))


def device_room(total_bytes: int | None, used_bytes: int | None, model_bytes: int) -> int | None:
    """The device memory a GPU pod's models may take: its GPUs' total less what is used there
    besides the model just loaded (`model_bytes`); None on a pod without GPUs (unknown)."""
    if total_bytes is None or used_bytes is None or total_bytes <= 0:
        return None
    own = max(0, used_bytes - model_bytes)
    return max(0, total_bytes - own)
