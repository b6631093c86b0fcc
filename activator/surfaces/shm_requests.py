"""Inference requests that name shared-memory regions, rewritten for a replica and back.

`thaw up` owns its clients' regions (replicas come and go, so a replica cannot hold them):
an infer request whose tensors name regions (thawwire.shm_params) is rewritten before it is
forwarded, and the replica's answer after. Inputs read from their regions travel as ordinary
tensor data (REST: the binary tensor data extension, a binary section per input in input
order; gRPC: `raw_input_contents`), outputs bound to regions are asked for as binary data
(REST) or raw contents (gRPC), and the answer's bytes for them are written into the regions
and left out of the client's answer, as Triton answers: a REST output as its name, datatype
and shape; a gRPC output with an empty raw entry. Every region a request names is leased
from the registry (thawserver.shm_registry) until its answer is written (Triton's "in use").

Only requests that may name a region come here (a byte search of the JSON header or of the
message, `names_shared_memory`); everything else is forwarded as it came, unparsed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from activator.errors import BadRequest
from activator.surfaces.proxy import exchange
from activator.surfaces.upstream import UpstreamPool
from thawserver.shm_registry import Lease, SystemSharedMemory
from thawwire.errors import SharedMemoryError
from thawwire.grpc_messages import FINAL_RESPONSE, stream_error
from thawwire.grpc_service import pb
from thawwire.shm_params import (
    REGION,
    SHM_PARAMETERS,
    ShmRef,
    check_input_size,
    check_json_input,
    check_json_output,
    grpc_ref,
    json_ref,
)

__all__ = [
    "Rewritten",
    "StreamRegions",
    "forward_rewritten",
    "grpc_answer",
    "grpc_request",
    "rest_answer",
    "rest_request",
]

# Answer headers the activator writes itself for a rewritten answer.
_FRAMING = frozenset({"content-length", "inference-header-content-length", "content-type"})


@dataclass(slots=True)
class Rewritten:
    """A request for the replica (`body`; REST: its JSON header's length) and the leases of
    the regions it names; `outputs` are the ones its answer's bytes go to. Release once."""

    body: bytes = b""
    header_length: int | None = None
    outputs: dict[str, Lease] = field(default_factory=dict)
    leases: list[Lease] = field(default_factory=list)

    def lease(self, registry: SystemSharedMemory, ref: ShmRef) -> Lease:
        try:
            lease = registry.lease(ref)
        except SharedMemoryError as exc:
            raise BadRequest(exc.message) from None
        self.leases.append(lease)
        return lease

    def read(self, lease: Lease) -> bytes:
        try:
            return lease.read()
        except SharedMemoryError as exc:
            raise BadRequest(exc.message) from None

    def write(self, name: str, data: bytes | memoryview) -> None:
        try:
            self.outputs[name].write(data, output=name)
        except SharedMemoryError as exc:
            raise BadRequest(exc.message) from None

    def release(self) -> None:
        for lease in self.leases:
            lease.release()
        self.leases.clear()


def _refused(exc: SharedMemoryError) -> BadRequest:
    return BadRequest(exc.message)


# ---- REST -------------------------------------------------------------------------------


def rest_request(
    body: bytes, header_length: int | None, registry: SystemSharedMemory, model: str
) -> Rewritten | None:
    """The request for the replica, or None when the body names no region after all (or is
    not a JSON request the replica would take: it then answers the body as it came)."""
    header, binary = _split(body, header_length)
    try:
        doc = json.loads(header)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list):
        return None
    out = Rewritten()
    try:
        sections = _rest_inputs(doc["inputs"], binary, registry, model, out)
        named_output = _rest_outputs(doc.get("outputs"), registry, out)
    except BaseException:
        out.release()
        raise
    if not out.leases and not named_output:
        return None
    head = json.dumps(doc, separators=(",", ":")).encode()
    out.header_length = len(head) if sections else None
    out.body = b"".join([head, *sections])
    return out


def _split(body: bytes, header_length: int | None) -> tuple[bytes, memoryview]:
    if header_length is None or not 0 < header_length <= len(body):
        return body, memoryview(b"")
    return body[:header_length], memoryview(body)[header_length:]


def _rest_inputs(
    inputs: list[Any],
    binary: memoryview,
    registry: SystemSharedMemory,
    model: str,
    out: Rewritten,
) -> list[bytes | memoryview]:
    """Each input in a region becomes a binary section; the client's own sections stay in
    input order; JSON data stays JSON."""
    sections: list[bytes | memoryview] = []
    offset = 0
    for entry in inputs:
        params = entry.get("parameters") if isinstance(entry, dict) else None
        if not isinstance(params, dict):
            continue
        name = str(entry.get("name"))
        try:
            ref = json_ref(params, name)
            if ref is not None:
                check_json_input(entry, params, name)
                shape = entry.get("shape")
                if isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape):
                    check_input_size(ref, name, str(entry.get("datatype")), shape, model)
        except SharedMemoryError as exc:
            raise _refused(exc) from None
        if ref is not None:
            data = out.read(out.lease(registry, ref))
            entry["parameters"] = _without_shm(params) | {"binary_data_size": len(data)}
            sections.append(data)
            continue
        size = params.get("binary_data_size")
        if size is not None:
            if type(size) is not int or size < 0:  # thaw serve's words (runtime.codecs.rest)
                raise BadRequest(
                    "Unable to parse 'binary_data_size': attempt to access JSON "
                    f"non-unsigned-integer as unsigned-integer (input '{name}')"
                )
            if offset + size > len(binary):  # Triton's text, as thaw serve's
                raise BadRequest(
                    f"unexpected size for input '{name}', expecting "
                    f"{offset + size - len(binary)} additional bytes for model '{model}'"
                )
            sections.append(binary[offset : offset + size])
            offset += size
    if offset < len(binary):
        sections.append(binary[offset:])  # the replica says what the client's body got wrong
    return sections


def _rest_outputs(outputs: Any, registry: SystemSharedMemory, out: Rewritten) -> bool:
    """Outputs bound to regions are asked for as binary data; whether any is."""
    if not isinstance(outputs, list):
        return False
    for entry in outputs:
        params = entry.get("parameters") if isinstance(entry, dict) else None
        if not isinstance(params, dict):
            continue
        name = str(entry.get("name"))
        try:
            ref = json_ref(params, name)
            if ref is not None:
                check_json_output(params)
        except SharedMemoryError as exc:
            raise _refused(exc) from None
        if ref is not None:
            out.outputs[name] = out.lease(registry, ref)
            entry["parameters"] = _without_shm(params) | {"binary_data": True}
    return bool(out.outputs)


def _without_shm(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k not in SHM_PARAMETERS}


def rest_answer(body: bytes, header_length: int | None, out: Rewritten) -> tuple[bytes, int | None]:
    """The client's answer from the replica's (200, uncompressed): outputs bound to regions
    written there and sent as name, datatype and shape; (body, JSON header length or None)."""
    header, binary = _split(body, header_length)
    doc = json.loads(header)
    kept: list[bytes | memoryview] = []
    offset = 0
    for entry in doc.get("outputs", []):
        params = entry.get("parameters") or {}
        size = params.get("binary_data_size")
        section = None
        if size is not None:
            section = binary[offset : offset + size]
            offset += size
        name = entry.get("name")
        if name not in out.outputs:
            if section is not None:
                kept.append(section)
            continue
        if section is None:
            raise BadRequest(f"the replica sent output '{name}' without binary data")
        out.write(name, section)
        for key in list(entry):
            if key not in ("name", "datatype", "shape"):
                del entry[key]
    head = json.dumps(doc, separators=(",", ":")).encode()
    return b"".join([head, *kept]), (len(head) if kept else None)


async def forward_rewritten(
    request: web.Request, base_url: str, pool: UpstreamPool, out: Rewritten, *, timeout_s: float
) -> web.Response:
    """Send the rewritten request to the replica and answer the client as Triton would: a
    success with the regions written, any other answer as the replica gave it."""
    answer = await exchange(
        request, base_url, pool, body=out.body, header_length=out.header_length,
        timeout_s=timeout_s,
    )  # fmt: skip
    headers = {k: v for k, v in answer.headers.items() if k.lower() not in _FRAMING}
    if answer.status != 200:
        content_type = answer.headers.get("Content-Type", "application/json")
        return web.Response(
            status=answer.status, reason=answer.reason, body=answer.body, headers=headers,
            content_type=content_type,
        )  # fmt: skip
    length = answer.headers.get("Inference-Header-Content-Length")
    body, header_length = rest_answer(answer.body, int(length) if length else None, out)
    if header_length is None:
        return web.Response(body=body, headers=headers, content_type="application/json")
    headers["Inference-Header-Content-Length"] = str(header_length)
    return web.Response(body=body, headers=headers, content_type="application/octet-stream")


# ---- gRPC -------------------------------------------------------------------------------


def grpc_request(
    data: bytes, registry: SystemSharedMemory, *, request_id: str | None = None
) -> Rewritten | None:
    """The `ModelInferRequest` for the replica (every input's bytes in `raw_input_contents`),
    or None when the message names no region after all. `request_id` replaces the request's
    id when its answers must be told apart (a stream's: `grpc_stream_answer`)."""
    message = pb.ModelInferRequest.FromString(data)
    named = [REGION in io.parameters for io in message.inputs]
    out_named = [REGION in o.parameters for o in message.outputs]
    if not any(named) and not any(out_named):
        return None
    out = Rewritten()
    try:
        _grpc_inputs(message, named, registry, out)
        for requested in message.outputs:
            ref = _grpc_ref(requested.parameters, requested.name)
            if ref is None:
                continue
            if "classification" in requested.parameters:
                raise BadRequest(
                    "output can't set both 'shared_memory_region' and 'classification'"
                )
            out.outputs[requested.name] = out.lease(registry, ref)
            for key in SHM_PARAMETERS:
                requested.parameters.pop(key, None)
    except BaseException:
        out.release()
        raise
    if request_id is not None:
        message.id = request_id
    out.body = message.SerializeToString()
    return out


def _grpc_ref(parameters: Any, tensor: str) -> ShmRef | None:
    try:
        return grpc_ref(parameters, tensor)
    except SharedMemoryError as exc:
        raise _refused(exc) from None


def _grpc_inputs(
    message: Any, named: list[bool], registry: SystemSharedMemory, out: Rewritten
) -> None:
    raw = list(message.raw_input_contents)
    if any(named) and any(io.HasField("contents") for io in message.inputs):
        raise BadRequest(
            "thaw up forwards inputs in shared memory as raw_input_contents: send the other "
            "inputs of this request raw too, not in 'contents'"
        )
    contents: list[bytes] = []
    index = 0
    for io, in_shm in zip(message.inputs, named, strict=True):
        if not in_shm:
            if index < len(raw):
                contents.append(raw[index])
            index += 1
            continue
        ref = _grpc_ref(io.parameters, io.name)
        assert ref is not None  # named: the region parameter is there
        try:
            check_input_size(ref, io.name, io.datatype, list(io.shape), message.model_name)
        except SharedMemoryError as exc:
            raise _refused(exc) from None
        contents.append(out.read(out.lease(registry, ref)))
        for key in SHM_PARAMETERS:
            io.parameters.pop(key, None)
    if any(named):
        del message.raw_input_contents[:]
        message.raw_input_contents.extend(contents)


def grpc_answer(data: bytes, out: Rewritten) -> bytes:
    """The client's `ModelInferResponse`: outputs bound to regions written there, their raw
    entries left empty (as Triton leaves them)."""
    if not out.outputs:
        return data
    message = pb.ModelInferResponse.FromString(data)
    _write_outputs(message, out)
    return bytes(message.SerializeToString())


def _write_outputs(message: Any, out: Rewritten) -> None:
    """Write a `ModelInferResponse`'s outputs bound to regions there, leaving their raw
    entries empty."""
    for index, tensor in enumerate(message.outputs):
        if tensor.name in out.outputs and index < len(message.raw_output_contents):
            out.write(tensor.name, message.raw_output_contents[index])
            message.raw_output_contents[index] = b""


class StreamRegions:
    """One client stream's requests whose outputs go to regions, by the id each was forwarded
    with (a replica's answers to a stream carry their request's id, and a decoupled model's
    may be many and out of order); each request's leases are released with its final answer,
    and all that are left when the stream ends (`close`)."""

    __slots__ = ("_count", "_pending")

    def __init__(self) -> None:
        self._pending: dict[str, tuple[str, Rewritten]] = {}
        self._count = 0

    def request(self, data: bytes, registry: SystemSharedMemory) -> bytes:
        """The message for the replica (BadRequest, in Triton's words, for a bad region)."""
        client_id = pb.ModelInferRequest.FromString(data).id
        self._count += 1
        token = f"thaw-shm-{self._count}"
        out = grpc_request(data, registry, request_id=token)
        if out is None:
            return data
        if not out.outputs:  # inputs only: read already, nothing to write back
            out.release()
            return out.body
        self._pending[token] = (client_id, out)
        return out.body

    def answer(self, data: bytes) -> bytes:
        """A replica's `ModelStreamInferResponse` for the client: outputs of a request bound
        to regions written there, its own id given back."""
        if not self._pending:
            return data
        message = pb.ModelStreamInferResponse.FromString(data)
        answer = message.infer_response
        token = answer.id
        entry = self._pending.get(token)
        if entry is None:
            return data
        client_id, out = entry
        answer.id = client_id
        final = bool(message.error_message) or (
            FINAL_RESPONSE in answer.parameters and answer.parameters[FINAL_RESPONSE].bool_param
        )
        try:
            if not message.error_message:
                _write_outputs(answer, out)
        except BadRequest as exc:
            final = True  # the request has failed: its answer is this error
            message = stream_error(
                exc.message, request_id=client_id,
                model_name=answer.model_name, model_version=answer.model_version,
            )  # fmt: skip
        if final:
            del self._pending[token]
            out.release()
        return bytes(message.SerializeToString())

    def close(self) -> None:
        for _, out in self._pending.values():
            out.release()
        self._pending.clear()
