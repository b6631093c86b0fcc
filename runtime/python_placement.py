"""Where a Python model's instances run: in the server process, or one stub process each.

    `thaw.python_runtime` parameter    process | in_process | auto (the default)
    auto ─▶ in_process  ⇔ one instance in all, and no EXECUTION_ENV_PATH
         └▶ process     otherwise (N instances: N processes, as Triton's stubs)

Why: a stub process buys parallelism (its own GIL) and isolation (a segfault or `os._exit`
fails only that instance's requests; it restarts). A single instance gains no parallelism from
it, and for a tiny model the two IPC hops and two context switches are most of the request's
server time, where in-process it may even run on the event loop once proven tiny
(runtime.inline_policy). `EXECUTION_ENV_PATH` needs another interpreter, hence a process.
`process` gives a single instance Triton's isolation back. Pure: reads only the config.
"""

from __future__ import annotations

from enum import StrEnum

from runtime.errors import RepositoryError
from tritonconfig.schema import mc

__all__ = ["PARAMETER", "PythonRuntime", "execution_env_path", "placement"]

PARAMETER = "thaw.python_runtime"
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
    if wanted != PythonRuntime.AUTO:
        return wanted
    instances = sum(group.count for group in config.instance_group)
    if instances <= 1 and env is None:
        return PythonRuntime.IN_PROCESS
    return PythonRuntime.PROCESS
