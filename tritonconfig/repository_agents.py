"""A config's `model_repository_agents`, run on the model's directory before the model loads.

Triton loads each agent a config names from `--repoagent-directory` and asks it to act on the
model's files before the load; a failing agent fails the load with its error (tritonserver
logs `Poll failed for model directory '<name>': <why>`). Thaw has the agent Triton ships,
`checksum` (triton-inference-server/checksum_repository_agent), built in:

    model_repository_agents { agents [ { name: "checksum",
        parameters [ { key: "MD5:1/model.onnx", value: "<md5, lowercase hex>" } ] } ] }

Each parameter's file, relative to the model's directory, must have that MD5 digest, or the
load fails in the agent's words (`Mismatched MD5 hash for file 1/model.onnx, expect: ...,
got: ...`). Any other agent fails the load as tritonserver fails it when no library of that
name is installed.

Beyond Triton's agent (which reads `<model dir>/<path>` as given): a path with `..` is
refused, so a config names only files of its own model; a file that is not a regular file (a
FIFO would block the read) is refused; files are hashed in 1 MiB reads, never held whole.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import NoReturn

from tritonconfig.errors import ModelConfigError
from tritonconfig.schema import mc

__all__ = ["CHECKSUM_AGENT", "run_repository_agents", "verify_checksums"]

CHECKSUM_AGENT = "checksum"
_READ_BYTES = 1 << 20
_SHOWN_CHARS = 200  # of a name or key in a message: a config may hold long strings


def run_repository_agents(config: mc.ModelConfig, model_dir: Path) -> None:
    """Run the agents `config` names, in its order, on `model_dir`; ModelConfigError with
    the first failing agent's words. Blocking: reads the files the checksum agent names."""
    for agent in config.model_repository_agents.agents:
        if agent.name != CHECKSUM_AGENT:
            name = _shown(agent.name)
            raise ModelConfigError(
                f"unable to find 'libtritonrepoagent_{name}.so' for repo agent '{name}', "
                f"searched: thaw's built-in repository agents ({CHECKSUM_AGENT})"
            )
        verify_checksums(agent.parameters, model_dir)


def verify_checksums(parameters: Mapping[str, str], model_dir: Path) -> None:
    """The checksum agent: each `ALGORITHM:relative/path` -> expected digest, in key order
    (Triton's map has none); ModelConfigError in the agent's words at the first that fails."""
    for key in sorted(parameters):
        algorithm, colon, relative = key.partition(":")
        if not colon:
            raise ModelConfigError(f"failed to parse key: {_shown(key)}")
        if algorithm.lower() != "md5":
            raise ModelConfigError(f"Unsupported checksum algorithm: {_shown(algorithm)}")
        expected = parameters[key]
        got = _md5(model_dir, relative)
        if got != expected:
            raise ModelConfigError(
                f"Mismatched MD5 hash for file {_shown(relative)}, expect: {_shown(expected)}, "
                f"got: {got}"
            )


def _md5(model_dir: Path, relative: str) -> str:
    """The MD5 of `model_dir`/`relative` (a leading `/` stays inside, as Triton joins them)."""
    parts = PurePosixPath(relative).parts
    if ".." in parts:
        _unreadable(relative, "the path leaves the model directory")
    path = model_dir.joinpath(*(p for p in parts if p != "/"))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        _unreadable(relative, exc.strerror or str(exc))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        _unreadable(relative, "not a regular file")
    with os.fdopen(fd, "rb") as file:
        digest = hashlib.md5(usedforsecurity=False)
        try:
            while chunk := file.read(_READ_BYTES):
                digest.update(chunk)
        except OSError as exc:
            _unreadable(relative, exc.strerror or str(exc))
    return digest.hexdigest()


def _unreadable(relative: str, why: str) -> NoReturn:
    raise ModelConfigError(f"failed to open text file for read {_shown(relative)}: {why}")


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."
