"""Shared test fixtures: free ports, real `thaw serve` processes, no blocking in the event loop,
the root logger as each test found it.

Builders live in `tests/fixtures/` (`models.py`, `serve_process.py`) and fakes with behaviour in
`tests/fakes/`, so any package's tests can import them; the fixtures here wire them to pytest and
kill every process they start.
"""

from __future__ import annotations

import logging
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from blockbuster import BlockBuster, blockbuster_ctx

from tests.fakes.kube_fixtures import (  # noqa: F401  (fixtures, see tests/fakes/KUBERNETES.md)
    kube_api,
    kube_apiserver,
    kube_apiserver_factory,
    kubeconfig_path,
    kubelet,
    kubelet_factory,
)
from tests.fixtures.leftover_servers import interrupt_on_sigterm
from tests.fixtures.serve_process import ServeProcess, free_port

# SIGTERM to the test run tears its fixtures down (and so stops its servers), as Ctrl-C does.
interrupt_on_sigterm()

# Blocking calls are looked for only where a frame of Thaw's own packages is on the stack: the
# event loop must never block in product code. Test bodies may do blocking set-up (writing a
# model repository) before they start the code under test. Every product package: those
# import-linter's contracts cover (pyproject's `root_packages`), so a new one is guarded too.
_PRODUCT_PACKAGES = tomllib.loads(
    (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
)["tool"]["importlinter"]["root_packages"]


def _allow(bb: BlockBuster, calls: tuple[str, ...], filename: str, functions: set[str]) -> None:
    for call in calls:
        bb.functions[call].can_block_in(filename, functions)


_STAT = ("os.stat", "os.path.abspath", "os.listdir", "os.scandir")
_FILES = (*_STAT, "io.BufferedReader.read", "io.TextIOWrapper.read")


def _allow_known_blocking(bb: BlockBuster) -> None:
    """The allow-list: each entry names a blocking call in the event loop and why it may stay.
    An entry is `(blocking calls, file suffix, functions)`: the calls are allowed while one of
    those functions is on the stack. "known:" marks blocking that should go off the loop."""
    # Start-up, before the server listens: the installed distribution's version for `/v2`
    # (importlib.metadata reads the site-packages directories once per process; cached).
    _allow(bb, _FILES, "thawwire/server_info.py", {"server_version"})
    # Start-up and shutdown: the handoff socket file is made once, under a umask (process-
    # global, so not in a thread), before `thaw up` connects, after removing a stale file of a
    # killed predecessor; `close` removes it once at exit.
    _allow(bb, ("os.unlink", "os.stat"), "runtime/direct/handoff.py", {"start", "close"})
    # Start-up: `thaw up` scans the repository before its loop starts (activator/process/cli.py);
    # tests that build the app inside a running loop let `build_app` scan it there.
    _allow(bb, (*_FILES, "os.path.islink"), "activator/fleet/repository.py", {"scan"})
    # known: a request naming a model the manager has not seen yet stats `<repo>/<name>` on the
    # loop (ModelViews' metadata/config/ready lookups are synchronous; moving the check off
    # the loop means making that service interface async).
    _allow(bb, _STAT, "runtime/models/views.py", {"_known"})
    # Locks held by worker threads for a few bookkeeping statements (no I/O under them): the
    # loop waits nanoseconds at most. Statistics counters and prometheus_client's values.
    _allow(
        bb,
        ("threading.Lock.acquire",),
        "runtime/observe/stats.py",
        {"record_execution", "record_failure", "to_json", "open", "close", "items"},
    )
    _allow(bb, ("threading.Lock.acquire",), "prometheus_client/values.py", {"inc", "set", "get"})
    # Scrape time: the runtime's `thaw_server_resident_memory_bytes` reads /proc for the
    # server and its child processes (psutil); /proc is answered from kernel memory, no disk.
    _allow(bb, (*_STAT, "io.BufferedReader.read"), "runtime/observe/metrics.py", {"collect"})
    # By design a Python model proven tiny runs on the loop (docs/decisions/
    # 0004-inline-tiny-python-models.md); the scheduler tests' fake model sleeps there to turn
    # slow, which is what sends it back to its thread.
    _allow(bb, ("time.sleep",), "tests/unit/runtime/test_scheduler.py", {"execute"})


@pytest.fixture(autouse=True)
def no_blocking_in_event_loop() -> Iterator[BlockBuster]:
    """Fail the test (`blockbuster.BlockingError`) when product code blocks a running event loop:
    file I/O, `time.sleep`, blocking sockets, waiting on a held `threading.Lock`. Calls from
    threads without a running loop (`asyncio.to_thread`, executors) are never flagged."""
    with blockbuster_ctx(_PRODUCT_PACKAGES) as bb:
        _allow_known_blocking(bb)
        yield bb


@pytest.fixture(autouse=True)
def root_logger_restored() -> Iterator[None]:
    """Put the root logger's handlers and level back after each test: a CLI run in-process
    (`thaw up`'s `run` calls `logging.basicConfig`, then `LogControl.install`) leaves a handler on
    the stream pytest captured for that test, closed once it ends; every later log line then
    fails in that handler ("--- Logging error ---" on standard error)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)


@pytest.fixture
def unused_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return free_port()


@pytest.fixture
def start_serve() -> Iterator[Callable[..., ServeProcess]]:
    """Start `thaw serve REPO --port 0 ARGS...` processes; all are stopped after the test."""
    started: list[ServeProcess] = []

    def start(repo: Path, *args: str, ready: bool = True) -> ServeProcess:
        server = ServeProcess(repo, *args)
        started.append(server)
        if ready:
            server.wait_ready()
        else:
            server.wait_listening()
        return server

    yield start
    for server in started:
        server.stop()
