"""`make test-image`'s smoke checks: the built image run as the chart runs it, and used for real.

    .venv/bin/python deploy/image/smoke.py IMAGE [--repo DIR]

Every container runs as the chart's pods do: uid/gid 10001, a read-only root filesystem with
no writable /tmp unless a volume is mounted there (`--read-only --read-only-tmpfs=false`), all
capabilities dropped, no privilege escalation, the host network (servers bind 127.0.0.1 on
ports they pick: `--port 0`, so concurrent runs never collide), and only the chart's volumes:
the repository read-only at /models, emptyDirs (world-writable host folders) at /tmp and
/var/cache/thaw. The checks, each bounded in time:

1. `thaw --help`, with no writable path at all, and every package pyproject.toml ships imports;
2. `thaw serve /models` answers an infer from `tritonclient.http` on the host, with the same
   outputs as onnxruntime on the host gives for the same model file;
3. `thaw snapshot build /models/resnet50 --store /store` writes an image into a mounted folder;
4. `thaw up /models` answers a cold request (the model at zero replicas), counted as a cold
   start in its /metrics;
5. `thaw serve /models` with SageMaker's and Vertex AI's ports (their flags and environment):
   `/ping`, the health route, a redirect to a model's readiness, an invocation reaching it;
6. `thaw serve` as SageMaker's multi-model endpoint: a model of /models loaded under the name
   SageMaker gives, invoked (the host's onnxruntime outputs), listed, unloaded;
7. `torch.compile` (inductor: C++ kernels compiled at run time, caches under /tmp) gives the
   eager result;
8. a warm pod's `thaw serve` flags (one spare stub, its imports `auto`) over a Python model that
   imports torch: the spare imports torch before any load, and the load takes it.

A failing check prints the container's logs; containers are always removed. Exit 1 if any
check failed. Needs root (rootful podman) and CONTAINERS_CONF (deploy/image/containers.conf).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402

from thawwire.handoff_protocol import LISTENING_PREFIX  # noqa: E402

USER = "10001:10001"
MODEL = "resnet50"
START_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 120.0
COMPILE_TIMEOUT_S = 300.0


class CheckFailed(Exception):
    """A smoke check's failure: what was expected, and what happened."""


@dataclass(frozen=True)
class Volume:
    """A bind mount: a host folder at a path in the container, as a pod's volumeMount."""

    host: Path
    path: str
    read_only: bool = False

    def flag(self) -> str:
        return f"{self.host}:{self.path}" + (":ro" if self.read_only else "")


def podman(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def run_flags(
    image: str,
    volumes: list[Volume],
    *,
    name: str,
    entrypoint: str | None,
    env: dict[str, str] | None = None,
) -> list[str]:
    """`podman run`'s flags as the chart runs a pod (securityContext + volumes, `env`), then
    the image."""
    argv = [
        "--name", name, "--network", "host", "--user", USER,
        "--read-only", "--read-only-tmpfs=false",
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--pull", "never", "--shm-size", "256m",
    ]  # fmt: skip
    for volume in volumes:
        argv += ["-v", volume.flag()]
    if entrypoint is not None:
        argv += ["--entrypoint", entrypoint]
    for key, value in (env or {}).items():
        argv += ["-e", f"{key}={value}"]
    return [*argv, image]


def emptydir(parent: Path, name: str) -> Path:
    """A host folder as Kubernetes makes an emptyDir: world-writable."""
    path = parent / name
    path.mkdir()
    path.chmod(0o777)
    return path


class Container:
    """One detached container; `logs()` for failures; removed on `remove()` whatever happened."""

    def __init__(
        self,
        image: str,
        volumes: list[Volume],
        args: list[str],
        *,
        name: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        flags = run_flags(image, volumes, name=name, entrypoint=None, env=env)
        done = podman("run", "-d", *flags, *args)
        if done.returncode != 0:
            self.remove()  # podman may have created it before failing to start it
            raise CheckFailed(f"podman run failed: {done.stderr.strip()}")

    def logs(self) -> str:
        """stdout, then stderr (podman keeps them apart)."""
        done = podman("logs", self.name)
        return done.stdout + done.stderr

    def running(self) -> bool:
        state = podman("inspect", "--format", "{{.State.Running}}", self.name)
        return state.stdout.strip() == "true"

    def listening_url(self, timeout_s: float) -> str:
        """The `THAW_LISTENING http://HOST:PORT` line's URL, once the server prints it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in podman("logs", self.name).stdout.splitlines():
                if line.startswith(LISTENING_PREFIX + " "):
                    return line.split(" ", 1)[1].strip()
            if not self.running():
                raise CheckFailed("the container exited before listening")
            time.sleep(0.25)
        raise CheckFailed(f"no {LISTENING_PREFIX} line within {timeout_s:.0f} s")

    def remove(self) -> None:
        podman("rm", "-f", self.name, timeout_s=60)


@contextmanager
def container(
    image: str,
    volumes: list[Volume],
    args: list[str],
    *,
    name: str,
    env: dict[str, str] | None = None,
) -> Iterator[Container]:
    box = Container(image, volumes, args, name=name, env=env)
    try:
        yield box
    except BaseException:
        print(f"--- logs of {name} ---\n{box.logs()}--- end of logs ---", file=sys.stderr)
        raise
    finally:
        box.remove()


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (OSError, urllib.error.URLError, httpclient.InferenceServerException):
            pass  # not up yet
        time.sleep(0.25)
    raise CheckFailed(f"{what}: not within {timeout_s:.0f} s")


def resnet_input() -> np.ndarray:
    return np.random.default_rng(7).standard_normal((1, 3, 224, 224), dtype=np.float32)


def expected_output(repo: Path) -> np.ndarray:
    """What onnxruntime on the host computes for the same model file and input."""
    session = ort.InferenceSession(str(repo / MODEL / "1" / "model.onnx"))
    out = session.run(None, {session.get_inputs()[0].name: resnet_input()})[0]
    return np.asarray(out)


def infer(url: str) -> np.ndarray:
    client = httpclient.InferenceServerClient(
        url.removeprefix("http://"), connection_timeout=REQUEST_TIMEOUT_S,
        network_timeout=REQUEST_TIMEOUT_S,
    )  # fmt: skip
    try:
        tensor = httpclient.InferInput("input", [1, 3, 224, 224], "FP32")
        tensor.set_data_from_numpy(resnet_input())
        result = client.infer(MODEL, [tensor], outputs=[httpclient.InferRequestedOutput("output")])
        return np.asarray(result.as_numpy("output"))
    finally:
        client.close()


def check_outputs(got: np.ndarray, want: np.ndarray) -> None:
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-3, atol=1e-4):
        raise CheckFailed(
            f"outputs differ from the host's onnxruntime: {got.shape} vs {want.shape}"
        )


def shipped_packages() -> list[str]:
    """The top-level packages pyproject.toml's `packages.find` ships (its include patterns)."""
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    patterns = [p.split(".")[0] for p in find["find"]["include"]]
    return sorted(
        d.name
        for d in ROOT.iterdir()
        if (d / "__init__.py").is_file() and any(fnmatch.fnmatchcase(d.name, p) for p in patterns)
    )


# --- the checks -------------------------------------------------------------------------


def check_help(image: str, work: Path, repo: Path, name: str) -> str:
    done = podman("run", "--rm", *run_flags(image, [], name=name, entrypoint=None), "--help")
    if done.returncode != 0 or "thaw serve" not in done.stdout:
        raise CheckFailed(f"thaw --help exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    packages = shipped_packages()
    code = "import importlib, sys\nfor p in sys.argv[1:]: importlib.import_module(p)"
    done = podman(
        "run", "--rm", *run_flags(image, [], name=name + "-imports", entrypoint="python"),
        "-c", code, *packages,
    )  # fmt: skip
    if done.returncode != 0:
        raise CheckFailed(f"importing {packages} failed: {done.stderr.strip()[-2000:]}")
    return f"help ok; imports {', '.join(packages)}"


def check_serve(image: str, work: Path, repo: Path, name: str) -> str:
    volumes = [Volume(repo, "/models", read_only=True), Volume(emptydir(work, "serve-tmp"), "/tmp")]
    args = ["serve", "/models", "--host", "127.0.0.1", "--port", "0"]
    with container(image, volumes, args, name=name) as box:
        url = box.listening_url(START_TIMEOUT_S)
        client = httpclient.InferenceServerClient(url.removeprefix("http://"))
        wait_until(lambda: client.is_model_ready(MODEL), START_TIMEOUT_S, f"{MODEL} ready")
        client.close()
        start = time.perf_counter()
        got = infer(url)
        took_ms = (time.perf_counter() - start) * 1e3
        check_outputs(got, expected_output(repo))
    return f"infer {MODEL} ok ({took_ms:.0f} ms), outputs match the host's onnxruntime"


def check_cloud_ports(image: str, work: Path, repo: Path, name: str) -> str:
    """SageMaker's and Vertex AI's ports of `thaw serve`, from the flags and environment a
    Triton container on those clouds is given (docs/sagemaker.md, docs/vertex-ai.md)."""
    volumes = [Volume(repo, "/models", read_only=True), Volume(emptydir(work, "cloud-tmp"), "/tmp")]
    args = ["serve", "/models", "--host", "127.0.0.1", "--port", "0", "--allow-sagemaker=true",
            "--sagemaker-port=0", "--allow-vertex-ai=true", "--vertex-ai-port=0",
            f"--vertex-ai-default-model={MODEL}"]  # fmt: skip
    env = {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": MODEL, "AIP_PREDICT_ROUTE": "/predict",
           "AIP_HEALTH_ROUTE": "/health"}  # fmt: skip
    with container(image, volumes, args, name=name, env=env) as box:
        box.listening_url(START_TIMEOUT_S)
        ports: dict[str, str] = {}

        def started() -> bool:
            for cloud in ("Sagemaker", "Vertex AI"):
                found = re.search(rf"Started {cloud} HTTPService at (\S+?)\"", box.logs())
                if found:
                    ports[cloud] = found.group(1)
            return len(ports) == 2

        wait_until(started, START_TIMEOUT_S, "both cloud ports")
        sagemaker, vertex = ports["Sagemaker"], ports["Vertex AI"]
        if _status(f"http://{sagemaker}/ping") != 200:
            raise CheckFailed("SageMaker's /ping is not 200")
        if _status(f"http://{vertex}/health") != 200:
            raise CheckFailed("Vertex AI's health route is not 200")
        ready = urllib.request.Request(
            f"http://{vertex}/predict", data=b"", method="POST",
            headers={"X-Vertex-Ai-Triton-Redirect": f"v2/models/{MODEL}/ready"},
        )  # fmt: skip
        if _status(ready) != 200:
            raise CheckFailed(f"Vertex AI's redirect to {MODEL}'s readiness is not 200")
        invocation = urllib.request.Request(f"http://{sagemaker}/invocations", data=b"{}")
        if _status(invocation) != 400:  # the model's own refusal: no inputs
            raise CheckFailed("SageMaker's /invocations did not reach the model")
    return f"SageMaker /ping, /invocations and Vertex AI health, predict redirect ok ({MODEL})"


def check_sagemaker_multi_model(image: str, work: Path, repo: Path, name: str) -> str:
    """SageMaker's multi-model endpoint as its `serve` script starts one (an empty repository,
    explicit model control, namespacing): a model loaded from the read-only /models under the
    name SageMaker gives, invoked with the host's input (the host's onnxruntime outputs),
    listed, unloaded (docs/sagemaker.md)."""
    volumes = [Volume(repo, "/models", read_only=True),
               Volume(emptydir(work, "mme-repo"), "/sagemaker"),
               Volume(emptydir(work, "mme-tmp"), "/tmp")]  # fmt: skip
    args = ["serve", "/sagemaker", "--host", "127.0.0.1", "--port", "0",
            "--allow-sagemaker=true", "--sagemaker-port=0", "--model-control-mode=explicit",
            "--model-namespacing=true"]  # fmt: skip
    env = {"SAGEMAKER_TRITON_PING_MODE": "live"}
    with container(image, volumes, args, name=name, env=env) as box:
        box.listening_url(START_TIMEOUT_S)
        found: list[str] = []

        def started() -> bool:
            port = re.search(r"Started Sagemaker HTTPService at (\S+?)\"", box.logs())
            if port:
                found.append(port.group(1))
            return bool(found)

        wait_until(started, START_TIMEOUT_S, "the SageMaker port")
        base = f"http://{found[0]}"
        load = urllib.request.Request(
            f"{base}/models", data=f'{{"model_name": "a1b2", "url": "/models/{MODEL}"}}'.encode(),
            headers={"Content-Type": "application/json", "X-Amzn-SageMaker-Target-Model": "rn"},
        )  # fmt: skip
        if _status(load) != 200:
            raise CheckFailed(f"the multi-model load of /models/{MODEL} is not 200")
        tensor = httpclient.InferInput("input", [1, 3, 224, 224], "FP32")
        tensor.set_data_from_numpy(resnet_input(), binary_data=True)
        body, length = httpclient.InferenceServerClient.generate_request_body(
            [tensor], outputs=[httpclient.InferRequestedOutput("output", binary_data=False)]
        )
        mime = f"application/vnd.sagemaker-triton.binary+json;json-header-size={length}"
        invoke = urllib.request.Request(f"{base}/models/a1b2/invoke", data=body,
                                        headers={"Content-Type": mime})  # fmt: skip
        with urllib.request.urlopen(invoke, timeout=REQUEST_TIMEOUT_S) as response:
            answer = json.loads(response.read())
        got = np.asarray(answer["outputs"][0]["data"], np.float32)
        check_outputs(got.reshape(answer["outputs"][0]["shape"]), expected_output(repo))
        with urllib.request.urlopen(f"{base}/models", timeout=30) as response:
            listed = json.loads(response.read())["models"]
        if listed != [{"modelName": "a1b2", "modelUrl": "/models"}]:
            raise CheckFailed(f"the multi-model list is {listed}")
        if _status(urllib.request.Request(f"{base}/models/a1b2", method="DELETE")) != 200:
            raise CheckFailed("the multi-model unload is not 200")
    return f"/models load, invoke (outputs match the host's onnxruntime), list, unload ({MODEL})"


def _status(request: str | urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def check_snapshot_build(image: str, work: Path, repo: Path, name: str) -> str:
    store = emptydir(work, "store")
    volumes = [
        Volume(repo, "/models", read_only=True),
        Volume(store, "/store"),
        Volume(emptydir(work, "snapshot-tmp"), "/tmp"),
    ]
    args = ["snapshot", "build", f"/models/{MODEL}", "--store", "/store"]
    with container(image, volumes, args, name=name) as box:
        deadline = time.monotonic() + START_TIMEOUT_S
        while box.running() and time.monotonic() < deadline:
            time.sleep(0.25)
        code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        if box.running() or code != "0":
            raise CheckFailed(f"thaw snapshot build: exit {code or 'none (still running)'}")
        files = [p for p in store.rglob("*") if p.is_file()]
        if not files:
            raise CheckFailed("thaw snapshot build exited 0 but the store is empty")
        size = sum(p.stat().st_size for p in files)
    return f"{len(files)} files, {size / 2**20:.1f} MiB in the mounted store"


def check_up_cold(image: str, work: Path, repo: Path, name: str) -> str:
    volumes = [
        Volume(repo, "/models", read_only=True),
        Volume(emptydir(work, "up-cache"), "/var/cache/thaw"),
        Volume(emptydir(work, "up-tmp"), "/tmp"),
    ]
    args = ["up", "/models", "--host", "127.0.0.1", "--port", "0", "--cache", "/var/cache/thaw"]
    with container(image, volumes, args, name=name) as box:
        url = box.listening_url(START_TIMEOUT_S)

        def ready() -> bool:
            with urllib.request.urlopen(url + "/v2/health/ready", timeout=10) as resp:
                return bool(resp.status == 200)

        wait_until(ready, START_TIMEOUT_S, "thaw up ready (its warm pool primed)")
        before = cold_starts(url)
        start = time.perf_counter()
        got = infer(url)
        took_s = time.perf_counter() - start
        check_outputs(got, expected_output(repo))
        after = cold_starts(url)
        if after < before + 1:
            raise CheckFailed(f"no cold start counted for {MODEL} ({before} -> {after})")
    return f"cold request to {MODEL} answered in {took_s:.2f} s, outputs match"


def cold_starts(url: str) -> float:
    """thaw_cold_start_seconds_count for the model, from the activator's /metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("thaw_cold_start_seconds_count") and f'model="{MODEL}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


TORCH_MODEL = """import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", torch.relu(torch.from_numpy(
            pb_utils.get_input_tensor_by_name(r, "X").as_numpy())).numpy())]) for r in requests]
"""
TORCH_MODEL_CONFIG = """name: "torch_relu"
backend: "python"
input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [4] }]
"""
SPARE_IMPORTS_TORCH = "spare Python stubs import torch ahead"


def check_spare_imports_torch(image: str, work: Path, repo: Path, name: str) -> str:
    """A warm pod's flags (the chart's pool template: explicit control, one spare stub, its
    imports `auto`) over a repository whose Python model imports torch: the spare imports
    torch before any load, and the model's load takes it."""
    models = work / "spare-repo"
    (models / "torch_relu" / "1").mkdir(parents=True)
    (models / "torch_relu" / "config.pbtxt").write_text(TORCH_MODEL_CONFIG)
    (models / "torch_relu" / "1" / "model.py").write_text(TORCH_MODEL)
    volumes = [
        Volume(models, "/models", read_only=True),
        Volume(emptydir(work, "spare-tmp"), "/tmp"),
    ]
    args = ["serve", "/models", "--host", "127.0.0.1", "--port", "0",
            "--model-control-mode=explicit", "--python-spare-stubs=1",
            "--python-spare-stub-imports=auto"]  # fmt: skip
    with container(image, volumes, args, name=name) as box:
        url = box.listening_url(START_TIMEOUT_S)
        wait_until(lambda: SPARE_IMPORTS_TORCH in box.logs(), START_TIMEOUT_S, SPARE_IMPORTS_TORCH)
        time.sleep(5)  # the spare's own import of torch, done before the load as on a warm pod
        start = time.perf_counter()
        load = urllib.request.Request(f"{url}/v2/repository/models/torch_relu/load", data=b"")
        if _status(load) != 200:
            raise CheckFailed("the load of torch_relu is not 200")
        load_ms = (time.perf_counter() - start) * 1e3
        body = {"inputs": [{"name": "X", "shape": [4], "datatype": "FP32", "data": [-1, 2, -3, 4]}]}
        infer_call = urllib.request.Request(
            f"{url}/v2/models/torch_relu/infer", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(infer_call, timeout=REQUEST_TIMEOUT_S) as response:
            answer = json.loads(response.read())
        if answer["outputs"][0]["data"] != [0, 2, 0, 4]:
            raise CheckFailed(f"torch_relu answered {answer['outputs']}")
        if "(a spare, started ahead)" not in box.logs():
            raise CheckFailed("torch_relu's load did not take the spare")
    return f"the spare imported torch ahead; torch_relu's load took it ({load_ms:.0f} ms)"


TORCH_COMPILE = """
import torch
def f(x):
    return torch.relu(x) * 2 + torch.sin(x)
x = torch.linspace(-3, 3, 64)
compiled = torch.compile(f)(x)
assert torch.allclose(compiled, f(x)), "compiled differs from eager"
print("compiled ok")
"""


def check_torch_compile(image: str, work: Path, repo: Path, name: str) -> str:
    volumes = [Volume(emptydir(work, "compile-tmp"), "/tmp")]
    flags = run_flags(image, volumes, name=name, entrypoint="python")
    done = podman("run", "--rm", *flags, "-c", TORCH_COMPILE, timeout_s=COMPILE_TIMEOUT_S)
    if done.returncode != 0 or "compiled ok" not in done.stdout:
        raise CheckFailed(f"torch.compile exited {done.returncode}: {done.stderr.strip()[-3000:]}")
    return "inductor's C++ kernels built and equal to eager"


CHECKS = [
    ("thaw --help, read-only, no volumes", check_help),
    ("thaw serve answers an infer", check_serve),
    ("thaw snapshot build into a mounted store", check_snapshot_build),
    ("thaw up answers a cold request", check_up_cold),
    ("thaw serve's SageMaker and Vertex AI ports", check_cloud_ports),
    ("thaw serve's SageMaker multi-model endpoint", check_sagemaker_multi_model),
    ("torch.compile as uid 10001, /tmp only", check_torch_compile),
    ("a warm pod's spare stub imports what its Python model imports", check_spare_imports_torch),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("image")
    parser.add_argument("--repo", type=Path, default=ROOT / ".image" / "repository")
    args = parser.parse_args(argv)
    os.environ.setdefault("CONTAINERS_CONF", str(ROOT / "deploy" / "image" / "containers.conf"))
    if podman("image", "exists", args.image).returncode != 0:
        print(f"smoke: no image {args.image} (make image)", file=sys.stderr)
        return 1
    generate = [sys.executable, str(ROOT / "examples" / "generate_repository.py"), "--small"]
    subprocess.run([*generate, str(args.repo)], check=True, timeout=600)
    failed = 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="thaw-smoke-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)
        for number, (title, check) in enumerate(CHECKS, 1):
            name = f"thaw-smoke-{os.getpid()}-{number}"
            t0 = time.perf_counter()
            try:
                detail = check(args.image, work, args.repo.resolve(), name)
            except (CheckFailed, subprocess.TimeoutExpired, httpclient.InferenceServerException,
                    OSError) as exc:  # fmt: skip
                failed += 1
                print(f"FAIL {number}. {title} ({time.perf_counter() - t0:.1f} s): {exc}")
            else:
                print(f"ok   {number}. {title} ({time.perf_counter() - t0:.1f} s): {detail}")
            sys.stdout.flush()
    total = time.perf_counter() - started
    print(
        f"smoke: {len(CHECKS) - failed}/{len(CHECKS)} checks passed in {total:.0f} s ({args.image})"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
