"""The stub process of one Python model instance (`python -m runtime.python.stub.stub_main FD`).

It runs under the model's own interpreter (`EXECUTION_ENV_PATH`), so it imports only the
standard library, numpy, `runtime.python.pb_utils` and its `pb_*` modules, `host` and
`thawserver.fast_json` (an import-linter contract, and tests/unit/test_public_api.py runs it
with nothing else importable).

    stub_main       the process: read requests, run the model, answer
    auto_complete_main  the process that runs a model's `auto_complete_config`
    model_runner    load a `model.py` and run `initialize` / `execute` / `finalize`
    stub_host       pb_utils' ModelHost in a stub: every call goes to the server
    inbox           the incoming messages, read by whichever thread waits for one
    protocol        the stub protocol's messages, and pb_utils objects <-> wire tensors
    wire            the control channel to the server, and how tensors cross it

Exports `Channel` and `ModelRunner`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.python.stub.model_runner import ModelRunner
    from runtime.python.stub.wire import Channel

__all__ = ["Channel", "ModelRunner"]

# Each export and the module that defines it, imported on first use (PEP 562), so that importing
# one module of this package does not import the others.
_EXPORTS = {
    "Channel": "runtime.python.stub.wire",
    "ModelRunner": "runtime.python.stub.model_runner",
}


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
