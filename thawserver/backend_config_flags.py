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

__all__ = ["BackendSetting", "add_backend_config_argument", "backend_settings"]

# (backend, setting, value); backend "" for a global setting (`--backend-config=KEY=VALUE`).
BackendSetting = tuple[str, str, str]


def add_backend_config_argument(
    group: argparse._ActionsContainer, *, replicas: bool = False
) -> None:
    """The flag; `replicas`: `thaw up`'s help (it gives them to every replica)."""
    where = " (given to every replica)" if replicas else ""
    group.add_argument(
        "--backend-config", action="append", default=[], metavar="BACKEND,KEY=VALUE",
        help=f"a backend setting (repeatable){where}; python's shm and stub settings are "
        "accepted, others are logged as ignored",
    )  # fmt: skip


def backend_settings(values: Sequence[str]) -> tuple[BackendSetting, ...]:
    """`--backend-config` values as (backend, setting, value); ValueError names a bad one."""
    settings: list[BackendSetting] = []
    for text in values:
        head, _, rest = text.partition(",")
        backend, pair = ("", text) if "=" in head or not rest else (head.strip(), rest)
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise ValueError(
                f"`backend_config` = {text!r}, must be BACKEND,SETTING=VALUE or SETTING=VALUE"
            )
        settings.append((backend, key.strip(), value.strip()))
    return tuple(settings)
