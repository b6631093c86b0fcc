"""Stub processes started before a model needs one, so that a Python model's load (its cold
start under `thaw up`) does not wait for an interpreter to start and import numpy.

    warm-up (a thread) ── fill() ─▶ N stubs spawned: Python starts, imports numpy and the stub
    first loads ─────────── take(python) ─▶ a live spare of this interpreter and environment,
                                            else None (the caller spawns one, as before)
    after a load, at stop ─ release() ─▶ every spare not taken ends (its socket closes: it exits)

A stub waits for its `init` message before it knows its model, so one started ahead of any
model is the same process a load would start: same interpreter, same environment (compared
whole when it is taken: a spare from before a change, such as a new log level, is not used).
Only the first loads of a process are offered spares; once a load is done the rest are
released, so a replica serving an ONNX model keeps no idle interpreter. A pool process of
`thaw up` (and a pool pod on Kubernetes) is the one that benefits: it starts its spare while it
waits to be claimed, off any request's path. Thread-safe.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from runtime.errors import RepositoryError
from runtime.python.stub_process import SpawnedStub, spawn, stub_env
from thawwire.runtime_parameters import PYTHON_SPARE_STUBS_MAX

__all__ = ["MISS_REASONS", "SpareStubs", "SpareStubsCollector"]

logger = logging.getLogger(__name__)

_EXIT_WAIT_S = 5.0  # a released spare reads the end of its socket and exits; else killed
# Why a load that spares were meant for started its own stub: none was left (more instances than
# spares, or the load came before they were up), the spare had exited, or the environment
# changed since the spares started.
MISS_REASONS = ("none_left", "exited", "environment")


@dataclass(frozen=True)
class _Spare:
    stub: SpawnedStub
    env: dict[str, str]


class SpareStubs:
    """Up to `count` stub processes of this interpreter, started by `fill`, each taken once."""

    def __init__(
        self,
        count: int,
        *,
        imports: tuple[str, ...] = (),
        plan: Callable[[], tuple[int, tuple[str, ...]]] | None = None,
        python: Path | None = None,
    ) -> None:
        """`imports`: modules each spare imports while it waits (`--python-spare-stub-imports`:
        a model that imports torch then finds it imported). `plan`: the count and imports to use
        instead, asked once by `fill` (`auto`: read from the repository's Python models,
        runtime.models.repository_spares)."""
        if not 0 <= count <= PYTHON_SPARE_STUBS_MAX:
            raise ValueError(f"spare stubs: {count}, must be in [0, {PYTHON_SPARE_STUBS_MAX}]")
        self._count = count
        self._imports = imports
        self._plan = plan
        self._python = python if python is not None else Path(sys.executable)
        self._lock = threading.Lock()  # guards the fields below
        self._spares: list[_Spare] = []
        self._released = False
        self.taken = 0  # stubs of this interpreter a load took from the spares
        self.at_load = 0  # ... and those it started itself: none left, stale, or released
        # Loads that started their own stub while spares were still meant for them (before the
        # release), by why: a cold start that paid an interpreter's start and its imports.
        self.missed = dict.fromkeys(MISS_REASONS, 0)

    def fill(self) -> None:
        """Start the spares (blocking: a fork and exec each; the stubs import on their own)."""
        if self._plan is not None:
            plan, self._plan = self._plan, None
            try:
                count, self._imports = plan()
                self._count = max(0, min(count, PYTHON_SPARE_STUBS_MAX))
            except Exception:  # a repository that cannot be read: as the flags gave them
                logger.exception("could not read the Python models for the spare stubs")
            logger.info(
                "spare Python stubs import %s ahead, %d of them (read from the Python models)",
                ", ".join(self._imports) or "nothing", self._count,
            )  # fmt: skip
        for _ in range(self._count):
            with self._lock:
                if self._released or len(self._spares) >= self._count:
                    return
            env = stub_env(self._python)
            try:
                spawned = spawn(self._python, "(spare)", self._imports)
            except RepositoryError as exc:  # a load will say so, spawning its own
                logger.warning("could not start a spare Python stub: %s", exc)
                return
            with self._lock:
                if not self._released:
                    self._spares.append(_Spare(spawned, env))
                    logger.info("spare Python stub pid %d started", spawned.proc.pid)
                    continue
            _end_soon([spawned])  # released meanwhile
            return

    def take(self, python: Path) -> SpawnedStub | None:
        """A live spare started as `spawn(python)` would start one now, or None (the caller
        starts one: counted in `at_load` for this interpreter, and in `missed` while spares were
        meant for it)."""
        if python != self._python:  # another interpreter (EXECUTION_ENV_PATH): never a spare's
            return None
        with self._lock:
            if not self._spares:  # none left: no environment to copy
                self._started_at_load("none_left")
                return None
        env = stub_env(python)
        stale: list[SpawnedStub] = []
        found: SpawnedStub | None = None
        with self._lock:
            while self._spares and found is None:
                spare = self._spares.pop(0)
                if spare.stub.proc.poll() is None and spare.env == env:
                    found = spare.stub
                else:
                    stale.append(spare.stub)
                    _why_stale(spare, env)
            if found is not None:
                self.taken += 1
            else:
                exited = any(stub.proc.returncode is not None for stub in stale)
                reason = "exited" if exited else "environment" if stale else "none_left"
                self._started_at_load(reason)
        if stale:
            _end_soon(stale)
        return found

    def _started_at_load(self, reason: str) -> None:
        """Count a load that starts its own stub (the lock held); a miss while spares were
        still meant for loads (configured and not released yet)."""
        self.at_load += 1
        if self._count and not self._released:
            self.missed[reason] += 1

    def release(self) -> None:
        """End every spare not taken and start no more; returns at once (a thread reaps them:
        a load's answer does not wait for them)."""
        with self._lock:
            self._released = True
            spares, self._spares = self._spares, []
        if spares:
            logger.info("released %d spare Python stub(s) no model took", len(spares))
            _end_soon([spare.stub for spare in spares])

    @property
    def released(self) -> bool:
        with self._lock:
            return self._released

    def __len__(self) -> int:
        with self._lock:
            return len(self._spares)


def _why_stale(spare: _Spare, env: dict[str, str]) -> None:
    """Say why a spare is not used (the names of what changed, never their values)."""
    pid, status = spare.stub.proc.pid, spare.stub.proc.returncode
    if status is not None:
        logger.warning(
            "spare Python stub pid %d exited (status %s) before a model took it", pid, status
        )
        return
    changed = sorted(k for k in {*env, *spare.env} if env.get(k) != spare.env.get(k))
    logger.info(
        "spare Python stub pid %d not used: the environment changed since it started (%s)",
        pid, ", ".join(changed[:8]),
    )  # fmt: skip


def _end_soon(stubs: list[SpawnedStub]) -> None:
    """Close each stub's socket (it reads the end of the stream and exits); reap them in a
    thread."""
    for stub in stubs:
        stub.sock.close()
    threading.Thread(
        target=_reap, args=(stubs,), name="thaw-spare-stub-reaper", daemon=True
    ).start()


def _reap(stubs: list[SpawnedStub]) -> None:
    for stub in stubs:
        try:
            stub.proc.wait(_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            stub.proc.kill()
            stub.proc.wait()


class SpareStubsCollector:
    """The spares on /metrics, read at scrape time: `thaw_python_stub_starts_total` by source
    (`spare`: a load took one; `load`: a load of this interpreter started its own, the spares
    gone, stale or released), `thaw_python_spare_stubs` (idle now) and
    `thaw_python_spare_stub_misses_total` by reason: the loads among `load` that spares were
    meant for (configured, not released yet), each a cold start that paid an interpreter's start
    and its imports (the ThawPythonSpareStubMissed alert). Later loads of a replica (a reload, a
    crashed stub's restart, a second model beside it) count in `load` only."""

    def __init__(self, spares: SpareStubs) -> None:
        self._spares = spares

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        starts = CounterMetricFamily(
            "thaw_python_stub_starts",
            "Python stub processes a model's load used, by source: spare (started ahead, "
            "--python-spare-stubs) or load (started by the load itself)",
            labels=["source"],
        )
        starts.add_metric(["spare"], self._spares.taken)
        starts.add_metric(["load"], self._spares.at_load)
        yield starts
        yield GaugeMetricFamily(
            "thaw_python_spare_stubs",
            "Python stub processes started ahead and not taken yet",
            value=len(self._spares),
        )
        misses = CounterMetricFamily(
            "thaw_python_spare_stub_misses",
            "Loads that started their own Python stub while spares were meant for them, by "
            "reason: none_left, exited (the spare died), environment (changed since it started)",
            labels=["reason"],
        )
        for reason in MISS_REASONS:
            misses.add_metric([reason], self._spares.missed[reason])
        yield misses
