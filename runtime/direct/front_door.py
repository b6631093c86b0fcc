"""The one way back from a replica to `thaw up`'s front door: forwarded requests, BLS calls
to other models, ensemble steps.

Under `thaw up` a replica serves one model, and three things go back to the activator, built
once from ServeConfig (`FrontDoor.from_config`) and closed with the app:

- `forward`: a request on a connection the activator handed to this replica
  (runtime.direct.routing) that this replica cannot answer as the platform would (server
  paths, other models, statistics, the repository API, a client's shared memory) is sent to
  `--front-door` and its answer streamed to the client; hop-by-hop headers (RFC 9110 7.6.1,
  plus any named in `Connection`) are stripped both ways; 502 JSON when it does not answer.
- `infer` / `stream`: a Python model's BLS call to a model this replica does not serve
  (runtime.python.server_host) goes to `--front-door`'s `/v2/models/{m}/infer`, which holds it
  while that model wakes from zero; `exec(decoupled=True)` goes to `--front-door-grpc`, one
  `ModelStreamInfer` call per request asking for Triton's empty final response so the end of
  a decoupled model's stream is seen. Without a gRPC front door a stream is one HTTP infer,
  which a decoupled model refuses: that refusal says what is missing.
- `steps`: an ensemble's steps (runtime.scheduling.ensemble_scheduler) run on the models
  behind `--ensemble-steps-url`; a step that gets no answer fails with 502.
- `load` / `unload` / `model_ready`: a Python model's model loading API (`pb_utils.load_model`,
  `unload_model`, `is_model_ready`) asks the platform, as Triton's asks its server: the model
  is loaded for every client, on replicas of its own, not inside this replica. Marked sent
  back, as a forwarded request is: a load or unload that replaces or stops this very replica
  (a model reloading itself) returns without waiting for this replica's stop, which waits for
  the call.

BLS calls and steps carry the deployment's token (`--internal-token-file`,
thawwire.internal_calls), so their bodies pass the front door up to `--max-internal-body-bytes`
rather than the client cap; a BLS stream whose message is over the gRPC front door's limit
(the client cap) goes as one HTTP infer. Forwarded requests are the client's and never carry it.

Connections: forwarded requests and ensemble steps each take a fresh connection, so the front
door sees their request line first and routes each on its own merits (a pooled connection that
the front door had handed to another replica would carry them there); BLS calls keep a pool.
Model-control calls keep one connection of their own (marked sent back, it is never handed
off): `is_model_ready` costs no connection set-up, and on Kubernetes a load and the readiness
asked after it are answered by the same activator (the Service balances connections), not one
that has yet to read the load state. Infer bodies and error answers are runtime.direct.infer_wire's.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
import grpc
import yarl
from aiohttp import web
from google.protobuf.message import DecodeError
from multidict import CIMultiDict, CIMultiDictProxy

from runtime.config import ServeConfig
from runtime.direct import infer_wire
from runtime.errors import InvalidInput, ModelUnavailable, ServingError
from runtime.inference import InferRequest, InferResponse
from thawserver.json_response import json_response
from thawwire.grpc_service import Method, method_path
from thawwire.hop_by_hop import HOP_BY_HOP, connection_tokens
from thawwire.internal_calls import HEADER as INTERNAL_HEADER
from thawwire.internal_calls import InternalCalls
from thawwire.load_overrides import rest_parameters
from thawwire.paths import SENT_BACK_QUERY

__all__ = ["DECOUPLED_REFUSAL", "FrontDoor", "FrontDoorSteps"]

logger = logging.getLogger(__name__)

# Past the server's own exit timeout: a call the front door holds while a model wakes from
# zero (a cold start) must not time out first.
_TIMEOUT_PAST_EXIT_S = 300
# Never forwarded: hop-by-hop headers, Host (it names this replica) and the length (set again
# from the body actually sent).
_NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length"}
_CHUNK = 256 * 1024
# How long a model-control connection is kept idle: below the front door's idle timeout (75 s
# by default), so this side closes it first and a call seldom meets it closing.
_CONTROL_KEEPALIVE_S = 10.0
_STREAM = method_path(Method.MODEL_STREAM_INFER)
# In what an HTTP front answers for plain inference on a decoupled model (Triton's words,
# runtime.models.manager.DECOUPLED_INFER): this replica's BLS reads it too.
DECOUPLED_REFUSAL = "decoupled transaction policy"


def _end_to_end(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    drop = _NOT_FORWARDED | connection_tokens(headers.getall("Connection", []))
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in drop)


async def _post_infer(
    session: aiohttp.ClientSession,
    url: str,
    request: InferRequest,
    client_timeout: aiohttp.ClientTimeout,
    unexplained: Callable[[int], str],
    token: str | None,
) -> tuple[bytes, int | None]:
    """POST `request` to the infer route under `url`, with the deployment's `token` when it
    has one (the platform's own call: thawwire.internal_calls): the answer's bytes and its
    JSON header's length (binary data follows it); a non-200 answer raises the ServingError
    of its status, with the answer's message or `unexplained(status)`."""
    body, header_length = infer_wire.encode_request(request)
    async with session.post(
        url + infer_wire.infer_path(request),
        data=body,
        headers=_infer_headers(header_length, token),
        timeout=client_timeout,
    ) as response:
        payload = await response.read()
        if response.status != 200:
            message = infer_wire.message_of(payload)
            raise infer_wire.error_of_status(
                response.status, message or unexplained(response.status), response.headers
            )
        length = response.headers.get(infer_wire.HEADER_LENGTH)
    if length is not None and not length.isdigit():
        raise ServingError(f"{infer_wire.HEADER_LENGTH} of the answer is not a length: {length!r}")
    return payload, int(length) if length else None


def _infer_headers(header_length: int, token: str | None) -> dict[str, str]:
    headers = {
        "Content-Type": "application/octet-stream",
        infer_wire.HEADER_LENGTH: str(header_length),
        "Accept-Encoding": "identity",  # the answer's tensors are read as they are
    }
    if token is not None:
        headers[INTERNAL_HEADER] = token
    return headers


class FrontDoor:
    """A replica's client of the front door: `url` (`--front-door`: forwarded requests and
    BLS calls), `grpc_address` (HOST:PORT, `--front-door-grpc`: BLS streams) and `steps_url`
    (`--ensemble-steps-url`: ensemble steps); each use needs its address. With the
    deployment's `internal` token, BLS calls and steps carry it, so a body over the front
    door's client cap `public_limit` (`--max-body-bytes`) passes up to the internal cap; a
    BLS stream whose message is over `public_limit` goes as one HTTP infer (the gRPC front
    door's message limit is the client cap)."""

    def __init__(
        self,
        *,
        url: str | None,
        timeout_s: float,
        grpc_address: str | None = None,
        steps_url: str | None = None,
        internal: InternalCalls | None = None,
        public_limit: int | None = None,
    ) -> None:
        self.url = url.rstrip("/") if url is not None else None
        self._token = internal.token if internal is not None else None
        self._public_limit = public_limit
        self.grpc_address = grpc_address
        self.steps_url = steps_url.rstrip("/") if steps_url is not None else None
        self._timeout_s = timeout_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._fresh: aiohttp.ClientSession | None = None  # a new connection per request
        self._pooled: aiohttp.ClientSession | None = None
        self._kept: aiohttp.ClientSession | None = None  # model control, kept alive
        self._channel: grpc.aio.Channel | None = None

    @classmethod
    def from_config(cls, config: ServeConfig) -> FrontDoor | None:
        """The front door `thaw up` gave this replica, None when it gave none."""
        if config.front_door is None and config.ensemble_steps_url is None:
            return None
        return cls(
            url=config.front_door,
            timeout_s=config.exit_timeout_s + _TIMEOUT_PAST_EXIT_S,
            grpc_address=config.front_door_grpc,
            steps_url=config.ensemble_steps_url,
            internal=config.internal_calls,
            public_limit=config.max_body_bytes,
        )

    @property
    def takes_bls(self) -> bool:
        """Whether BLS calls to models this replica does not serve go here."""
        return self.url is not None

    @property
    def steps(self) -> FrontDoorSteps | None:
        """The StepRunner of ensemble steps on the models behind `steps_url`, if given."""
        return FrontDoorSteps(self) if self.steps_url is not None else None

    def _fresh_session(self) -> aiohttp.ClientSession:
        if self._fresh is None:
            self._fresh = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True, limit=0),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._fresh

    def _control_session(self) -> aiohttp.ClientSession:
        if self._kept is None:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=_CONTROL_KEEPALIVE_S)
            self._kept = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar()
            )
        return self._kept

    def _pooled_session(self) -> aiohttp.ClientSession:
        if self._pooled is None:
            self._pooled = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
        return self._pooled

    def _address(self, url: str | None, use: str) -> str:
        if url is None:
            raise ServingError(f"this replica was given no front door for {use}")
        return url

    # -- requests on handed-off connections ---------------------------------------------------

    async def forward(
        self, request: web.BaseRequest, *, close: bool, body: bytes | None = None
    ) -> web.StreamResponse:
        """The front door's answer to `request`, streamed to its client; `close` ends the
        client connection after it. `body`: the request's body, when a handler read it
        already (runtime.direct.send_back).

        Every request is marked sent back (thawwire.paths.SENT_BACK_QUERY). The front door
        serves a marked model request itself (it hands off only model paths): a request this
        replica cannot answer (another model's, or its own model's after an unload behind the
        activator's back) handed to a replica again could come straight back here, and each
        new connection of that loop would be handed off in turn. And an unload marked so does
        not wait for its model's drain, which may be waiting for this very connection."""
        url = self._address(self.url, "forwarded requests")
        headers = _end_to_end(request.headers)
        data: Any = None
        if body is not None:
            headers["Content-Length"] = str(len(body))
            data = body
        elif request.body_exists:
            if request.content_length is not None:
                headers["Content-Length"] = str(request.content_length)
            data = request.content.iter_chunked(_CHUNK)
        try:
            target = request.raw_path
            target += ("&" if "?" in target else "?") + SENT_BACK_QUERY
            upstream = await self._fresh_session().request(
                request.method,
                url + target,
                headers=headers,
                data=data,
                allow_redirects=False,
                timeout=self._timeout,
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Content-Type"),
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            logger.warning("front door request %s failed: %r", request.path[:200], exc)
            error = json_response({"error": f"the front door did not answer: {exc!r}"}, 502)
            error.force_close()
            return error
        try:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            response.headers.update(_end_to_end(upstream.headers))
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            if close:
                response.force_close()
            await response.prepare(request)
            async for chunk in upstream.content.iter_chunked(_CHUNK):
                await response.write(chunk)
            await response.write_eof()
            return response
        except (aiohttp.ClientError, TimeoutError) as exc:
            # Headers are out: the only honest signal left is to cut the connection.
            logger.warning("front door answer to %s broke off: %r", request.path[:200], exc)
            if request.transport is not None:
                request.transport.close()
            return response
        finally:
            upstream.release()

    # -- BLS ------------------------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResponse:
        """The front door's answer to a BLS request; its error as the ServingError of its
        status, ModelUnavailable when it does not answer."""
        url = self._address(self.url, "BLS calls")
        try:
            payload, length = await _post_infer(
                self._pooled_session(),
                url,
                request,
                self._timeout,
                lambda status: f"HTTP {status}",
                self._token,
            )
            return infer_wire.decode_response(payload, length, request.model_name)
        except (aiohttp.ClientError, TimeoutError) as exc:
            logger.warning(
                "model=%s BLS through the front door failed: %r", request.model_name, exc
            )
            raise ModelUnavailable(f"the front door did not answer a BLS request: {exc!r}") from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise ServingError(f"the front door's BLS answer could not be read: {exc}") from exc

    async def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        """Every response of a BLS request (a decoupled model's stream; one of any other),
        through the gRPC front door; over HTTP (one response) without one, and for a message
        over the gRPC front door's limit (the client cap) when this replica has the
        deployment's token (thawwire.internal_calls)."""
        message = infer_wire.stream_request(request) if self.grpc_address is not None else b""
        too_big = self._public_limit is not None and len(message) > self._public_limit
        if self.grpc_address is None or (too_big and self._token is not None):
            try:
                yield await self.infer(request)
            except InvalidInput as exc:
                if DECOUPLED_REFUSAL not in exc.message:
                    raise
                if self.grpc_address is not None:
                    raise InvalidInput(
                        f"model '{request.model_name}' is decoupled and served by another "
                        f"replica: a BLS stream to it goes through thaw up's gRPC front door, "
                        f"whose message limit is --max-body-bytes ({self._public_limit} "
                        f"bytes); this request is {len(message)} bytes"
                    ) from None
                raise InvalidInput(
                    f"model '{request.model_name}' is decoupled and served by another replica: "
                    "a BLS stream to it needs thaw up's gRPC front door (this replica was "
                    f"given none: thaw up runs with gRPC off or on port 0): {exc.message}"
                ) from None
            return
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(
                self.grpc_address,
                options=[
                    ("grpc.max_receive_message_length", -1),
                    ("grpc.max_send_message_length", -1),
                ],
            )
        call: Any = self._channel.stream_stream(_STREAM)(timeout=self._timeout_s)
        try:
            await call.write(message)
            await call.done_writing()
            while True:
                data = await call.read()
                if data is grpc.aio.EOF:
                    return
                response = infer_wire.stream_response(data, request.model_name)
                yield response
                if response.final:
                    return
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            logger.warning(
                "model=%s BLS stream through the front door failed: %s %s",
                request.model_name, code, exc.details(),
            )  # fmt: skip
            raise infer_wire.error_of_grpc(code, exc.details()) from None
        except (DecodeError, ValueError, TypeError) as exc:
            raise ServingError(
                f"the front door's BLS stream answer could not be read: {exc}"
            ) from exc
        finally:
            call.cancel()

    # -- the model loading API ----------------------------------------------------------------

    async def load(self, name: str, config: str | None, files: Mapping[str, bytes] | None) -> None:
        """Load `name` on the platform (`POST /v2/repository/models/{name}/load`), with the
        `config` override (JSON text) and override `files` (`<version>/<path>` -> bytes) when
        given; returns once the front door answered (Triton's load waits for the model to be
        ready). Its refusal is the ServingError of its answer, in its words."""
        params = rest_parameters(config, files)
        _raise_refusal(
            await self._control("POST", f"/v2/repository/models/{_segment(name)}/load", params)
        )

    async def unload(self, name: str, *, unload_dependents: bool = False) -> None:
        """Unload `name` on the platform; returns once the front door refuses new requests to
        it (its drain runs on: the call is marked sent back)."""
        params = {"unload_dependents": True} if unload_dependents else {}
        _raise_refusal(
            await self._control("POST", f"/v2/repository/models/{_segment(name)}/unload", params)
        )

    async def model_ready(self, name: str, version: str | None) -> bool:
        """Whether the platform serves `name` (at `version`): its front door's readiness, at
        zero replicas too. A refusal (unknown, not loaded, a failed wake-up) is False; a front
        door that does not answer is ModelUnavailable."""
        path = f"/v2/models/{_segment(name)}"
        if version:
            path += f"/versions/{_segment(version)}"
        status, _ = await self._control("GET", path + "/ready", None)
        return status == 200

    async def _control(
        self, method: str, path: str, params: dict[str, Any] | None
    ) -> tuple[int, bytes]:
        """The front door's (status, body) for a model-control call, on the kept connection,
        with the deployment's token (a load's files pass up to the internal body cap) and
        marked sent back; ModelUnavailable when the front door does not answer. A readiness
        check (GET) that meets the kept connection closed goes once more, on a new connection
        (aiohttp 3.10 on resends an idempotent request so by itself); a load or unload is
        not sent twice."""
        url = self._address(self.url, "model control")
        target = yarl.URL(f"{url}{path}?{SENT_BACK_QUERY}", encoded=True)  # the segment as is
        headers = {INTERNAL_HEADER: self._token} if self._token is not None else {}
        body = None if params is None else {"parameters": params}
        resend = method == "GET"
        while True:
            try:
                async with self._control_session().request(
                    method, target, json=body, headers=headers, timeout=self._timeout
                ) as response:
                    return response.status, await response.read()
            except aiohttp.ServerDisconnectedError as exc:
                if resend:
                    resend = False
                    continue
                error: Exception = exc
            except (aiohttp.ClientError, TimeoutError) as exc:
                error = exc
            logger.warning("%s %s through the front door failed: %r", method, path[:200], error)
            raise ModelUnavailable(
                f"the front door did not answer a model-control call: {error!r}"
            ) from error

    # -- ensemble steps -------------------------------------------------------------------

    async def run_step(self, request: InferRequest) -> InferResponse:
        """The answer of the model behind `steps_url` to an ensemble step; its error with the
        status it answered, 502 when it did not answer."""
        url = self._address(self.steps_url, "ensemble steps")
        model = request.model_name
        try:
            payload, length = await _post_infer(
                self._fresh_session(),
                url,
                request,
                self._timeout,
                lambda status: f"model '{model}' answered {status}",
                self._token,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            logger.warning("model=%s remote step failed: %r", model, exc)
            error = ServingError(f"model '{model}' did not answer: {exc!r}")
            error.status = 502
            raise error from exc
        try:
            response = infer_wire.decode_response(payload, length, model)
        except (ValueError, KeyError, TypeError) as exc:
            raise ServingError(f"model '{model}' answered unreadable JSON") from exc
        response.model_name = model
        return response

    async def close(self) -> None:
        """Close every connection to the front door (after the last call)."""
        for session in (self._fresh, self._pooled, self._kept):
            if session is not None:
                await session.close()
        if self._channel is not None:
            await self._channel.close()


def _raise_refusal(answer: tuple[int, bytes]) -> None:
    """A model-control answer other than 200 as the ServingError of its status, in its words."""
    status, payload = answer
    if status != 200:
        raise infer_wire.error_of_status(status, infer_wire.message_of(payload) or f"HTTP {status}")


def _segment(text: str) -> str:
    """`text` as one path segment (a model name may hold any character but NUL)."""
    return quote(text, safe="")


class FrontDoorSteps:
    """The StepRunner (runtime.scheduling.ensemble_scheduler) of ensemble steps run on the
    models behind the front door's `steps_url`."""

    def __init__(self, front_door: FrontDoor) -> None:
        self._front_door = front_door

    async def infer(self, request: InferRequest) -> InferResponse:
        """The step model's answer to `request`, or its error as a ServingError."""
        return await self._front_door.run_step(request)

    async def stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        """Every response of a step's model: through the gRPC front door when this replica
        has one (a decoupled step's stream), else the one answer of `infer`."""
        if self._front_door.grpc_address is None:
            yield await self.infer(request)
            return
        async for response in self._front_door.stream(request):
            yield response
