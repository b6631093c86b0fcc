"""Each model's snapshot image at start-up: built into the cache, or pulled from `--store`, in the
background at idle CPU priority, while `thaw up` serves.

Without a store, `thaw snapshot build MODEL_DIR --store CACHE_DIR` runs per model; with one,
`thaw snapshot ls --store URI --json` says which models have an image there and `thaw
snapshot pull MODEL --store URI --cache CACHE_DIR --source MODEL_DIR` copies each into the node
cache and indexes its files' digest there, so the first wake of a model restores from local
disk and only stats its files. With a host-memory tier, each image is also
copied into it (within its budget), so that first wake maps the image instead of reading it.
One job at a time, each a subprocess under SCHED_IDLE (it runs only on CPU time nothing else
wants) with its libraries held to one thread: a wake-up during a build loads the model files
normally, at the speed it would have without the build. A failed or missing snapshotter is
logged; replicas then load normally. Every model's state
(activator.observe.status_document.ImageState) is in `states`, which the status document shows
(`thaw status`, the status page), and goes to `on_state` as it changes; progress goes to the
log (`image build 2/5 started`, then a summary).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from activator.observe.status_document import ImageState

__all__ = ["ImageJobs"]

logger = logging.getLogger(__name__)

# `thaw snapshot build` exits 3 for a model without weight files (a Python model): not a failure.
_NOTHING_TO_IMAGE_EXIT = 3
# `thaw snapshot pull --source` exits 4 when the image was built from other files.
_STALE_EXIT = 4
# One thread per numeric library in a build: a build is background work.
_ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


class ImageJobs:
    """The image work of one `thaw up` (at start, and for models added or changed since);
    `run()` does it, `states` reports it."""

    def __init__(
        self,
        command: Sequence[str],
        model_dirs: Sequence[Path],
        cache_dir: Path,
        *,
        store: str | None,
        timeout_s: float,
        host_tier: tuple[Path, int] | None = None,
        on_state: Callable[[str, str], None] | None = None,
    ) -> None:
        self._command = list(command)
        self._on_state = on_state
        # The host-memory tier (directory, budget) each image is also copied into once cached.
        self._host_args = (
            ["--host-cache", str(host_tier[0]), "--host-cache-bytes", str(host_tier[1])]
            if host_tier is not None
            else []
        )
        self._dirs = list(model_dirs)
        self._cache = cache_dir
        self._store = store
        self._timeout_s = timeout_s
        self.states: dict[str, str] = {d.name: ImageState.QUEUED.value for d in self._dirs}
        self._queue = list(self._dirs)
        self._done = 0  # jobs finished, for the progress lines
        self._pulling: str | None = None  # the model whose pull is starting or running
        self._pull_pid: int | None = None  # its process, once started
        self._boosted = False  # its pull was asked for at normal priority (once per pull)

    def add(self, model_dir: Path) -> None:
        """Queue the image of `model_dir` (a model added or changed after the start), unless
        it is queued already; `run` (again, once it has returned) does it."""
        name = model_dir.name
        if any(queued.name == name for queued in self._queue):
            return
        if all(known.name != name for known in self._dirs):
            self._dirs.append(model_dir)
        self._queue.append(model_dir)
        self.states[name] = ImageState.QUEUED.value

    def wanted(self, model: str) -> None:
        """A replica of `model` is starting. Its restore waits for a pull of its image in
        progress (the pull holds the image's lock), so that pull gets normal CPU priority
        from now on, and a queued pull goes first. Builds are left alone: a replica whose
        image is not built yet loads the model files without waiting for the build."""
        if self._store is None:
            return
        if self._pulling == model:
            if not self._boosted:
                self._boosted = True
                self._boost()  # now, or `_job` leaves it at normal priority as it starts
            return
        for i, model_dir in enumerate(self._queue):
            if model_dir.name == model and i > 0:
                self._queue.insert(0, self._queue.pop(i))
                return

    def _boost(self) -> None:
        """The running pull back at normal CPU priority (a replica waits for it). Leaving
        SCHED_IDLE needs CAP_SYS_NICE or an RLIMIT_NICE that allows nice 0: without either (a
        non-root pod), the kernel refuses and the pull stays idle."""
        if self._pull_pid is None:
            return
        try:
            os.sched_setscheduler(self._pull_pid, os.SCHED_OTHER, os.sched_param(0))
        except OSError as exc:
            logger.info("model=%s is waking; its image pull stays at idle priority: %s",
                        self._pulling, exc.strerror)  # fmt: skip
        else:
            logger.info("model=%s is waking: its image pull runs at normal priority", self._pulling)

    async def run(self) -> dict[str, str]:
        """Build or pull every image, one at a time; returns `states`."""
        start = time.monotonic()
        if self._store is None:
            while self._queue:
                model_dir = self._queue.pop(0)
                self._begin(model_dir.name, ImageState.BUILDING, "build")
                self._set(model_dir.name, await self._build(model_dir))
            self._summary("builds", start)
            return self.states
        in_store = await self._list_store()
        while self._queue:
            model_dir = self._queue.pop(0)
            name = model_dir.name
            if in_store is None:
                self._set(name, f"{ImageState.FAILED}: cannot list {self._store}")
            elif name not in in_store:
                self._set(name, ImageState.NOT_IN_STORE.value)
            else:
                self._pulling, self._boosted = name, False
                self._begin(name, ImageState.PULLING, "pull")
                try:
                    self._set(name, await self._pull(model_dir))
                finally:
                    self._pulling = None
        self._summary("pulls", start)
        return self.states

    def _begin(self, model: str, state: ImageState, verb: str) -> None:
        logger.info("model=%s image %s %d/%d started", model, verb, self._done + 1, len(self._dirs))
        self._set(model, state.value)

    def _set(self, model: str, state: str) -> None:
        self.states[model] = state
        if state not in (ImageState.BUILDING, ImageState.PULLING):
            self._done += 1
        if self._on_state is not None:
            self._on_state(model, state)

    def _summary(self, what: str, start: float) -> None:
        """One line when every job is done: how long, and how many ended in each state."""
        if not self._dirs:
            return
        kinds = Counter(state.split(":")[0] for state in self.states.values())
        summary = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
        total = len(self._dirs)
        logger.info(
            "image %s done: %d/%d in %.1f s (%s)", what, self._done, total,
            time.monotonic() - start, summary,
        )  # fmt: skip

    async def _build(self, model_dir: Path) -> str:
        argv = ["snapshot", "build", str(model_dir), "--store", str(self._cache), *self._host_args]
        code, tail = await self._job(argv, model_dir.name)
        if code == _NOTHING_TO_IMAGE_EXIT:
            logger.info("model=%s has no weight files to image; it loads normally", model_dir.name)
            return ImageState.NO_WEIGHTS.value
        return ImageState.BUILT.value if code == 0 else _failed(code, tail)

    async def _pull(self, model_dir: Path) -> str:
        model = model_dir.name
        argv = ["snapshot", "pull", model, "--store", str(self._store), "--cache", str(self._cache)]
        argv += ["--source", str(model_dir), *self._host_args]
        code, tail = await self._job(argv, model)
        if code == _STALE_EXIT:
            return ImageState.STALE.value
        return ImageState.CACHED.value if code == 0 else _failed(code, tail)

    async def _list_store(self) -> set[str] | None:
        """Models with a CPU image in the store, or None when the store cannot be listed."""
        argv = ["snapshot", "ls", "--store", str(self._store), "--json"]
        code, out = await self._job(argv, "(store listing)", want_stdout=True)
        if code != 0:
            logger.warning("cannot list the image store %s: %s", self._store, out)
            return None
        try:
            rows = json.loads(out)
        except ValueError:
            logger.warning("the image store listing is not JSON: %s", out[:200])
            return None
        if not isinstance(rows, list):
            return None
        return {
            str(r["model"])
            for r in rows
            if isinstance(r, dict) and r.get("target") == "cpu" and "error" not in r
        }

    async def _job(
        self, argv: list[str], what: str, *, want_stdout: bool = False
    ) -> tuple[int | None, str]:
        """Run `thaw ARGV` at idle priority; (exit code or None, stderr tail or stdout)."""
        start = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._command,
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE if want_stdout else asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, **_ONE_THREAD},
            )
        except OSError as exc:
            logger.warning("model=%s image job could not start: %s", what, exc)
            return None, f"could not start: {exc}"
        if argv[1] == "pull":
            self._pull_pid = proc.pid
        if not (argv[1] == "pull" and self._boosted):  # a wake asked for it while it started
            _idle_priority(proc.pid)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self._timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            if isinstance(exc, asyncio.CancelledError):  # shutdown: no more jobs either
                raise
            logger.warning("model=%s image job timed out after %g s", what, self._timeout_s)
            return None, "timed out"
        finally:
            self._pull_pid = None
        if want_stdout:
            return proc.returncode, out.decode(errors="replace")
        tail = " | ".join(err.decode(errors="replace").strip().splitlines()[-3:])
        if proc.returncode == 0:
            logger.info("model=%s image %s in %.2f s", what, argv[1], time.monotonic() - start)
        elif proc.returncode not in (_NOTHING_TO_IMAGE_EXIT, _STALE_EXIT):
            logger.warning("model=%s image %s failed; normal loads: %s", what, argv[1], tail)
        return proc.returncode, tail


def _failed(code: int | None, tail: str) -> str:
    reason = tail or ("timed out" if code is None else f"exit code {code}")
    return f"{ImageState.FAILED}: {reason}"


def _idle_priority(pid: int) -> None:
    """SCHED_IDLE for `pid` (it runs only when a CPU has nothing else), else the lowest nice."""
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, pid, 19)
