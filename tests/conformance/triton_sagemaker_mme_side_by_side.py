"""SageMaker's multi-model endpoint of `thaw serve` side by side with real tritonserver 2.51
(nvidia-pytriton's build, benchmarks/peers.py `TritonPeer`): both started as SageMaker's `serve`
script starts a multi-model endpoint (an empty repository, explicit model control, namespacing),
then the same sequence of loads, lists, invocations and unloads sent to each, in order, their
statuses compared (and a list's or a get's JSON). A status that differs and is not a kept
difference fails the run.

    unshare -m sh -c '.venv/bin/python -m tests.conformance.triton_sagemaker_mme_side_by_side'

The models are Python models (add_sub on INT32 [16]; an ensemble of two with its steps in one
directory; one whose initialize, one whose execute raises MemoryError), downloaded as SageMaker
does to /opt/ml/models/<hash>/model: tritonserver finds a model's repository by that path, so
the run links /opt/ml/models to its directory meanwhile (as qa/L0_sagemaker's test.sh; left
out, and said, where it exists already). Without Triton installed, the run says so and exits 0.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import requests

from tests.conformance.triton_cloud_ports_side_by_side import (
    SAGEMAKER_MIME,
    _running,
    triton_peer,
    wait_both,
)
from tests.fixtures.cloud_ports import infer_body
from tests.fixtures.sagemaker_downloads import (
    add_sub_download,
    ensemble_download,
    failing_download,
    out_of_memory_download,
)
from tests.fixtures.serve_process import free_port

__all__ = ["KEPT", "main"]

MODELS = Path("/opt/ml/models")
TARGET = "X-Amzn-SageMaker-Target-Model"
JSON_BODY, _ = infer_body()
BINARY_BODY, BINARY_LENGTH = infer_body(binary_inputs=True, binary_outputs=True)
# Models whose execute fails in each way a Python model can, each loaded in turn under the
# name FAILING, the default model of `/invocations`: its errors keep the v2 port's statuses
# (500, or a TritonError's code), a multi-model invocation's are 400, or 507 for memory.
FAILING = "failing"
_FAILING: dict[str, str] = {
    "raises": 'raise ValueError("bad values")',
    "answers_error": "return [pb_utils.InferenceResponse(error=pb_utils.TritonError("
    '"no such thing", pb_utils.TritonError.NOT_FOUND)) for _ in requests]',
    "out_of_memory": 'raise MemoryError("CUDA out of memory in execute")',
    "answers_oom": "return [pb_utils.InferenceResponse(error=pb_utils.TritonError("
    '"OOM while running")) for _ in requests]',
}
_FP32_BODY = (b'{"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4], '
              b'"data": [1, 2, 3, 4]}]}')  # fmt: skip
_ENSEMBLE_BODY = json.dumps({"inputs": [
    {"name": f"INPUT{i}", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
    for i in (0, 1)]}).encode()  # fmt: skip


def _downloads(root: Path) -> None:
    """What SageMaker downloads for each model of the run, under `root` (/opt/ml/models)."""
    add_sub_download(root, "aaa111", "sm_one")
    add_sub_download(root, "bbb222", "sm_two")
    out_of_memory_download(root, "oominit", "init")
    out_of_memory_download(root, "oomexec", "execute")
    ensemble_download(root, "ensemble333")
    for digest, statement in _FAILING.items():
        failing_download(root, digest, statement)


def _load(name: str, url: str, **headers: str) -> Step:
    body = json.dumps({"model_name": name, "url": url}).encode()
    return Step("POST", "/models", {"Content-Type": "application/json", **headers}, body)


@dataclass(frozen=True)
class Step:
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None

    def __str__(self) -> str:
        body = f" {self.body[:90]!r}" if self.body and self.path == "/models" else ""
        return f"{self.method} {self.path} {self.headers or ''}{body}".rstrip()


_INVOKE_JSON = {"Content-Type": "application/json"}
# fmt: off
STEPS: tuple[Step, ...] = (
    Step("GET", "/models"),
    _load("sm_one", f"{MODELS}/aaa111/model"),
    _load("sm_one", f"{MODELS}/aaa111/model"),
    _load("bbb222", f"{MODELS}/bbb222/model", **{TARGET: "sm_two.tar.gz"}),
    Step("GET", "/models"),
    Step("GET", "/models/sm_one"),
    Step("GET", "/models/nobody"),
    Step("POST", "/models/sm_one/invoke", _INVOKE_JSON, JSON_BODY),
    Step("POST", "/models/sm_one/invoke", {"Content-Type": f"{SAGEMAKER_MIME}{BINARY_LENGTH}"},
         BINARY_BODY),
    Step("POST", "/models/sm_one/invoke", _INVOKE_JSON, b'{"inputs": []}'),
    Step("POST", "/models/sm_one/invoke", {"Content-Type": f"{SAGEMAKER_MIME}-1"}, BINARY_BODY),
    Step("POST", "/models/nobody/invoke", _INVOKE_JSON, JSON_BODY),
    Step("POST", "/models/bbb222/invoke", {TARGET: "sm_two.tar.gz", **_INVOKE_JSON}, JSON_BODY),
    Step("GET", "/models/sm_one/invoke"),
    _load("x", f"{MODELS}/nowhere/model"),
    _load("oominit", f"{MODELS}/oominit/model"),
    _load("oominit", f"{MODELS}/oominit/model"),
    _load("oomexec", f"{MODELS}/oomexec/model"),
    Step("POST", "/models/oomexec/invoke", _INVOKE_JSON, _FP32_BODY),
    _load("ensemble333", f"{MODELS}/ensemble333/model", **{TARGET: "ensemble333"}),
    Step("POST", "/models/ensemble333/invoke", _INVOKE_JSON, _ENSEMBLE_BODY),
    Step("GET", "/models"),
    Step("DELETE", "/models/sm_one"),
    Step("DELETE", "/models/sm_one"),
    Step("POST", "/models/sm_one/invoke", _INVOKE_JSON, JSON_BODY),
    Step("DELETE", "/models/ensemble333", {TARGET: "ensemble333"}),
    Step("PUT", "/models/bbb222"),
    _load("sm_one", f"{MODELS}/aaa111/model"),
    Step("POST", "/models/sm_one/invoke", _INVOKE_JSON, JSON_BODY),
    Step("GET", "/models"),
    *(step for digest in _FAILING for step in (
        _load(digest, f"{MODELS}/{digest}/model", **{TARGET: FAILING}),
        Step("POST", "/invocations", _INVOKE_JSON, _FP32_BODY),
        Step("POST", f"/models/{digest}/invoke", {TARGET: FAILING, **_INVOKE_JSON}, _FP32_BODY),
        Step("POST", "/invocations", _INVOKE_JSON, b'{"inputs": []}'),
        Step("DELETE", f"/models/{digest}", {TARGET: FAILING}),
    )),
    Step("POST", "/models", _INVOKE_JSON, b"{not json"),  # the last: it ends tritonserver
)
# fmt: on

# Differences kept on purpose, by step: why.
KEPT: dict[str, str] = {
    str(STEPS[4]): "tritonserver lists a model loaded under another name (the target header's) "
    "as {}: it asks the readiness of the name in the path, not of the model; Thaw lists it",
    str(STEPS[-1]): "a load body that is not JSON ends tritonserver 2.51 (abort: "
    "std::out_of_range in SageMakerMMELoadModel); Thaw answers 400 with why",
}


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes

    def listing(self) -> object:
        """A list's or a get's JSON, rows in name order (Triton's order is its hash map's)."""
        try:
            found = json.loads(self.body)
        except ValueError:
            return None
        if isinstance(found, dict) and isinstance(found.get("models"), list):
            return sorted(found["models"], key=lambda row: json.dumps(row, sort_keys=True))
        return found if isinstance(found, dict) and "modelUrl" in found else None

    def __str__(self) -> str:
        return f"{self.status} [{self.content_type}] {self.body[:200]!r}"


def _ask(base: str, step: Step) -> Answer:
    """The server's answer to `step`; status 0 when it closed the connection instead."""
    try:
        response = requests.request(step.method, base + step.path, headers=step.headers,
                                    data=step.body, timeout=120)  # fmt: skip
    except requests.ConnectionError as exc:
        return Answer(0, "", f"no answer: {exc}".encode())
    return Answer(response.status_code, response.headers.get("Content-Type", ""),
                  response.content)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    peer = triton_peer()
    if peer is None:
        return 0
    if MODELS.exists() or MODELS.is_symlink():
        print(f"skipped: {MODELS} exists already", file=sys.stderr)
        return 0
    with tempfile.TemporaryDirectory(prefix="thaw-mme-side-") as tmp:
        work = Path(tmp)
        _downloads(work / "models")
        (work / "empty").mkdir()
        made_parent = not MODELS.parent.exists()
        MODELS.parent.mkdir(parents=True, exist_ok=True)
        MODELS.symlink_to(work / "models")
        try:
            answers = _run_both(peer, work)
        finally:
            MODELS.unlink()
            if made_parent:
                MODELS.parent.rmdir()
    unexpected = 0
    for step, theirs, ours in answers:
        same = theirs.status == ours.status and theirs.listing() == ours.listing()
        kept = KEPT.get(str(step))
        verdict = "same" if same else "kept" if kept else "DIFFERENT"
        unexpected += verdict == "DIFFERENT"
        print(f"{verdict:9} {step}\n    triton: {theirs}\n    thaw:   {ours}")
        if kept and not same:
            print(f"    kept: {kept}")
    same_count = sum(t.status == o.status and t.listing() == o.listing() for _, t, o in answers)
    print(f"SageMaker multi-model endpoint side by side with tritonserver 2.51: "
          f"{same_count}/{len(answers)} the same, {unexpected} unexpected differences")  # fmt: skip
    return 1 if unexpected else 0


def _run_both(peer: object, work: Path) -> list[tuple[Step, Answer, Answer]]:
    ports = {name: free_port() for name in ("t-http", "t-sm", "h-sm")}
    prefix = f"thaw_mme_side_{os.getpid()}_"
    server_dir, libs, venv = peer.server_dir, peer.libs, peer.venv  # type: ignore[attr-defined]
    triton = [
        str(server_dir / "bin" / "tritonserver"), f"--model-repository={work / 'empty'}",
        f"--backend-directory={server_dir / 'backends'}",
        f"--backend-config=python,shm-region-prefix-name={prefix}",
        "--http-address=127.0.0.1", f"--http-port={ports['t-http']}", "--allow-grpc=false",
        "--allow-metrics=false", "--model-control-mode=explicit", "--model-namespacing=true",
        "--allow-sagemaker=true", f"--sagemaker-port={ports['t-sm']}",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGEMAKER_")}
    env["SAGEMAKER_TRITON_PING_MODE"] = "live"
    env["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] = FAILING
    triton_env = {**env, "LD_LIBRARY_PATH": str(libs),
                  "PATH": f"{venv / 'bin'}:{env.get('PATH', '')}"}  # fmt: skip
    thaw = [
        sys.executable, "-m", "thaw.cli", "serve", str(work / "empty"), "--port=0",
        "--allow-grpc=false", "--allow-metrics=false", "--model-control-mode=explicit",
        "--model-namespacing=true", "--allow-sagemaker=true", f"--sagemaker-port={ports['h-sm']}",
    ]  # fmt: skip
    with (
        _running(triton, triton_env, work / "triton.log") as t,
        _running(thaw, env, work / "thaw.log") as h,
    ):
        wait_both(work, [(f"http://127.0.0.1:{ports['t-sm']}/ping", t),
                         (f"http://127.0.0.1:{ports['h-sm']}/ping", h)])  # fmt: skip
        triton_base = f"http://127.0.0.1:{ports['t-sm']}"
        thaw_base = f"http://127.0.0.1:{ports['h-sm']}"
        answers = [(step, _ask(triton_base, step), _ask(thaw_base, step)) for step in STEPS]
        if t.poll() is not None:
            print(f"--- triton.log (it exited {t.poll()})\n"
                  f"{(work / 'triton.log').read_text()[-3000:]}")  # fmt: skip
    for leftover in Path("/dev/shm").glob(f"{prefix}*"):
        leftover.unlink(missing_ok=True)
    return answers


if __name__ == "__main__":
    sys.exit(main())
