"""A tiny upstream "replica" app the activator proxies to in app tests.

`POST /v2/models/{model}/infer` records the path in `app[HITS]` and, by the `X-Behave`
header: echoes the body back in pieces with the headers it saw (`X-Seen`, JSON) by default;
`reset` aborts the connection; `die-mid-response` promises 10 MB and dies after 64 KiB;
`gzip` answers the body gzip-compressed; `slow` echoes it half a second late; `not-loaded`
answers a replica's refusal (404) of a model it does not have loaded
(thawwire.model_control.NOT_LOADED naming the path's model), `not-loaded-once` does so to the
first such request only, `not-loaded-other` names another model. `MODEL_CONFIG` is the
config.pbtxt of the models put in front of it. `POST /v2/repository/models/{model}/load` (the
load of an instance update) records the model in `app[LOADS]` and answers 200, or 400 with
`app[LOAD_REFUSAL]` as its error when that is set.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestServer

from thawwire.model_control import NOT_LOADED

__all__ = [
    "HITS",
    "LOADS",
    "LOAD_REFUSAL",
    "MODEL_CONFIG",
    "model_dir",
    "start_upstream",
    "upstream_infer",
]

HITS = web.AppKey("hits", list[str])
_NOT_LOADED_ONCE = web.AppKey("not_loaded_once", set[str])
LOADS = web.AppKey("loads", list[str])
LOAD_REFUSAL = web.AppKey("load_refusal", list[str])  # [the error text]: refuse loads

MODEL_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
parameters {{ key: "thaw.max_held_requests" value {{ string_value: "4" }} }}
"""


def model_dir(root: Path, name: str, *versions: int) -> Path:
    """A Python model `name` with MODEL_CONFIG and the given version directories, in `root`
    (what the activator reads; the fake upstream answers for it)."""
    for version in versions:
        (root / name / str(version)).mkdir(parents=True, exist_ok=True)
        (root / name / str(version) / "model.py").write_text("# a python model\n")
    (root / name / "config.pbtxt").write_text(MODEL_CONFIG.format(name=name))
    return root / name


async def upstream_infer(request: web.Request) -> web.StreamResponse:
    request.app[HITS].append(request.path)
    behave = request.headers.get("X-Behave", "")
    if behave == "reset":
        assert request.transport is not None
        request.transport.abort()
        return web.Response()
    body = await request.read()
    if behave == "slow":  # a request still in flight a moment from now
        await asyncio.sleep(0.5)
    model = request.match_info["model"]
    once = request.app[_NOT_LOADED_ONCE]
    if behave in ("not-loaded", "not-loaded-other") or (
        behave == "not-loaded-once" and model not in once
    ):
        once.add(model)
        named = "another" if behave == "not-loaded-other" else model
        return web.json_response(
            {"error": f"Request for unknown model: '{model}' has no available versions"},
            status=404,
            headers={NOT_LOADED: named},
        )
    if behave == "die-mid-response":
        resp = web.StreamResponse(headers={"Content-Length": str(10_000_000)})
        await resp.prepare(request)
        await resp.write(b"x" * 65536)
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()
        return resp
    if behave == "gzip":
        return web.Response(body=gzip.compress(body), headers={"Content-Encoding": "gzip"})
    seen = {k.lower(): v for k, v in request.headers.items()}
    resp = web.StreamResponse(headers={"X-Seen": json.dumps(seen), "Keep-Alive": "timeout=5"})
    resp.content_type = "application/octet-stream"
    await resp.prepare(request)
    for i in range(0, len(body), 100_000):  # stream the echo back in pieces
        await resp.write(body[i : i + 100_000])
    await resp.write_eof()
    return resp


async def upstream_load(request: web.Request) -> web.Response:
    model = request.match_info["model"]
    request.app[LOADS].append(model)
    refusal = request.app[LOAD_REFUSAL]
    if refusal:
        return web.json_response({"error": refusal[0]}, status=400)
    return web.json_response({})


async def start_upstream(*, client_max_size: int = 1024**2) -> TestServer:
    """The upstream app, listening on 127.0.0.1 (close it with `await server.close()`)."""
    app = web.Application(client_max_size=client_max_size)
    app[HITS] = []
    app[_NOT_LOADED_ONCE] = set()
    app[LOADS] = []
    app[LOAD_REFUSAL] = []
    app.router.add_post("/v2/models/{model}/infer", upstream_infer)
    app.router.add_post("/v2/repository/models/{model}/load", upstream_load)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server
