"""Vertex AI's and SageMaker's ports of `thaw serve` side by side with real tritonserver 2.51
(nvidia-pytriton's build, benchmarks/peers.py `TritonPeer`): the same requests to both, on the
same add_sub model, their statuses compared; a status that differs and is not a kept
difference fails the run.

    .venv/bin/python -m tests.conformance.triton_cloud_ports_side_by_side

Both servers listen on free ports of 127.0.0.1. Without Triton installed (no `.bench/
tritonserver`, no PyPI to install it from), the run says so and exits 0. Each row prints both
answers (status, Content-Type, the start of the body); docs/vertex-ai.md and docs/sagemaker.md
say what was found.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from tests.fixtures.cloud_ports import add_sub_int32, infer_body
from tests.fixtures.serve_process import free_port

__all__ = ["CASES", "KEPT", "main", "triton_peer", "wait_both"]

VERTEX_MIME = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
SAGEMAKER_MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="
REDIRECT = "X-Vertex-Ai-Triton-Redirect"
ENV = {"AIP_PREDICT_ROUTE": "/predict", "AIP_HEALTH_ROUTE": "/health",
       "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "addsub"}  # fmt: skip


def _body(*, binary_in: bool = False, binary_out: bool = False) -> tuple[bytes, int]:
    content, length = infer_body(binary_inputs=binary_in, binary_outputs=binary_out)
    return content, length or len(content)


JSON, _ = _body()
BINARY, JSON_LENGTH = _body(binary_in=True)
BINARY_OUT, _ = _body(binary_out=True)


@dataclass(frozen=True)
class Case:
    port: str  # "vertex" or "sagemaker"
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None

    def __str__(self) -> str:
        return f"{self.port}: {self.method} {self.path} {self.headers or ''}".rstrip()


def _redirect(endpoint: str, body: bytes | None = None, method: str = "POST") -> Case:
    return Case("vertex", method, "/predict", {REDIRECT: endpoint}, body)


CASES: tuple[Case, ...] = (
    Case("vertex", "GET", "/health"),
    Case("vertex", "HEAD", "/health"),
    Case("vertex", "POST", "/health"),
    Case("vertex", "POST", "/predict", body=JSON),
    Case("vertex", "GET", "/predict"),
    Case("vertex", "POST", "/predict", {"Content-Type": f"{VERTEX_MIME}{JSON_LENGTH}"}, BINARY),
    Case("vertex", "POST", "/predict", {"Content-Type": f"x/{VERTEX_MIME}{JSON_LENGTH}"}, BINARY),
    Case("vertex", "POST", "/predict", {"Content-Type": f"{VERTEX_MIME}-1"}, BINARY),
    Case("vertex", "POST", "/predict", {"Content-Type": f"{VERTEX_MIME}99999"}, BINARY),
    Case("vertex", "POST", "/predict", {"Content-Type": f"{VERTEX_MIME}abc"}, BINARY),
    Case(
        "vertex", "POST", "/predict", {"Inference-Header-Content-Length": str(JSON_LENGTH)}, BINARY
    ),
    Case("vertex", "POST", "/predict", body=BINARY_OUT),
    Case("vertex", "POST", "/other"),
    _redirect("v2"),
    _redirect("v2", method="GET"),
    _redirect("/v2"),
    _redirect(""),
    _redirect("v2/logging"),
    _redirect("v2/trace/setting"),
    _redirect("v2/models/addsub/generate", b'{"INPUT0": [1]}'),
    _redirect("v2/models/addsub/trace/setting"),
    _redirect("v2/health/ready"),
    _redirect("v2/models/addsub/ready"),
    _redirect("v2/models/nobody/ready"),
    _redirect("v2/models/addsub/config"),
    _redirect("v2/models/stats"),
    _redirect("v2/models/addsub/versions/1/infer", JSON),
    _redirect("v2/repository/index"),
    _redirect("v2/repository/models/addsub/unload"),
    _redirect("v2/systemsharedmemory/status"),
    _redirect("v2/cudasharedmemory/status"),
    _redirect("metrics"),
    Case("sagemaker", "GET", "/ping"),
    Case("sagemaker", "HEAD", "/ping"),
    Case("sagemaker", "POST", "/ping"),
    Case("sagemaker", "POST", "/invocations", body=JSON),
    Case("sagemaker", "GET", "/invocations"),
    Case(
        "sagemaker",
        "POST",
        "/invocations",
        {"Content-Type": f"{SAGEMAKER_MIME}{JSON_LENGTH}"},
        BINARY,
    ),
    Case("sagemaker", "POST", "/invocations", body=BINARY_OUT),
    Case("sagemaker", "POST", "/invocations", {"Accept-Encoding": "gzip"}, BINARY_OUT),
    Case("sagemaker", "POST", "/invocations", {"Content-Type": f"{SAGEMAKER_MIME}-1"}, BINARY),
    Case("sagemaker", "POST", "/invocations", {"Content-Type": f"x/{SAGEMAKER_MIME}4"}, BINARY),
    Case(
        "sagemaker",
        "POST",
        "/invocations",
        {"Inference-Header-Content-Length": str(JSON_LENGTH)},
        BINARY,
    ),
    Case("sagemaker", "GET", "/models"),
    Case("sagemaker", "GET", "/v2/health/ready"),
    Case("sagemaker", "POST", "/other"),
)

# Differences kept on purpose, by case: why.
KEPT: dict[str, str] = {
    str(Case("vertex", "HEAD", "/health")): "HEAD on a GET route answers as GET (RFC 9110; "
    "docs/triton-http-parity.md, as on the v2 port)",
    str(Case("sagemaker", "HEAD", "/ping")): "the same",
    str(_redirect("v2/models/nobody/ready")): "a model not served is 404 'unknown model' "
    "(DESIGN.md; as on the v2 port), Triton's 400 'Model version not ready'",
}


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    header_length: str
    body: bytes

    def __str__(self) -> str:
        length = f" IHCL={self.header_length}" if self.header_length else ""
        return f"{self.status} [{self.content_type}]{length} {self.body[:160]!r}"


def _ask(base: dict[str, str], case: Case) -> Answer:
    response = requests.request(case.method, base[case.port] + case.path, headers=case.headers,
                                data=case.body, timeout=30)  # fmt: skip
    return Answer(
        response.status_code,
        response.headers.get("Content-Type", ""),
        response.headers.get("Inference-Header-Content-Length", ""),
        response.content,
    )


def _wait(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if requests.get(url, timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{url} never answered 200 (exit {proc.poll()})")


def wait_both(work: Path, urls: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
    """Wait until each URL answers 200 (its server still running); else SystemExit, after
    printing the end of `work`'s triton.log and thaw.log."""
    try:
        for url, proc in urls:
            _wait(url, proc)
    except RuntimeError as exc:
        for name in ("triton.log", "thaw.log"):
            print(f"--- {name}\n{(work / name).read_text()[-3000:]}")
        raise SystemExit(f"a server did not start: {exc}") from None


@contextmanager
def _running(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def triton_peer() -> Any:
    """Real tritonserver 2.51, installed (benchmarks.peers.TritonPeer); None, said on stderr,
    where it cannot be (the run is then skipped)."""
    from benchmarks.peers import PeerError, TritonPeer

    peer = TritonPeer()
    try:
        peer.prepare()
    except PeerError as exc:
        print(f"skipped: Triton is not installed here ({exc})", file=sys.stderr)
        return None
    return peer


def main(argv: list[str] | None = None) -> int:
    peer = triton_peer()
    if peer is None:
        return 0
    with tempfile.TemporaryDirectory(prefix="thaw-cloud-side-") as tmp:
        work = Path(tmp)
        add_sub_int32(work / "repo", "addsub")
        ports = {name: free_port() for name in ("t-http", "t-m", "t-vx", "t-sm", "h-vx", "h-sm")}
        prefix = f"thaw_cloud_side_{os.getpid()}_"
        triton = [
            str(peer.server_dir / "bin" / "tritonserver"), f"--model-repository={work / 'repo'}",
            f"--backend-directory={peer.server_dir / 'backends'}",
            f"--backend-config=python,shm-region-prefix-name={prefix}",
            "--http-address=127.0.0.1", f"--http-port={ports['t-http']}", "--allow-grpc=false",
            "--metrics-address=127.0.0.1", f"--metrics-port={ports['t-m']}",
            "--allow-vertex-ai=true", f"--vertex-ai-port={ports['t-vx']}",
            "--allow-sagemaker=true", f"--sagemaker-port={ports['t-sm']}",
        ]  # fmt: skip
        triton_env = {**os.environ, **ENV, "LD_LIBRARY_PATH": str(peer.libs),
                      "PATH": f"{peer.venv / 'bin'}:{os.environ.get('PATH', '')}"}  # fmt: skip
        thaw = [
            sys.executable, "-m", "thaw.cli", "serve", str(work / "repo"), "--port=0",
            "--allow-grpc=false", "--metrics-port=0", "--allow-vertex-ai=true",
            f"--vertex-ai-port={ports['h-vx']}", "--allow-sagemaker=true",
            f"--sagemaker-port={ports['h-sm']}",
        ]  # fmt: skip
        thaw_env = {**os.environ, **ENV}
        with (
            _running(triton, triton_env, work / "triton.log") as t,
            _running(thaw, thaw_env, work / "thaw.log") as h,
        ):
            base = "http://127.0.0.1:{}"
            wait_both(work, [(base.format(ports["t-vx"]) + "/health", t),
                             (base.format(ports["h-vx"]) + "/health", h),
                             (base.format(ports["t-sm"]) + "/ping", t),
                             (base.format(ports["h-sm"]) + "/ping", h)])  # fmt: skip
            bases = {
                "triton": {"vertex": f"http://127.0.0.1:{ports['t-vx']}",
                           "sagemaker": f"http://127.0.0.1:{ports['t-sm']}"},
                "thaw": {"vertex": f"http://127.0.0.1:{ports['h-vx']}",
                         "sagemaker": f"http://127.0.0.1:{ports['h-sm']}"},
            }  # fmt: skip
            answers = [(case, _ask(bases["triton"], case), _ask(bases["thaw"], case))
                       for case in CASES]  # fmt: skip
        for leftover in Path("/dev/shm").glob(f"{prefix}*"):
            leftover.unlink(missing_ok=True)
    unexpected = 0
    for case, theirs, ours in answers:
        same = theirs.status == ours.status
        kept = KEPT.get(str(case))
        verdict = "same" if same else "kept" if kept else "DIFFERENT"
        unexpected += verdict == "DIFFERENT"
        print(f"{verdict:9} {case}\n    triton: {theirs}\n    thaw:   {ours}")
        if kept and not same:
            print(f"    kept: {kept}")
    same_count = sum(t.status == o.status for _, t, o in answers)
    print(f"cloud ports side by side with tritonserver 2.51: {same_count}/{len(answers)} same "
          f"status, {unexpected} unexpected differences")  # fmt: skip
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
