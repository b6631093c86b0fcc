"""The process that runs a Python model's `auto_complete_config` (started by
`runtime.python.auto_complete`), under the interpreter its stubs would run under.

`python -m runtime.python.stub.auto_complete_main FILE FD`: the config as JSON on stdin; one
JSON answer written to descriptor FD — {"config": {...}} (what the hook returned),
{"none": true} (no hook) or {"error": text} (Triton's words). It imports what a stub imports and
nothing else (the stub's import-linter contract), so an `EXECUTION_ENV_PATH` interpreter that
holds only numpy and the model's own packages runs it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from runtime.python import pb_utils
from runtime.python.stub.model_runner import ModelError, import_model_file
from runtime.python.stub.stub_main import exit_with_parent

__all__ = ["main"]


def _answer(model_file: Path) -> dict[str, Any]:
    """Import the model, call its hook on the config read from stdin."""
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
    model_file, answer_fd = Path(argv[1]), int(argv[2])
    exit_with_parent()  # a server gone (stopped mid-load) takes its hung import with it
    # The model's prints must not reach the answer: stdout is stderr from here on.
    os.dup2(2, 1)
    answer = _answer(model_file)
    with os.fdopen(answer_fd, "w") as out:
        json.dump(answer, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
