"""What a compiled artifact was built for, and why it does not fit this host (pure comparisons).

A compiled artifact (inductor kernels, a TensorRT engine) is only valid for the target, the
framework versions and the settings it was built with. The builder records those as a flat
key (`{"target": "cuda:sm_90", "torch": "2.13.0", ...}`) in the manifest's `artifact_keys`;
before using the artifact, the runtime computes the same key for itself and `key_mismatch`
says, in words fit for a log line, which field differs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
from collections.abc import Mapping
from typing import Any

MAX_VALUE_CHARS = 1024


def key_mismatch(built: Mapping[str, str], here: Mapping[str, str]) -> str | None:
    """None when the two keys are equal, else the first differing field, e.g.
    `torch: built with 2.12.0, here 2.13.0`."""
    for field in sorted(set(built) | set(here)):
        want, have = built.get(field), here.get(field)
        if want != have:
            return f"{field}: built with {want or '(none)'}, here {have or '(none)'}"
    return None


def settings_digest(settings: Mapping[str, Any]) -> str:
    """A short stable digest of JSON-able settings (compile options, provider options)."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.cache
def cpu_host() -> str:
    """The machine type and a digest of the CPU feature flags: what native CPU code (inductor's
    C++ kernels, NCHWc layouts) depends on besides the framework version."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    features = " ".join(sorted(flags.partition(":")[2].split()))
    return f"{platform.machine()}:{hashlib.sha256(features.encode()).hexdigest()[:16]}"


def short(value: object) -> str:
    """`value` as a key field (at most `MAX_VALUE_CHARS`; never empty)."""
    return (str(value) or "-")[:MAX_VALUE_CHARS]
