"""A Python model's `auto_complete_config`, run in a process of its own, as Triton's python
backend runs it in a stub: under the model's own interpreter (`EXECUTION_ENV_PATH`), and a
model file that hangs or exits while it is imported (or in the hook) costs its own load a clear
error, never the server or the other models' loads.

    mentions_hook(file)   no import: a model file that defines its model class (no base) and
                          never names the hook has none, and is imported only by its stubs
                          (where a crash is the stub's)
    run_hook(...)         the interpreter and environment a stub of the model gets
                          (`stub_process.stub_python`, `stub_env`: a tarball unpacked, removed
                          after), then `python -m runtime.python.stub.auto_complete_main FILE FD`
                          with the config as JSON on stdin; its one JSON answer on the pipe;
                          a deadline, and the child's last stderr lines if it dies
The model's own prints go to the child's stderr, which is logged at debug.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from runtime.errors import RepositoryError
from runtime.python.stub_process import stub_env, stub_python

__all__ = ["HOOK_TIMEOUT_S", "mentions_hook", "run_hook"]

logger = logging.getLogger(__name__)

HOOK_TIMEOUT_S = 60.0  # importing the model file (torch and all) and calling its hook
_HOOK = b"auto_complete_config"
# The model class defined in the file itself, with no base it could inherit the hook from.
_PLAIN_CLASS = re.compile(rb"^class\s+TritonPythonModel\s*(?:\(\s*(?:object)?\s*\))?\s*:",
                          re.MULTILINE)  # fmt: skip
_MAX_SCAN = 64 << 20  # a model file larger than this is handed to the child unread
_MAX_ANSWER = 64 << 20
_CHILD = "runtime.python.stub.auto_complete_main"


def mentions_hook(model_file: Path) -> bool:
    """Whether `model_file` may have an `auto_complete_config` (read, never imported): False
    only for a file that defines `TritonPythonModel` as a class of no base and never names
    the hook, so nothing can give it one. A model class taken from elsewhere (`from
    python_addsub import *`, qa/L0_model_namespacing) or with a base may have one. A file it
    cannot read or too large to scan counts as naming it: the child then says what is wrong."""
    try:
        with model_file.open("rb") as f:
            data = f.read(_MAX_SCAN + 1)
    except OSError:
        return True
    return len(data) > _MAX_SCAN or _HOOK in data or _PLAIN_CLASS.search(data) is None


def run_hook(
    config: dict[str, Any],
    model_file: Path,
    model: str,
    *,
    execution_env: str | None = None,
    model_dir: Path,
) -> dict[str, Any] | None:
    """The config the model's `auto_complete_config` returns (as a dict), None when the model
    has no hook; RepositoryError with Triton's words for a refusal, or saying how the child
    failed (an environment that cannot run it, a deadline, an exit). `execution_env` is the
    config's EXECUTION_ENV_PATH as written (`$$TRITON_MODEL_DIRECTORY` is `model_dir`)."""
    try:
        python, unpacked = stub_python(execution_env, model_dir)
    except RepositoryError as exc:
        raise RepositoryError(f"model '{model}': auto_complete_config: {exc.message}") from exc
    try:
        return _run_child(config, model_file, model, python, in_env=execution_env is not None)
    finally:
        if unpacked is not None:
            shutil.rmtree(unpacked, ignore_errors=True)


def _run_child(
    config: dict[str, Any], model_file: Path, model: str, python: Path, *, in_env: bool
) -> dict[str, Any] | None:
    where = f" under {python} (EXECUTION_ENV_PATH)" if in_env else ""
    read_end, write_end = os.pipe()
    argv = [str(python), "-m", _CHILD, str(model_file), str(write_end)]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(write_end,),
            env=stub_env(python),
        )
    except OSError as exc:
        os.close(read_end)
        raise RepositoryError(
            f"model '{model}': cannot run auto_complete_config{where}: {exc}"
        ) from exc
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as answers:
        try:
            _, stderr = proc.communicate(json.dumps(config).encode(), timeout=HOOK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise RepositoryError(
                f"model '{model}': importing {model_file.name} and calling its "
                f"auto_complete_config{where} did not finish within {HOOK_TIMEOUT_S:g} s"
            ) from None
        raw = answers.read(_MAX_ANSWER)
    if stderr:
        logger.debug("model=%s auto_complete_config: %s", model, stderr.decode(errors="replace"))
    try:
        answer = json.loads(raw) if raw else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        tail = " | ".join(stderr.decode(errors="replace").strip().splitlines()[-3:])
        raise RepositoryError(
            f"model '{model}': importing {model_file.name} for its auto_complete_config{where} "
            f"ended the process (exit status {proc.returncode})" + (f": {tail}" if tail else "")
        )
    if "error" in answer:
        raise RepositoryError(str(answer["error"]))
    completed = answer.get("config")
    return completed if isinstance(completed, dict) else None
