"""Start a Python model's stub process: its interpreter (`EXECUTION_ENV_PATH`), its socket.

stub_python(EXECUTION_ENV_PATH) ─▶ this interpreter | <env>/bin/python (a tarball unpacked)
stub_env(python) ─▶ the environment a process under it starts with (Thaw's import path first)
spawn(python) ─▶ `python -m runtime.python.stub.stub_main FD`, the other end of a socket pair

A model's `auto_complete_config` runs where its stubs would (runtime.python.auto_complete): the
same `stub_python` and `stub_env`.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import RepositoryError
from runtime.python.stub.wire import channel_pair

__all__ = ["SpawnedStub", "spawn", "stub_env", "stub_python"]

# The directory holding the `runtime` package (runtime/python/stub_process.py, two levels up):
# a stub's interpreter imports `runtime.python.stub` from there. Found from this file rather than
# by importing `runtime` itself, which would be an import circle through its `__init__`.
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def stub_python(config_env: str | None, model_dir: Path) -> tuple[Path, Path | None]:
    """The interpreter for a model's stubs, and a directory to remove at unload (an unpacked
    tarball). `config_env` is EXECUTION_ENV_PATH as written."""
    if config_env is None:
        return Path(sys.executable), None
    path = Path(config_env.replace("$$TRITON_MODEL_DIRECTORY", str(model_dir)))
    cleanup = None
    if path.is_file() and tarfile.is_tarfile(path):
        cleanup = Path(tempfile.mkdtemp(prefix="thaw-env-"))
        try:
            with tarfile.open(path) as archive:
                archive.extractall(cleanup, filter="data")
        except (tarfile.TarError, OSError) as exc:
            shutil.rmtree(cleanup, ignore_errors=True)
            raise RepositoryError(f"EXECUTION_ENV_PATH {path}: cannot unpack: {exc}") from exc
        path = cleanup
    for name in ("bin/python3", "bin/python"):
        if (path / name).is_file():
            return path / name, cleanup
    if cleanup is not None:
        shutil.rmtree(cleanup, ignore_errors=True)
    raise RepositoryError(
        f"EXECUTION_ENV_PATH {config_env!r}: {path} holds no bin/python (a Python environment "
        "directory, or a tarball of one such as conda-pack makes, is needed)"
    )


def stub_env(python: Path) -> dict[str, str]:
    """The environment of a process started with `python` (a stub, or the process running a
    model's `auto_complete_config`): the `runtime` package importable first (an environment's
    interpreter lacks Thaw's packages; the stub side imports only the stdlib, numpy and its own
    modules), the server's log level, and an environment's `bin` first on PATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
    )
    env["THAW_STUB_LOG_LEVEL"] = logging.getLevelName(logging.getLogger().getEffectiveLevel())
    if python != Path(sys.executable):
        env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@dataclass(frozen=True)
class SpawnedStub:
    """A started stub process and the server's end of its socket."""

    proc: subprocess.Popen[bytes]
    sock: socket.socket


def spawn(python: Path, model: str, imports: tuple[str, ...] = ()) -> SpawnedStub:
    """Start a stub process with `python` (blocking: a fork and exec); RepositoryError if it
    cannot start. `imports`: modules it imports before it reads its first message (a stub
    started ahead of its model, runtime.python.spare_stubs)."""
    server_end, stub_end = channel_pair()
    argv = [str(python), "-m", "runtime.python.stub.stub_main", str(stub_end.fileno())]
    if imports:
        argv += ["--import", ",".join(imports)]
    try:
        proc = subprocess.Popen(
            argv,
            pass_fds=(stub_end.fileno(),),
            env=stub_env(python),
            stdin=subprocess.DEVNULL,
        )
    except OSError as exc:
        server_end.close()
        raise RepositoryError(f"model '{model}': cannot start its stub: {exc}") from exc
    finally:
        stub_end.close()
    return SpawnedStub(proc, server_end)
