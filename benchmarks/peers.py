"""Start and stop real model servers (thaw, Triton, KServe, MLServer) on loopback for benchmarks.

Peers are installed on first use into their own virtualenvs under `.bench/`, never into the
project's `.venv`. Every server gets a port, a readiness wait with a deadline and a log file;
`stop()` ends its whole process group.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / ".bench"
PIP_TIMEOUT_S = 1200.0


class PeerError(Exception):
    """A peer could not be installed, started, or did not become ready in time."""


@dataclass
class PeerHandle:
    """A running server: its base URL, its process (group leader) and its log file."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] = field(repr=False)
    scratch: Path | None = None  # a folder the peer needed while running, removed by stop()
    grpc_address: str | None = None  # HOST:PORT of its KServe v2 gRPC endpoint, if it has one
    # Files it makes that outlive a killed or failed server (Triton's python-backend regions in
    # /dev/shm, under a prefix of this handle's own), removed by stop().
    leftovers: str | None = None

    def stop(self, *, timeout_s: float = 20.0) -> None:
        """SIGTERM the process group, SIGKILL it after `timeout_s`; idempotent."""
        if self.process.poll() is None:
            _signal_group(self.process, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(self.process, signal.SIGKILL)
                self.process.wait(timeout=timeout_s)
        # Children (Triton's python stubs) may outlive the leader: end the group regardless.
        _signal_group(self.process, signal.SIGKILL)
        self._log.close()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        if self.leftovers is not None:
            for path in glob.glob(self.leftovers):
                with contextlib.suppress(OSError):
                    os.unlink(path)


class Peer(Protocol):
    """A server the benchmark can run; `backends` are the model kinds it can serve. Given a
    `grpc_port`, a peer with a KServe v2 gRPC endpoint serves it there (`PeerHandle.grpc_address`);
    one without ignores it."""

    name: str
    backends: frozenset[str]

    def start(
        self, model_repo: Path, port: int, *, timeout_s: float = 120.0, grpc_port: int | None = None
    ) -> PeerHandle: ...


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def in_private_netns() -> bool:
    """True when this process's network namespace has no interface but loopback (`unshare -n`).

    Then a server that binds 0.0.0.0 is reachable from this namespace only.
    """
    try:
        lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    except OSError:
        return False
    return [line.split(":", 1)[0].strip() for line in lines] == ["lo"]


def _spawn(name: str, argv: list[str], *, env: dict[str, str], cwd: Path, url: str) -> PeerHandle:
    # One log per server and port, so that concurrent benchmark runs never share a file.
    log_path = BENCH_DIR / "logs" / f"{name}-{url.rsplit(':', 1)[-1]}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("wb")
    process = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    return PeerHandle(name=name, url=url, process=process, log_path=log_path, _log=log)


def _http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return None


def wait_ready(handle: PeerHandle, models: list[str], *, timeout_s: float) -> None:
    """Poll v2 readiness of the server and of each model; stop it and raise PeerError on failure."""
    deadline = time.monotonic() + timeout_s
    paths = ["/v2/health/live"] + [f"/v2/models/{m}/ready" for m in models]
    while time.monotonic() < deadline:
        if handle.process.poll() is not None:
            handle.stop()
            raise PeerError(
                f"{handle.name} exited with {handle.process.returncode}: {_tail(handle)}"
            )
        if all(_http_status(handle.url + path) == 200 for path in paths):
            return
        time.sleep(0.25)
    handle.stop()
    raise PeerError(f"{handle.name} not ready after {timeout_s:.0f} s: {_tail(handle)}")


def _tail(handle: PeerHandle, lines: int = 15) -> str:
    text = handle.log_path.read_text(errors="replace").splitlines()[-lines:]
    return f"(log {handle.log_path})\n" + "\n".join(text)


def model_names(model_repo: Path) -> list[str]:
    """The models of a Triton repository: folders holding a config.pbtxt."""
    return sorted(p.parent.name for p in model_repo.glob("*/config.pbtxt"))


def ensure_venv(name: str, packages: list[str]) -> Path:
    """`.bench/<name>` with `packages` installed (created on first use); returns its python."""
    venv = BENCH_DIR / name
    python = venv / "bin" / "python"
    marker = venv / ".thaw-installed"
    wanted = " ".join(packages)
    if marker.is_file() and marker.read_text() == wanted:
        return python
    log_path = BENCH_DIR / f"{name}-install.log"
    logger.info("installing %s into %s (log %s)", wanted, venv, log_path)
    BENCH_DIR.mkdir(exist_ok=True)
    base = getattr(sys, "_base_executable", sys.executable)
    steps = [[base, "-m", "venv", str(venv)], [str(python), "-m", "pip", "install", *packages]]
    with log_path.open("ab") as log:
        for argv in steps:
            try:
                code = subprocess.run(
                    argv, stdout=log, stderr=log, timeout=PIP_TIMEOUT_S
                ).returncode
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise PeerError(f"cannot install {wanted}: {exc}") from exc
            if code != 0:
                raise PeerError(
                    f"cannot install {wanted}: `{' '.join(argv)}` exited {code}; see {log_path}"
                )
    marker.write_text(wanted)
    return python


class ThawPeer:
    """`thaw serve` from this checkout, with the project's own virtualenv."""

    name = "thaw"
    backends = frozenset({"python", "onnxruntime"})

    def __init__(
        self,
        python: Path | None = None,
        *,
        extra_args: tuple[str, ...] = (),
        tree: Path | None = None,
    ) -> None:
        self.python = python or Path(sys.executable)
        self.extra_args = extra_args
        # Another checkout of this repository to run instead of this one (a base revision, for
        # a before/after in one run): its directory comes first on PYTHONPATH and is the cwd.
        self.tree = tree

    def start(
        self, model_repo: Path, port: int, *, timeout_s: float = 120.0, grpc_port: int | None = None
    ) -> PeerHandle:
        argv = [
            str(self.python),
            "-m",
            "thaw.cli",
            "serve",
            str(model_repo),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--metrics-port",
            str(free_port()),
            *self.extra_args,
        ]
        argv += ["--grpc-port", str(grpc_port)] if grpc_port else ["--allow-grpc=false"]
        env, cwd = dict(os.environ), ROOT
        if self.tree is not None:
            cwd = self.tree.resolve()
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(cwd), env.get("PYTHONPATH", "")) if p
            )
        handle = _spawn(self.name, argv, env=env, cwd=cwd, url=f"http://127.0.0.1:{port}")
        if grpc_port:
            handle.grpc_address = f"127.0.0.1:{grpc_port}"
        wait_ready(handle, model_names(model_repo), timeout_s=timeout_s)
        return handle


class ThawNativeFrontPeer(ThawPeer):
    """`thaw serve --front native`: the native front (native/front, `make native`) before the
    same server (decision 0032)."""

    name = "thaw_native_front"

    def __init__(self) -> None:
        super().__init__(extra_args=("--front", "native"))

    def prepare(self) -> Path:
        """The front's binary; PeerError when it is not built."""
        from runtime.errors import ServingError
        from runtime.process.native_front import front_binary

        try:
            return front_binary()
        except ServingError as exc:
            raise PeerError(exc.message) from exc


def model_kind(config_path: Path) -> str:
    """'onnxruntime', 'python' or another backend name, from a model's config.pbtxt."""
    config = _parse_config(config_path)
    if config.platform == "onnxruntime_onnx" or config.backend == "onnxruntime":
        return "onnxruntime"
    return config.backend or config.platform


def _parse_config(config_path: Path) -> model_config_pb2.ModelConfig:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(config_path.read_text(), model_config_pb2.ModelConfig())


def repository_manifest(model_repo: Path) -> list[dict[str, str]]:
    """Each model's name, kind, newest version folder and config (Triton's schema, as JSON)."""
    from google.protobuf import json_format

    entries = []
    for name in model_names(model_repo):
        config = _parse_config(model_repo / name / "config.pbtxt")
        versions = [p for p in (model_repo / name).iterdir() if p.name.isdigit()]
        if not versions:
            raise PeerError(f"model {name} has no version folder")
        newest = max(versions, key=lambda p: int(p.name))
        as_dict = json_format.MessageToDict(config, preserving_proto_field_name=True)
        entries.append({
            "name": name, "kind": model_kind(model_repo / name / "config.pbtxt"),
            "version_dir": str(newest.resolve()), "config_json": json.dumps(as_dict),
        })  # fmt: skip
    return entries


class TritonPeer:
    """Real Triton (`tritonserver` 2.5x from pip `nvidia-pytriton`), without Docker.

    The wheel bundles the server binary, the python backend and per-Python-version stubs, but no
    onnxruntime backend: `backends` says what this install can serve.
    """

    name = "triton"
    packages = ["nvidia-pytriton", "numpy<2"]

    def __init__(self) -> None:
        self.server_dir = BENCH_DIR / "tritonserver"
        self.venv = BENCH_DIR / "triton-venv"

    def prepare(self) -> None:
        """Install the wheel and lay out `.bench/tritonserver` with the Python 3.11 stub."""
        python = ensure_venv("triton-venv", self.packages)
        site = Path(
            subprocess.check_output(
                [
                    str(python),
                    "-c",
                    "import pytriton, os; print(os.path.dirname(pytriton.__file__))",
                ],
                text=True,
            ).strip()
        ).parent
        self.libs = site / "nvidia_pytriton.libs"
        if not (self.server_dir / "bin" / "tritonserver").is_file():
            tmp = self.server_dir.with_name("tritonserver.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(site / "pytriton" / "tritonserver", tmp, symlinks=True)
            # The stub embeds Python: it must match the venv's version (the base interpreter's).
            version = f"{sys.version_info.major}.{sys.version_info.minor}"
            stub = tmp / "python_backend_stubs" / version / "triton_python_backend_stub"
            if not stub.is_file():
                raise PeerError(f"nvidia-pytriton has no Python {version} stub at {stub}")
            shutil.copy2(stub, tmp / "backends" / "python" / stub.name)
            tmp.rename(self.server_dir)

    @property
    def backends(self) -> frozenset[str]:
        present = {p.name for p in (self.server_dir / "backends").iterdir() if p.is_dir()}
        return frozenset(present & {"python", "onnxruntime"})

    def start(
        self, model_repo: Path, port: int, *, timeout_s: float = 120.0, grpc_port: int | None = None
    ) -> PeerHandle:
        self.prepare()
        env = dict(os.environ)
        env["PATH"] = f"{self.venv / 'bin'}:{env.get('PATH', '')}"  # stub's python: numpy < 2
        env["LD_LIBRARY_PATH"] = str(self.libs)
        argv = [
            str(self.server_dir / "bin" / "tritonserver"),
            f"--model-repository={model_repo}",
            f"--backend-directory={self.server_dir / 'backends'}",
            "--http-address=127.0.0.1",
            f"--http-port={port}",
            "--allow-metrics=false",
        ]
        if grpc_port:
            argv += ["--allow-grpc=true", "--grpc-address=127.0.0.1", f"--grpc-port={grpc_port}"]
        else:
            argv += ["--allow-grpc=false"]
        # Its python backend's shared-memory regions under a prefix of this run's own, so that
        # stop() removes what a failed or killed server leaves in /dev/shm (a leftover
        # `triton_python_backend_shm_region_*` stops Triton's QA suites from running on Thaw).
        prefix = f"thaw_bench_triton_{os.getpid()}_{port}_"
        argv.append(f"--backend-config=python,shm-region-prefix-name={prefix}")
        handle = _spawn(self.name, argv, env=env, cwd=BENCH_DIR, url=f"http://127.0.0.1:{port}")
        handle.leftovers = f"/dev/shm/{prefix}*"
        if grpc_port:
            handle.grpc_address = f"127.0.0.1:{grpc_port}"
        wait_ready(handle, model_names(model_repo), timeout_s=timeout_s)
        return handle


class KServePeer:
    """KServe's Python `ModelServer` (pip `kserve`) serving the repository via `kserve_app.py`.

    KServe always binds 0.0.0.0, so it is refused outside a private network namespace: run the
    benchmark under `unshare -n` (serve_throughput.py does that itself).
    """

    name = "kserve"
    backends = frozenset({"python", "onnxruntime"})
    packages = ["kserve", "onnxruntime"]

    def prepare(self) -> None:
        self.python = ensure_venv("kserve-venv", self.packages)

    def start(
        self, model_repo: Path, port: int, *, timeout_s: float = 120.0, grpc_port: int | None = None
    ) -> PeerHandle:
        # Its gRPC endpoint stays off (--enable_grpc=false): HTTP rows only.
        if not in_private_netns():
            raise PeerError("KServe binds 0.0.0.0; start it only inside `unshare -n`")
        self.prepare()
        scratch = BENCH_DIR / f"kserve-{port}"
        scratch.mkdir(parents=True, exist_ok=True)
        manifest = scratch / "manifest.json"
        manifest.write_text(json.dumps(repository_manifest(model_repo)))
        argv = [
            str(self.python),
            str(Path(__file__).with_name("kserve_app.py")),
            str(manifest),
            f"--http_port={port}",
            "--enable_grpc=false",
            "--enable_latency_logging=false",
            "--workers=1",
        ]
        url = f"http://127.0.0.1:{port}"
        handle = _spawn(self.name, argv, env=dict(os.environ), cwd=scratch, url=url)
        handle.scratch = scratch
        wait_ready(handle, model_names(model_repo), timeout_s=timeout_s)
        return handle


class MLServerPeer:
    """Seldon MLServer (pip `mlserver`), `parallel_workers: 0`, running the same `model.py` files.

    MLServer's REST API has no binary tensor extension, so it serves only the Python models here.
    """

    name = "mlserver"
    backends = frozenset({"python"})
    packages = ["mlserver", "onnxruntime"]

    def prepare(self) -> None:
        self.python = ensure_venv("mlserver-venv", self.packages)

    def start(
        self, model_repo: Path, port: int, *, timeout_s: float = 120.0, grpc_port: int | None = None
    ) -> PeerHandle:
        # Its gRPC port serves MLServer's own dataplane, not measured here: HTTP rows only.
        self.prepare()
        home = BENCH_DIR / f"mlserver-{port}"
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        settings = {"host": "127.0.0.1", "http_port": port, "grpc_port": free_port(),
                    "metrics_endpoint": None, "parallel_workers": 0, "debug": False}  # fmt: skip
        (home / "settings.json").write_text(json.dumps(settings))
        for entry in repository_manifest(model_repo):
            if entry["kind"] != "python":
                continue
            model_settings = {
                "name": entry["name"], "implementation": "mlserver_app.TritonPythonRuntime",
                "parameters": {"uri": entry["version_dir"],
                               "extra": {"config_json": entry["config_json"]}},
            }  # fmt: skip
            (home / entry["name"]).mkdir()
            (home / entry["name"] / "model-settings.json").write_text(json.dumps(model_settings))
        env = dict(os.environ)
        env["PYTHONPATH"] = str(Path(__file__).parent)  # mlserver_app and triton_model_shim
        argv = [str(self.python.with_name("mlserver")), "start", str(home)]
        url = f"http://127.0.0.1:{port}"
        handle = _spawn(self.name, argv, env=env, cwd=home, url=url)
        handle.scratch = home
        wait_ready(handle, model_names(model_repo), timeout_s=timeout_s)
        return handle


class NativeSpikePeer:
    """Decision 0025's measurement spike (benchmarks/native_front_spike, Rust): a native front
    (HTTP/1.1 with JSON or binary tensors; gRPC ModelInfer given `grpc_port`) that hands each
    infer request of one Python model to Thaw's own stub process, over the stub's own wire. Not
    a server to deploy: one model, numeric tensors, one execute in flight, no statistics or
    validation. Built with cargo offline from Debian's packaged crates (`apt-get install` the
    `debian_packages`)."""

    name = "native_spike"
    backends = frozenset({"python"})
    crate = Path(__file__).resolve().parent / "native_front_spike"
    debian_packages = (
        "librust-hyper-dev", "librust-tokio-dev", "librust-serde-json-dev", "librust-nix-dev",
        "librust-h2-dev", "librust-prost-dev",
    )  # fmt: skip

    def prepare(self) -> Path:
        """Build the spike (a no-op when it is built); its binary."""
        try:
            subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=self.crate, check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise PeerError(
                f"cannot build {self.crate} ({exc}): it needs cargo and Debian's crates "
                f"(apt-get install {' '.join(self.debian_packages)})"
            ) from exc
        return self.crate / "target" / "release" / "thaw-native-front-spike"

    def start(
        self, model_repo: Path, port: int, *, timeout_s: float = 120.0, grpc_port: int | None = None
    ) -> PeerHandle:
        entries = [e for e in repository_manifest(model_repo) if e["kind"] == "python"]
        if len(entries) != 1:
            raise PeerError("the native spike serves one Python model")
        binary = self.prepare()
        from tritonconfig.parse import parse_config
        from tritonconfig.render import config_to_json

        entry = entries[0]
        version_dir = Path(entry["version_dir"])
        config_path = version_dir.parent / "config.pbtxt"
        config = config_to_json(parse_config(config_path.read_text(), str(config_path)))
        init = {
            "model": entry["name"], "model_file": str(version_dir / "model.py"),
            "decoupled": False,
            "args": {  # as runtime.python.model_io.model_args gives a stub
                "model_config": json.dumps(config), "model_instance_kind": "CPU",
                "model_instance_name": f"{entry['name']}_0_0", "model_instance_device_id": "0",
                "model_repository": str(version_dir.parent), "model_version": version_dir.name,
                "model_name": entry["name"],
            },
        }  # fmt: skip
        scratch = BENCH_DIR / f"native-spike-{port}"
        scratch.mkdir(parents=True, exist_ok=True)
        (scratch / "init.json").write_text(json.dumps(init))
        argv = [str(binary), str(port), str(scratch / "init.json"), sys.executable]
        if grpc_port:
            argv.append(str(grpc_port))
        url = f"http://127.0.0.1:{port}"
        handle = _spawn(self.name, argv, env=dict(os.environ), cwd=ROOT, url=url)
        handle.scratch = scratch
        if grpc_port:
            handle.grpc_address = f"127.0.0.1:{grpc_port}"
        wait_ready(handle, [entry["name"]], timeout_s=timeout_s)
        return handle


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
