"""Which GPUs a process sees under `CUDA_VISIBLE_DEVICES`, by the rule the CUDA runtime applies.

Every process that names GPUs must agree with CUDA on this: the snapshotter's GPU scan (which
CUDA ordinals a runtime will have, read before any CUDA context exists), and the GPU metrics of
`thaw serve` and `thaw up` (Triton reports the GPUs the server uses, not every GPU of the node).
A pure function of the variable's value and the devices' UUIDs.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["visible_devices"]


def visible_devices(spec: str | None, uuids: Sequence[str]) -> list[int]:
    """The physical indices CUDA makes visible, in CUDA ordinal order, for `CUDA_VISIBLE_DEVICES`
    = `spec` (None: unset, every device) over physical devices with these `uuids` ("" where
    unknown). CUDA's rule: entries are indices or UUID prefixes (`GPU-...`); an entry that
    names no device (or one already named) ends the list there."""
    if spec is None:
        return list(range(len(uuids)))
    out: list[int] = []
    for raw in spec.split(","):
        entry = raw.strip()
        index = _entry_index(entry, uuids)
        if index is None or index in out:
            break
        out.append(index)
    return out


def _entry_index(entry: str, uuids: Sequence[str]) -> int | None:
    if entry.lstrip("-").isdigit():
        value = int(entry)
        return value if 0 <= value < len(uuids) else None
    if entry.startswith("GPU-"):
        matches = [i for i, uuid in enumerate(uuids) if uuid and uuid.startswith(entry)]
        return matches[0] if len(matches) == 1 else None
    return None  # MIG-... and anything else: not mapped here (the list ends, as unknowable)
