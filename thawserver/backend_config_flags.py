"""tritonserver's `--backend-config` flag, for both CLIs: its grammar and Triton's refusal
(`thaw serve` applies the python backend's settings and logs the others as ignored,
runtime.process.triton_flags; `thaw up` checks them at its start and gives them to every
replica it starts).

    backend_settings(["python,shm-default-byte-size=5242880"])
        -> (("python", "shm-default-byte-size", "5242880"),)
    backend_settings(["min-compute-capability=7.0"])  -> (("", "min-compute-capability", "7.0"),)
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from tritonconfig import DEFAULT_MAX_BATCH_SIZE

__all__ = [
    "BackendSetting",
    "add_backend_config_argument",
    "backend_settings",
    "default_max_batch_size",
]

# (backend, setting, value); backend "" for a global setting (`--backend-config=KEY=VALUE`).
BackendSetting = tuple[str, str, str]


def add_backend_config_argument(
    group: argparse._ActionsContainer, *, replicas: bool = False
) -> None:
    """The flag; `replicas`: `thaw up`'s help (it gives them to every replica)."""
    where = " (given to every replica)" if replicas else ""
    group.add_argument(
        "--backend-config", action="append", default=[], metavar="BACKEND,KEY=VALUE",
        help=f"a backend setting (repeatable){where}; python's shm and stub settings and "
        "default-max-batch-size (ONNX auto-complete's, default 4) are accepted, others are "
        "logged as ignored",
    )  # fmt: skip


def backend_settings(values: Sequence[str]) -> tuple[BackendSetting, ...]:
    """`--backend-config` values as (backend, setting, value); ValueError names a bad one."""
    settings: list[BackendSetting] = []
    for text in values:
        head, comma, rest = text.partition(",")
        backend, pair = ("", text) if "=" in head or not rest else (head.strip(), rest)
        if comma and not backend and not head.strip():
            raise ValueError(f"No backend specified. {_FORMAT}. Got {text!r}")
        key, eq, value = pair.partition("=")
        # tritonserver refuses an empty setting or value too (qa/L0_backend_config)
        if not eq or not key.strip() or not value.strip():
            raise ValueError(f"{_FORMAT}. Got {text!r}")
        settings.append((backend, key.strip(), value.strip()))
    return tuple(settings)


# tritonserver's words, which its qa/L0_backend_config looks for in the log of a refused start
_FORMAT = (
    "--backend-config option format is '<backend name>,<setting>=<value>' or '<setting>=<value>'"
)


def default_max_batch_size(settings: Sequence[BackendSetting], backend: str) -> int:
    """The `max_batch_size` that `backend`'s auto-complete gives a model that can batch and
    whose config sets none: the last `BACKEND,default-max-batch-size=N`, else the last
    `default-max-batch-size=N`, else 4 (tritonserver's; a negative N is 0: no batching).
    ValueError when N is not an integer (tritonserver's backend then fails to start)."""
    given = {name: value for name, key, value in settings if key == "default-max-batch-size"}
    chosen = next(((name, given[name]) for name in (backend, "") if name in given), None)
    if chosen is None:
        return DEFAULT_MAX_BATCH_SIZE
    text = chosen[1].strip()
    digits = text[1:] if text[:1] in "+-" else text
    # A config's max_batch_size is an int32 (tritonserver's parse refuses what overflows it).
    if digits.isascii() and digits.isdigit() and int(text) <= _INT32_MAX:
        return max(int(text), 0)
    where = f"{chosen[0]}," if chosen[0] else ""
    raise ValueError(
        f"--backend-config={where}default-max-batch-size={chosen[1]}: not an integer "
        f"up to {_INT32_MAX}"
    )


_INT32_MAX = 2**31 - 1
