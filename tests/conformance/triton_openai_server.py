"""Thaw's stand-in for Triton's `python/openai/tests/utils.py`: its names over a real `thaw serve`.

Triton's tests import `from tests.utils import OpenAIServer, setup_server, setup_fastapi_app`;
the harness (triton_openai_harness.py) registers this module under that name. Triton's versions
start its OpenAI frontend (`openai_frontend/main.py`, or an in-process `tritonserver` behind its
FastAPI app); these start `thaw serve` with the same flags:

    OpenAIServer(cli_args)      a `thaw serve` process; .url_root / .url_for(...) /
                                .get_client() / .get_async_client(); raises RuntimeError with the
                                server's stderr when it exits before it is ready (Triton's text)
    setup_server(repo, ...)     a `thaw serve` of `repo` (mode and startup models as tritonserver
                                takes them); .stop()
    setup_fastapi_app(...)      an ASGI app that forwards every request to that server over HTTP,
                                so `fastapi.testclient.TestClient(app)` talks to the real server
                                (the tool-calling options restart it with those flags)

Not a test module of this project: tests/conformance/triton_openai.py copies it beside Triton's
unchanged test files.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx2
import openai

__all__ = ["OpenAIServer", "setup_fastapi_app", "setup_server"]

_LISTENING = "THAW_LISTENING "
# The frontend's own flags (tritonserver has none of them): Thaw reads each model's request
# format from its config and its chat template from its files, so their values are dropped.
_FRONTEND_VALUE_FLAGS = ("--backend", "--tokenizer")


def thaw_args(cli_args: list[str]) -> list[str]:
    """Triton's frontend's command line as `thaw serve`'s: tritonserver's flags as they are,
    `--openai-port` as `--port`, the frontend-only flags dropped (a free port when none)."""
    out: list[str] = []
    port = "0"
    it = iter(cli_args)
    for arg in it:
        flag, eq, value = arg.partition("=")
        if flag in _FRONTEND_VALUE_FLAGS:
            if not eq:
                next(it, None)
        elif flag == "--openai-port":
            port = value if eq else next(it, "0")
        else:
            out.append(arg)
    return [*out, "--port", port]


class OpenAIServer:
    """Triton's test class over `thaw serve`: started on construction, stopped on exit."""

    API_KEY = "EMPTY"
    START_TIMEOUT = 240

    def __init__(self, cli_args: list[str], *, env_dict: dict[str, str] | None = None) -> None:
        self.host = "127.0.0.1"
        self._cli_args = list(cli_args)
        self._env = {**os.environ, **(env_dict or {})}
        self._start()

    def restart(self, more_args: list[str]) -> None:
        """Stopped, then started again with `more_args` added (the frontend options that
        Triton gives its FastAPI app after its server started are `thaw serve` flags)."""
        self.stop()
        self._cli_args += more_args
        self._start()

    def _start(self) -> None:
        self.port = 0
        self.stderr_lines: list[str] = []
        self._listening = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "thaw.cli", "serve", *thaw_args(self._cli_args)],
            env=self._env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        try:
            self._wait_for_server(timeout=self.START_TIMEOUT)
        except BaseException:
            self.stop()
            raise

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(_LISTENING) and not self._listening.is_set():
                self.port = int(line[len(_LISTENING) :].strip().rpartition(":")[2])
                self._listening.set()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line.rstrip("\n\r"))
            sys.stderr.write(line)

    def _failed(self, why: str) -> RuntimeError:
        for reader in self._readers:
            reader.join(5)  # the process has exited (or is stopped): its stderr ends
        text = "\n".join(self.stderr_lines) or "No stderr output"
        error = RuntimeError(f"{why}.\nStderr output:\n{text}")
        error.stderr_lines = list(self.stderr_lines)  # type: ignore[attr-defined]
        return error

    def _wait_for_server(self, *, timeout: float) -> None:
        """Until `/health/ready` answers 200 (Triton's check), or the server exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                raise self._failed(f"Server exited unexpectedly with return code {rc}")
            if self._listening.is_set():
                try:
                    with urllib.request.urlopen(self.url_for("health", "ready"), timeout=5) as r:
                        if r.status == 200:
                            return
                except (urllib.error.URLError, OSError):
                    pass
            time.sleep(0.1)
        self.stop()
        raise self._failed("Server failed to start in time")

    def __enter__(self) -> OpenAIServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    @property
    def url_root(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url_for(self, *parts: str) -> str:
        return self.url_root + "/" + "/".join(parts)

    def get_client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url_for("v1"), api_key=self.API_KEY)

    def get_async_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.url_for("v1"), api_key=self.API_KEY)


def setup_server(
    model_repository: str,
    model_control_mode: object = None,
    load_models: list[str] | None = None,
) -> OpenAIServer:
    """A `thaw serve` of `model_repository`, as Triton's starts an in-process tritonserver
    (`model_control_mode`: "none"/"explicit", or anything whose `.name` is one)."""
    args = ["--model-repository", model_repository]
    if model_control_mode is not None:
        mode = str(getattr(model_control_mode, "name", model_control_mode)).lower()
        args += ["--model-control-mode", mode]
    for name in load_models or []:
        args += ["--load-model", name]
    return OpenAIServer(args)


# The frontend's options (setup_fastapi_app's keywords) that are `thaw serve` flags.
_SERVE_OPTIONS = {
    "tool_call_parser": "--tool-call-parser",
    "max_tool_call_parse_bytes": "--max-tool-call-parse-bytes",
}
# Hop-by-hop headers, and the framing the forwarded body gets anew.
_NOT_FORWARDED = (b"host", b"connection", b"keep-alive", b"transfer-encoding", b"content-length")
_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def setup_fastapi_app(
    tokenizer: str, server: OpenAIServer, backend: str | None, **_frontend: object
) -> Callable[[_Scope, _Receive, _Send], Awaitable[None]]:
    """An ASGI app that forwards each HTTP request to `server`, as it came, and its answer
    back, as it comes (`tokenizer`, `backend` and the frontend's other options are the
    frontend's own: Thaw reads them from each model; its tool-calling options are `thaw serve`
    flags, so the server is restarted with them)."""
    flags = [
        arg
        for option, flag in _SERVE_OPTIONS.items()
        if _frontend.get(option) is not None
        for arg in (flag, str(_frontend[option]))
    ]
    if flags:
        server.restart(flags)

    async def app(scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["raw_path"].decode() if scope.get("raw_path") else scope["path"]
        query = scope.get("query_string", b"").decode()
        url = server.url_root + path + (f"?{query}" if query else "")
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _NOT_FORWARDED]
        async with httpx2.AsyncClient(timeout=120) as client:
            request = client.build_request(scope["method"], url, headers=headers, content=body)
            response = await client.send(request, stream=True)
            try:
                await send(
                    {
                        "type": "http.response.start",
                        "status": response.status_code,
                        "headers": [
                            (k, v)
                            for k, v in response.headers.raw
                            if k.lower() not in _NOT_FORWARDED
                        ],
                    }
                )
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            finally:
                await response.aclose()

    return app
