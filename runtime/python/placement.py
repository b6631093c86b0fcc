"""Where a Python model's instances run: one stub process each, or in the server process.

    `thaw.python_runtime` parameter    process | in_process | auto (the default)
    auto, process ─▶ process     every instance its own stub process, as Triton runs them
    in_process    ─▶ in_process  the instances in the server (opt-in; no EXECUTION_ENV_PATH)

Why process by default: it is Triton's model, and what a model written for Triton expects. A
stub buys isolation (a segfault or `os._exit` in model code fails only that instance's in-flight
requests; the stub restarts and the server keeps serving) and parallelism (its own GIL). Since
the stub is driven from the event loop with pipelined, bundled round trips
(runtime.python.stub_backend), a tiny model in a stub keeps up with Triton's own.
`in_process` trades that isolation for the last bit of speed: a single instance proven tiny runs
on the event loop itself (runtime.scheduling.inline_policy), no IPC at all. `EXECUTION_ENV_PATH`
needs another interpreter, hence a process. Pure: reads only the config.
"""

from __future__ import annotations

from enum import StrEnum

from runtime.errors import RepositoryError
from thawwire.runtime_parameters import PYTHON_RUNTIME
from tritonconfig.schema import mc

__all__ = ["PARAMETER", "PythonRuntime", "execution_env_path", "placement"]

PARAMETER = PYTHON_RUNTIME
_ENV_PARAMETER = "EXECUTION_ENV_PATH"


class PythonRuntime(StrEnum):
    PROCESS = "process"
    IN_PROCESS = "in_process"
    AUTO = "auto"


def execution_env_path(config: mc.ModelConfig) -> str | None:
    """The config's `EXECUTION_ENV_PATH` parameter (as written, `$$TRITON_MODEL_DIRECTORY`
    unexpanded), or None."""
    param = config.parameters.get(_ENV_PARAMETER)
    value = param.string_value.strip() if param is not None else ""
    return value or None


def placement(config: mc.ModelConfig) -> PythonRuntime:
    """PROCESS or IN_PROCESS for this model's instances; RepositoryError for a bad parameter."""
    param = config.parameters.get(PARAMETER)
    raw = param.string_value.strip() if param is not None else ""
    try:
        wanted = PythonRuntime(raw or PythonRuntime.AUTO)
    except ValueError:
        choices = ", ".join(r.value for r in PythonRuntime)
        raise RepositoryError(
            f"model '{config.name}': parameter `{PARAMETER}` = {raw[:40]!r}, must be one of "
            f"{choices}"
        ) from None
    env = execution_env_path(config)
    if wanted == PythonRuntime.IN_PROCESS and env is not None:
        raise RepositoryError(
            f"model '{config.name}': `{PARAMETER}` = 'in_process' cannot use "
            f"{_ENV_PARAMETER} (another Python environment needs its own process)"
        )
    if wanted == PythonRuntime.IN_PROCESS:
        return PythonRuntime.IN_PROCESS
    return PythonRuntime.PROCESS
