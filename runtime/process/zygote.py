"""The fork server (zygote): one process that imported the frameworks forks `thaw serve` children.

`thaw serve REPO --fork-server-fd FD` runs this instead of a server. It imports what every
pool process needs before it can serve (the runtime's modules, aiohttp, uvloop, the
snapshotter and the frameworks that are fork-safe at import), freezes the garbage
collector's view of those objects, and then forks one child per `fork` request on the control
socket (protocol: thawwire.pool_protocol). A child runs `thaw serve ARGV` from there: its
framework pages stay shared with the zygote copy-on-write, so it starts in milliseconds and
costs only the pages it writes.

Fork-safety rules (each one checked or tested):

1. **No thread exists when the zygote forks.** A fork copies only the calling thread; a
   lock another thread held stays locked forever in the child, and a thread pool the child
   believes it has is gone. The zygote checks `/proc/self/task` before every fork and refuses
   (an `error` answer) if it ever has more than one thread.
2. **Frameworks that start threads at import are imported after the fork.** Measured:
   onnxruntime starts a native thread when `onnxruntime` is imported (so a child imports it
   while it warms up, before it reports ready); torch starts none at import; numpy's
   OpenBLAS starts its thread pool when the library loads unless `OPENBLAS_NUM_THREADS=1`, so
   the zygote loads it with one thread and each child sets the count back.
3. **No framework op runs in the zygote.** Thread pools (torch intra-op, OpenMP, onnxruntime's)
   are created at first use and `torch.set_num_threads` starts one at once; the zygote calls
   none of them, and a child creates its own on first use.
4. **No event loop in the zygote.** Its control loop is a blocking `select`; each child
   creates its aiohttp/uvloop loop itself (`thaw serve` does, as any fresh process does).
5. **A child owns nothing of the zygote's:** it closes the control socket and the signal
   wake-up pipe, resets the SIGCHLD handler, starts its own session, and leaves with
   `os._exit`, never returning into the zygote's loop. Python's `random` is reseeded by
   CPython's own at-fork hook; numpy's legacy global `np.random` state is shared (seed it in
   a model that needs per-process randomness).

A child dies with the activator (it watches the activator's pid through a pidfd), not with the
zygote: a zygote that exits leaves its serving children running.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from thawwire.pool_protocol import (
    FDS_PER_FORK,
    MAX_FRAME_BYTES,
    FrameDecoder,
    Op,
    PoolProtocolError,
    encode_frame,
)

__all__ = [
    "FORK_SAFE_AT_IMPORT",
    "ForkRefused",
    "ZygoteSettings",
    "check_single_threaded",
    "serve_fork_server",
    "thread_count",
]

logger = logging.getLogger(__name__)

# Frameworks the zygote may import: they start no thread at import (tests pin this).
FORK_SAFE_AT_IMPORT = frozenset({"torch"})
# What every child imports before it is ready, so the zygote imports it once for all of them.
_WARM_MODULES = (
    "numpy",
    "aiohttp.web",
    "prometheus_client",
    "psutil",
    "runtime.http.app",
    "runtime.observe.metrics",
    "runtime.models.manager",
    "runtime.process.server",
    "runtime.python.backend",
)
_WARM_OPTIONAL = ("uvloop",)  # imported when installed, as `thaw serve` would
# A child whose `--target` is not cpu finds its GPUs without CUDA (snapshotter.gpu_probe, NVML):
# imported here, it costs the child nothing; importing starts no thread and touches no driver
# (nvmlInit runs in the child, never in the zygote).
_WITH_GPU_SCAN = ("snapshotter", "pynvml")
_WITH_TORCH = ("runtime.backends.torch_backend",)
_WITH_IMAGES = ("snapshotter", "runtime.models.image_cache")
# A child serving gRPC (`thaw up` gives each `--grpc-port 0`) imports grpc, protobuf's
# generated service and the handlers at start (~0.2 s). Importing grpc starts no thread
# (tests pin it): its core, and so its threads, start with the first server or channel, in
# the child.
_WITH_GRPC = (
    "grpc",
    "grpc.aio",
    "tritonclient.grpc",
    "runtime.grpc.handlers",
    "runtime.grpc.server",
)
_BLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"
_PARENT_POLL_S = 0.5  # how often the loop checks that the activator still runs


class ForkRefused(Exception):
    """The zygote cannot fork safely now (the message says why); no child was made."""


@dataclass(frozen=True)
class ZygoteSettings:
    """What the zygote imports: `frameworks` as `--preload-frameworks`; `images`: the
    snapshotter too (`--cache`/`--store` given); `grpc`: the gRPC server's modules (children
    serve gRPC: `--allow-grpc`, the default); `gpu_scan`: the GPU scan's modules (children's
    `--target` is not cpu; the zygote itself never scans)."""

    frameworks: tuple[str, ...]
    images: bool
    grpc: bool = True
    gpu_scan: bool = False


def thread_count() -> int:
    """Threads of this process now, from the kernel (native threads included)."""
    return len(os.listdir("/proc/self/task"))


def check_single_threaded() -> None:
    """Raise ForkRefused unless this process has exactly one thread (rule 1)."""
    count = thread_count()
    if count != 1:
        names = ", ".join(t.name for t in threading.enumerate())
        raise ForkRefused(
            f"fork server has {count} threads (Python threads: {names}); a fork now could "
            "leave a lock held forever in the child, so it refuses"
        )


def serve_fork_server(
    control_fd: int, settings: ZygoteSettings, child_main: Callable[[list[str]], int]
) -> int:
    """Import, announce `ready`, then fork children on request until the control socket
    closes or SIGTERM arrives; returns the exit status. A forked child runs
    `child_main(argv)` (`thaw serve ARGV`, passed in by runtime.process.cli)."""
    parent = os.getppid()
    started = time.perf_counter()
    blas_threads = os.environ.get(_BLAS_THREADS_ENV)
    # OpenBLAS reads this when numpy loads it: with one thread it starts no thread pool.
    os.environ[_BLAS_THREADS_ENV] = "1"
    preloaded, deferred = _import_all(settings)
    gc.collect()
    gc.freeze()  # the children's collector then never writes to these objects' pages
    sock = socket.socket(fileno=control_fd)
    sock.setblocking(True)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select through the wake-up fd
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        check_single_threaded()
    except ForkRefused as exc:
        logger.error("fork server cannot start: %s", exc)
        return 1
    import_s = time.perf_counter() - started
    _send(sock, encode_frame(
        Op.READY, pid=os.getpid(), threads=thread_count(), preloaded=list(preloaded),
        deferred=list(deferred), import_s=round(import_s, 4),
    ))  # fmt: skip
    logger.info("fork server ready in %.2f s (imported %s)", import_s, ", ".join(preloaded))
    child = _Child(parent, blas_threads, lambda: _close_all(sock, wake_r, wake_w), child_main)
    loop = _ControlLoop(sock, wake_r, child.run)
    while not stopping and os.getppid() == parent:
        if not loop.step(_PARENT_POLL_S):
            break
    logger.info("fork server stopping (%d children keep running)", len(loop.children))
    return 0


def _import_all(settings: ZygoteSettings) -> tuple[list[str], list[str]]:
    """Import the warm modules and the fork-safe frameworks; the rest is left to children."""
    frameworks = [f for f in settings.frameworks if f in FORK_SAFE_AT_IMPORT]
    deferred = [f for f in settings.frameworks if f not in FORK_SAFE_AT_IMPORT]
    modules = list(_WARM_MODULES)
    if "torch" in frameworks:
        modules += _WITH_TORCH
    if settings.images:
        modules += _WITH_IMAGES
    if settings.grpc:
        modules += _WITH_GRPC
    for name in [*frameworks, *modules]:
        importlib.import_module(name)
    optional = [*_WARM_OPTIONAL, *(_WITH_GPU_SCAN if settings.gpu_scan else ())]
    for name in optional:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
    return frameworks, deferred


class _ControlLoop:
    """The zygote's single-threaded loop: requests in, forks, and reaped children out."""

    def __init__(
        self, sock: socket.socket, wake_r: int, fork: Callable[[list[str], list[int]], int]
    ):
        self._sock = sock
        self._wake_r = wake_r
        self._fork = fork
        self._decoder = FrameDecoder()
        self._fds: list[int] = []  # received with the frames not yet handled
        self.children: set[int] = set()

    def step(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for a request or a child's exit; False once the peer left."""
        fds = [self._sock.fileno(), self._wake_r]
        try:
            readable = select.select(fds, [], [], timeout_s)[0]
        except InterruptedError:
            readable = []
        if self._wake_r in readable:
            os.read(self._wake_r, 512)
        self._reap()
        if self._sock.fileno() in readable:
            return self._receive()
        return True

    def _receive(self) -> bool:
        try:
            data, fds, _, _ = socket.recv_fds(self._sock, MAX_FRAME_BYTES, FDS_PER_FORK * 8)
        except OSError as exc:
            logger.warning("fork server control socket failed: %s", exc)
            return False
        if not data:
            return False
        self._fds += fds
        try:
            messages = self._decoder.feed(data)
        except PoolProtocolError as exc:
            logger.error("fork server got a bad frame, stopping: %s", exc)
            return False
        for message in messages:
            self._handle(message)
        return True

    def _handle(self, message: dict[str, object]) -> None:
        op, request = Op(str(message["op"])), message["id"]
        if op is Op.STATUS:
            _send(self._sock, encode_frame(
                Op.STATUS, id=request, pid=os.getpid(), threads=thread_count(),
                children=len(self.children),
            ))  # fmt: skip
            return
        if op is not Op.FORK:
            _send(self._sock, encode_frame(Op.ERROR, id=request, error=f"unexpected '{op}'"))
            return
        fds, self._fds = self._fds[:FDS_PER_FORK], self._fds[FDS_PER_FORK:]
        try:
            if len(fds) != FDS_PER_FORK:
                raise ForkRefused(f"a fork request needs {FDS_PER_FORK} fds, got {len(fds)}")
            argv = message["argv"]
            assert isinstance(argv, list)  # checked by the decoder
            pid = self._fork([str(a) for a in argv], fds)
        except (ForkRefused, OSError) as exc:
            _send(self._sock, encode_frame(Op.ERROR, id=request, error=str(exc)))
            return
        finally:
            for fd in fds:
                os.close(fd)
        self.children.add(pid)
        _send(self._sock, encode_frame(Op.FORKED, id=request, pid=pid))

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            code = os.waitstatus_to_exitcode(status)
            _send(self._sock, encode_frame(Op.EXITED, pid=pid, status=code))


class _Child:
    """What runs in a forked child: own the process, then become `thaw serve ARGV`."""

    def __init__(
        self,
        activator_pid: int,
        blas_threads: str | None,
        close: Callable[[], None],
        main: Callable[[list[str]], int],
    ) -> None:
        self._activator = activator_pid
        self._main = main
        self._blas_threads = blas_threads
        self._close_zygote_fds = close

    def run(self, argv: list[str], fds: list[int]) -> int:
        """Fork; in the parent return the child's pid, in the child never return."""
        check_single_threaded()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            return pid
        code = 70  # EX_SOFTWARE: the child failed before `thaw serve` ran
        try:
            self._become_own_process(fds)
            code = self._main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            logging.getLogger(__name__).exception("forked child failed")
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)

    def _become_own_process(self, fds: list[int]) -> None:
        os.setsid()  # its own session: a terminal's Ctrl-C reaches `thaw up` only
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in fds:
            os.close(fd)
        self._close_zygote_fds()
        for handler in logging.root.handlers[:]:  # `thaw serve` configures its own logging
            logging.root.removeHandler(handler)
        _restore_blas_threads(self._blas_threads)
        _watch_activator(self._activator)


def _restore_blas_threads(value: str | None) -> None:
    """Give OpenBLAS back the thread count this process would have had (rule 2)."""
    if value is None:
        os.environ.pop(_BLAS_THREADS_ENV, None)
    else:
        os.environ[_BLAS_THREADS_ENV] = value
    wanted = int(value) if value and value.isdigit() else (os.cpu_count() or 1)
    setter = _openblas_setter()
    if setter is not None and wanted > 1:
        setter(wanted)


def _openblas_setter() -> Callable[[int], object] | None:
    """`openblas_set_num_threads` of the OpenBLAS numpy loaded, when it is one we know."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "openblas" in line and "/" in line}
    for path in sorted(paths):
        lib = ctypes.CDLL(path)
        for name in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads"):
            function = getattr(lib, name, None)
            if function is not None:
                function.argtypes = [ctypes.c_int]
                return function
    return None


def _watch_activator(pid: int) -> None:
    """Stop this child when the activator (`thaw up`) is gone, as launcher.py does for
    spawned replicas: SIGTERM (a graceful stop), then exit 10 s later at the latest."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # already gone
        os.kill(os.getpid(), signal.SIGTERM)
        return

    def watch() -> None:
        select.select([pidfd], [], [])
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
        os._exit(1)

    threading.Thread(target=watch, name="thaw-activator-watch", daemon=True).start()


def _send(sock: socket.socket, frame: bytes) -> None:
    try:
        sock.sendall(frame)
    except OSError as exc:  # the activator left; the loop sees EOF next
        logger.debug("fork server could not answer: %s", exc)


def _close_all(sock: socket.socket, *fds: int) -> None:
    """In a child: close the zygote's control socket and wake-up pipe."""
    sock.close()
    for fd in fds:
        os.close(fd)
