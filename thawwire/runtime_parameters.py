"""The `thaw.*` model parameters (config.pbtxt) that the runtime reads and the activator does not.

`thaw up` refuses a `thaw.*` key it does not know (a typo must not pass silently), so each key a
replica reads is named here once: the activator lets it through to the replica (which reads the
same config.pbtxt) after checking its value, so a bad value is refused when the repository is
scanned rather than when the model is first woken.

    thaw.python_runtime   process | in_process | auto   where a Python model's instances run

Also the replica settings `thaw up` passes its pool processes that both sides check:
`PYTHON_SPARE_STUBS_MAX`, the most Python stubs a pool process starts ahead of its first load
(`--python-spare-stubs`), and `spare_stub_imports`, the modules those stubs import ahead
(`--python-spare-stub-imports`, at most `SPARE_STUB_IMPORTS_MAX`; or `auto`, what the
repository's Python models import), read the same way by `thaw serve` and `thaw up`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = [
    "PYTHON_RUNTIME",
    "PYTHON_RUNTIMES",
    "PYTHON_SPARE_STUBS_MAX",
    "RUNTIME_PARAMETERS",
    "SPARE_IMPORTS_AUTO",
    "SPARE_STUB_IMPORTS_MAX",
    "runtime_parameter_error",
    "spare_imports_auto",
    "spare_stub_imports",
]

PYTHON_RUNTIME = "thaw.python_runtime"
PYTHON_RUNTIMES = ("process", "in_process", "auto")
PYTHON_SPARE_STUBS_MAX = 8
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
SPARE_STUB_IMPORTS_MAX = 32
SPARE_IMPORTS_AUTO = "auto"

RUNTIME_PARAMETERS: Mapping[str, tuple[str, ...]] = {PYTHON_RUNTIME: PYTHON_RUNTIMES}
"""Each runtime-read key and the values it takes (as written, surrounding blanks aside; empty is
the default)."""


def runtime_parameter_error(key: str, raw: object) -> str | None:
    """Why `raw` is not a value of the runtime parameter `key`, or None when it is."""
    text = str(raw).strip()
    choices = RUNTIME_PARAMETERS[key]
    if not text or text in choices:
        return None
    return f"`{key}` = {text[:40]!r}, must be one of {', '.join(choices)}"


def spare_imports_auto(text: str) -> bool:
    """Whether `--python-spare-stub-imports` says `auto`: the installed packages the
    repository's Python models import (thawserver.python_imports), read by the server."""
    return text.strip() == SPARE_IMPORTS_AUTO


def spare_stub_imports(flag: str, text: str) -> tuple[str, ...]:
    """A comma list of module names (`torch,transformers`; empty: none); ValueError naming
    `flag` for anything else."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if SPARE_IMPORTS_AUTO in names:  # alone it is the caller's (`spare_imports_auto`)
        raise ValueError(f"{flag}: '{SPARE_IMPORTS_AUTO}' stands alone, or name the modules")
    for name in names:
        if len(name) > 200 or not _MODULE.fullmatch(name):
            raise ValueError(f"{flag}: {name[:60]!r} is not a Python module name (a.b.c)")
    if len(names) > SPARE_STUB_IMPORTS_MAX:
        raise ValueError(f"{flag}: {len(names)} modules, at most {SPARE_STUB_IMPORTS_MAX}")
    return names
