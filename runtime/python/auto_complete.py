"""A Python model's `auto_complete_config`, run in a process of its own, as Triton's python
backend runs it in a stub: a model file that hangs or exits while it is imported (or in the
hook) costs its own load a clear error, never the server or the other models' loads.

    mentions_hook(file)   no import: a model file that never names the hook has none, and
                          is imported only by its stubs (where a crash is the stub's)
    run_hook(...)         `python -m runtime.python.auto_complete FILE`: the config as JSON on
                          stdin; one JSON answer on the pipe named by argv[2] — {"config": {...}}
                          (what the hook returned), {"none": true} (no hook) or {"error": text}
                          (Triton's words); a deadline, and the child's last stderr lines if it
                          dies
The model's own prints go to the child's stderr, which is logged at debug.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from runtime.errors import RepositoryError

__all__ = ["HOOK_TIMEOUT_S", "mentions_hook", "run_hook"]

logger = logging.getLogger(__name__)

HOOK_TIMEOUT_S = 60.0  # importing the model file (torch and all) and calling its hook
_HOOK = b"auto_complete_config"
_MAX_SCAN = 64 << 20  # a model file larger than this is handed to the child unread
_MAX_ANSWER = 64 << 20
# The directory holding the `runtime` package, for the child's import path.
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def mentions_hook(model_file: Path) -> bool:
    """Whether `model_file` names `auto_complete_config` at all (read, never imported). A file
    it cannot read or too large to scan counts as naming it: the child then says what is wrong."""
    try:
        with model_file.open("rb") as f:
            data = f.read(_MAX_SCAN + 1)
    except OSError:
        return True
    return len(data) > _MAX_SCAN or _HOOK in data


def run_hook(config: dict[str, Any], model_file: Path, model: str) -> dict[str, Any] | None:
    """The config the model's `auto_complete_config` returns (as a dict), None when the model
    has no hook; RepositoryError with Triton's words for a refusal, or saying how the child
    failed (a deadline, an exit)."""
    read_end, write_end = os.pipe()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
    )
    argv = [sys.executable, "-m", "runtime.python.auto_complete", str(model_file), str(write_end)]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(write_end,),
            env=env,
        )
    except OSError as exc:
        os.close(read_end)
        raise RepositoryError(f"model '{model}': cannot run auto_complete_config: {exc}") from exc
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
                f"auto_complete_config did not finish within {HOOK_TIMEOUT_S:g} s"
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
            f"model '{model}': importing {model_file.name} for its auto_complete_config ended "
            f"the process (exit status {proc.returncode})" + (f": {tail}" if tail else "")
        )
    if "error" in answer:
        raise RepositoryError(str(answer["error"]))
    completed = answer.get("config")
    return completed if isinstance(completed, dict) else None


def _child(model_file: Path) -> dict[str, Any]:
    """In the child: import the model, call its hook on the config read from stdin."""
    from runtime.python import pb_utils
    from runtime.python.stub.model_runner import ModelError, import_model_file

    config = json.loads(sys.stdin.read())
    name = config.get("name", "")
    try:
        module = import_model_file(model_file)
    except ModelError as exc:
        return {"error": f"model '{name}': {exc.message}"}
    hook = getattr(getattr(module, "TritonPythonModel", None), "auto_complete_config", None)
    if hook is None:
        return {"none": True}
    wrapper = pb_utils.ModelConfig(config)
    try:
        result = hook(wrapper)
    except ValueError as exc:  # pb_utils.ModelConfig's refusals are Triton's words, whole
        return {"error": str(exc) or f"model '{name}': {exc!r}"}
    except BaseException as exc:
        return {"error": f"model '{name}': auto_complete_config raised {exc!r}"}
    if not isinstance(result, pb_utils.ModelConfig):
        return {
            "error": f"auto_complete_config function in model '{name}' must return a valid "
            "pb.ModelConfig object."
        }
    return {"config": result.as_dict()}


def main(argv: list[str]) -> int:
    from runtime.python.stub.stub_main import exit_with_parent

    model_file, answer_fd = Path(argv[1]), int(argv[2])
    exit_with_parent()  # a server gone (stopped mid-load) takes its hung import with it
    # The model's prints must not reach the answer: stdout is stderr from here on.
    os.dup2(2, 1)
    answer = _child(model_file)
    with os.fdopen(answer_fd, "w") as out:
        json.dump(answer, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
