"""Load a Triton `model.py` and run its `initialize` / `execute` / `finalize`, as Triton's stub.

The same runner serves a model in the server process and inside a stub process; its callers
convert requests into pb_utils objects (with their response senders) and the returned responses
back. What it owns is Triton's contract with the model:

    execute(requests) ─▶ a list (one InferenceResponse or None per request)   default mode
                     └▶ None; responses go through each request's sender       decoupled mode
    a request released with RESCHEDULE (`set_release_flags`) must have None: it runs again
    `async def execute` ─▶ run on this instance's own event loop thread: awaited for a default
                          model, left running in the background for a decoupled one (so the
                          next requests can start while it waits), as Triton's stub does.

Violations raise ModelError with Triton's texts; anything the model raises becomes one too.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import logging
import os
import sys
import threading
import traceback
from concurrent.futures import Future
from pathlib import Path
from types import ModuleType
from typing import Any

from runtime.python import pb_utils

__all__ = [
    "ModelError",
    "ModelRunner",
    "close_open_senders",
    "execute_failure_text",
    "forget_model_module",
    "import_model_file",
    "install_pb_utils",
]

logger = logging.getLogger(__name__)

# sys.path edits and module imports are process-global: one model import at a time.
_IMPORT_LOCK = threading.Lock()
_module_counter = 0


class ModelError(Exception):
    """A model broke Triton's contract or raised; `message` is what clients see after
    "Failed to process the request(s) for model '<instance>', message: "."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def install_pb_utils() -> None:
    """Make `import triton_python_backend_utils` give models Thaw's module; also as
    `c_python_backend_utils`, Triton's native module, which its pb_utils re-exports and models
    import by that name too (`c_utils.shared_memory.free_memory()`)."""
    sys.modules.setdefault("triton_python_backend_utils", pb_utils)
    sys.modules.setdefault("c_python_backend_utils", pb_utils)


def import_model_file(path: Path) -> ModuleType:
    """Import a model.py as a fresh module (its own globals, like Triton's per-instance stub).

    As in Triton's stub, the file is a module of a package that is its folder, so a model made
    of several files imports its siblings either way: `import file1` (the folder is on the
    path while the file is imported) or `from . import file2`. Each import gets a package of
    its own (`_thaw_python_model_<n>`), so two models' `file2` never meet. `forget_model_module`
    drops them again. Raises ModelError naming what failed (SyntaxError, ImportError, even
    sys.exit()).
    """
    global _module_counter
    install_pb_utils()
    # Imported by its absolute path, as Triton's stub imports it: the path its tracebacks
    # (and the "At:" lines of an execute's error) show.
    path = Path(os.path.abspath(path))
    with _IMPORT_LOCK:
        _module_counter += 1
        package_name = f"_thaw_python_model_{_module_counter}"
        package = ModuleType(package_name)
        package.__path__ = [str(path.parent)]
        package.__package__ = package_name
        module_name = f"{package_name}.{path.stem}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ModelError(f"{path}: cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        # Registered like any imported module (pickle, dataclasses and typing look it up).
        sys.modules[package_name] = package
        sys.modules[module_name] = module
        sys.path.insert(0, str(path.parent))
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:  # a model file's sys.exit() must not stop the server
            forget_model_module(module)
            raise ModelError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            sys.path.remove(str(path.parent))
    if not hasattr(module, "TritonPythonModel"):
        forget_model_module(module)
        raise ModelError(f"{path}: defines no class TritonPythonModel")
    return module


def forget_model_module(module: ModuleType) -> None:
    """Drop a module `import_model_file` made from `sys.modules`: it, its package, and the
    sibling files it imported relatively (`from . import file2`)."""
    package = module.__name__.rpartition(".")[0] or module.__name__
    # A snapshot taken in one C call (other threads import models meanwhile: iterating the
    # live dict would fail with "dictionary changed size during iteration").
    names = tuple(sys.modules)
    for name in names:
        if name == package or name.startswith(package + "."):
            sys.modules.pop(name, None)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, pb_utils.TritonModelException):
        return f"TritonModelException: {exc.message()}"
    return f"{type(exc).__name__}: {exc}"


# Frames of Thaw's own modules (this runner, pb_utils): Triton's stub calls the model from C++,
# and its pb_utils is C++, so its tracebacks hold only the model's (and the libraries') frames.
_RUNTIME_DIR = str(Path(__file__).resolve().parents[2]) + os.sep


# At most this many "At:" lines, half from each end (a RecursionError has a frame per call).
_TRACE_LINES = 64


def _with_trace(exc: BaseException) -> str:
    """`exc` as Triton's stub writes an exception its model's `execute` raised (pybind11's
    text, observed on 2.51): "Type: message", then "At:" and a line per frame, the deepest
    first: `  /path/model.py(22): execute`. Past _TRACE_LINES frames, the middle ones are
    counted in a line of their own rather than listed (Triton lists them all)."""
    frames = list(traceback.walk_tb(exc.__traceback__))
    lines = [
        f"  {frame.f_code.co_filename}({line}): {frame.f_code.co_name}\n"
        for frame, line in reversed(frames)
        if not frame.f_code.co_filename.startswith(_RUNTIME_DIR)
    ]
    if len(lines) > _TRACE_LINES:
        half = _TRACE_LINES // 2
        left_out = f"  ... {len(lines) - 2 * half} more frames\n"
        lines = [*lines[:half], left_out, *lines[-half:]]
    return _describe(exc) + ("\n\nAt:\n" + "".join(lines) if lines else "")


class ModelRunner:
    """One instance of one Triton python model: its module, its object, its event loop."""

    def __init__(self, model_file: Path, *, decoupled: bool, alias: str = "") -> None:
        self.model_file = model_file
        # Triton's texts name the instance (`<model>_0_0`); the file until `initialize`.
        self.instance_name = str(model_file)
        self.decoupled = decoupled
        # Also importable by this name (a stub process's `model`, as in Triton's stub; never
        # in the server process, where several models run): "" for none.
        self._alias = alias
        self._module: ModuleType | None = None
        self._model: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._background: set[Future[Any]] = set()
        # `pb_utils.get_model_dir()`: the version directory, known from `initialize`'s args.
        self._model_dir = str(model_file.parent)

    @property
    def module(self) -> ModuleType | None:
        """The imported model file, once `initialize` imported it."""
        return self._module

    def initialize(self, args: dict[str, str]) -> None:
        """Import the file, create TritonPythonModel, call `initialize(args)` if it has one."""
        self.instance_name = args.get("model_instance_name") or self.instance_name
        if args.get("model_repository") and args.get("model_version"):
            self._model_dir = os.path.join(args["model_repository"], args["model_version"])
        module = import_model_file(self.model_file)
        self._module = module
        if self._alias:
            # Before `initialize`: a model may import itself by that name there (Triton's qa
            # bls_model_loading runs `unittest.main("model")` in its initialize).
            sys.modules.setdefault(self._alias, module)
        try:
            model = module.TritonPythonModel()
            if hasattr(model, "initialize"):
                # No BLS in initialize or finalize (Triton's BLS_OUTSIDE_EXECUTE there).
                with pb_utils.bind_model_dir(self._model_dir), pb_utils.outside_execute():
                    result = model.initialize(args)
                    if inspect.iscoroutine(result):
                        self._run(result)
        except BaseException as exc:  # a model calling sys.exit() must not stop the server
            forget_model_module(module)
            # Triton's words (observed on 2.51): its status word, the error, where it was raised.
            raise ModelError(f"Internal: {_with_trace(exc)}") from exc
        if not hasattr(model, "execute"):
            forget_model_module(module)
            raise ModelError(f"Python model {self.model_file} does not implement `execute` method.")
        self._model = model

    def execute(self, requests: list[pb_utils.InferenceRequest]) -> list[Any] | None:
        """The model's responses (default mode: one per request, None where it used the
        sender), or None for a decoupled model. Raises ModelError."""
        try:
            with pb_utils.bind_model_dir(self._model_dir):
                returned = self._model.execute(requests)
            if inspect.iscoroutine(returned):
                if self.decoupled:
                    self._run_in_background(returned, requests)
                    returned = None
                else:
                    returned = self._run(returned)
        except ModelError:
            raise
        except BaseException as exc:  # MemoryError, TritonModelException, even SystemExit
            raise ModelError(_with_trace(exc)) from exc
        return self._check(requests, returned)

    def finalize(self) -> None:
        """Stop the event loop, call `finalize()`; what it raises is logged, not raised."""
        model, self._model = self._model, None
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if model is not None and hasattr(model, "finalize"):
            try:
                with pb_utils.bind_model_dir(self._model_dir), pb_utils.outside_execute():
                    model.finalize()
            except Exception as exc:
                logger.warning("finalize() of %s raised %r", self.model_file, exc)
        if self._module is not None:
            forget_model_module(self._module)

    def _check(self, requests: list[Any], returned: Any) -> list[Any] | None:
        if returned is None:
            return None
        if self.decoupled:
            raise ModelError(
                f"Python model '{self.instance_name}' is using the decoupled mode and the execute "
                "function must return None."
            )
        if not isinstance(returned, list):
            raise ModelError(
                f"Expected a list in the execute return, found type '{type(returned)}'."
            )
        if len(returned) != len(requests):
            raise ModelError(
                "Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, and "
                f"InferenceResponse(s) size is:{len(returned)}\n"
            )
        for request, response in zip(requests, returned, strict=True):
            if response is None:
                continue
            if request._release_flags == pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
                raise ModelError(  # Triton's text, its typo kept (clients match on it)
                    "Expected a None object in the execute function return list for "
                    f"reschduled request, found type '{type(response)}'."
                )
            if not isinstance(response, pb_utils.InferenceResponse):
                raise ModelError(
                    "Expected an 'InferenceResponse' object in the execute function return "
                    f"list, found type '{type(response)}'."
                )
            sender = request._sender
            if sender is not None:
                # A returned response is the request's final send, as in Triton's stub: one
                # the sender already answered fails the execute (its client keeps the answer
                # it got), and the sender is closed for later sends.
                try:
                    sender._returned(response)
                except pb_utils.TritonModelException as exc:
                    raise ModelError(exc.message()) from None
        return returned

    # -- the instance's event loop (for `async def execute`) ---------------------------------

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="model-asyncio", daemon=True)
            thread.start()
            self._loop = loop
        return self._loop

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._event_loop()).result()

    def _run_in_background(self, coroutine: Any, requests: list[Any]) -> None:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._event_loop())
        self._background.add(future)
        future.add_done_callback(lambda done: self._background_done(done, requests))

    def _background_done(self, future: Future[Any], requests: list[Any]) -> None:
        self._background.discard(future)
        exc = None if future.cancelled() else future.exception()
        if exc is None:
            return
        logger.error(
            "async execute of %s raised:\n%s",
            self.model_file,
            "".join(traceback.format_exception(exc)),
        )
        # Nothing else will end these requests: their clients would wait forever.
        close_open_senders(requests, _describe(exc))


def execute_failure_text(instance: str, message: str) -> str:
    """Triton's text for a failed execute (observed on 2.51), a decoupled model's too."""
    return f"Failed to process the request(s) for model '{instance}', message: {message}"


def close_open_senders(requests: list[Any], message: str) -> None:
    """End every request whose sender is still open with an error response (final)."""
    for request in requests:
        if request._sender is None and request._make_sender is not None:
            request.get_response_sender()
        sender = request._sender
        if sender is not None and not sender.is_closed():
            error = pb_utils.TritonError(message)
            sender.send(
                pb_utils.InferenceResponse(error=error),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
