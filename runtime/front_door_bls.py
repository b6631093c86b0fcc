"""BLS calls to models this replica does not serve, sent to `thaw up`'s front door over HTTP v2.

Under `thaw up` a replica serves one model; a Python model's `InferenceRequest(...).exec()` to
another model goes to the activator's `/v2/models/{m}/infer`, which holds it while that model
wakes from zero, exactly as any client request. Tensors travel in Triton's binary extension.
"""

from __future__ import annotations

import json
import logging

import aiohttp
import numpy as np

from runtime.datatypes import from_wire, serialize_bytes, wire_dtype
from runtime.errors import (
    DeadlineExceeded,
    InvalidInput,
    ModelNotFound,
    ModelUnavailable,
    ServingError,
)
from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.tensor_json import json_to_array

__all__ = ["FrontDoorBls", "decode_response", "encode_request"]

logger = logging.getLogger(__name__)

_STATUS_ERRORS: dict[int, type[ServingError]] = {
    400: InvalidInput,
    404: ModelNotFound,
    503: ModelUnavailable,
    504: DeadlineExceeded,
}


def _raw(tensor: InferTensor) -> bytes:
    if tensor.datatype == "BYTES":
        return serialize_bytes(tensor.data)
    return np.ascontiguousarray(tensor.data, dtype=wire_dtype(tensor.datatype)).tobytes()


def encode_request(request: InferRequest) -> tuple[bytes, int]:
    """A binary-extension infer body for `request`, and its JSON header's length."""
    chunks: list[bytes] = []
    inputs = []
    for tensor in request.inputs:
        raw = _raw(tensor)
        chunks.append(raw)
        inputs.append(
            {
                "name": tensor.name,
                "datatype": tensor.datatype,
                "shape": list(tensor.shape),
                "parameters": {"binary_data_size": len(raw)},
            }
        )
    header: dict[str, object] = {"inputs": inputs}
    if request.id:
        header["id"] = request.id
    if request.requested_outputs:
        header["outputs"] = [
            {"name": o.name, "parameters": {"binary_data": True}} for o in request.requested_outputs
        ]
    else:
        header["parameters"] = {"binary_data_output": True}
    if request.parameters:
        params = dict(request.parameters)
        if "binary_data_output" in header.get("parameters", {}):  # type: ignore[operator]
            params["binary_data_output"] = True
        header["parameters"] = params
    text = json.dumps(header).encode()
    return text + b"".join(chunks), len(text)


def decode_response(body: bytes, header_length: int | None, model: str) -> InferResponse:
    """An infer response body (JSON, or JSON + binary sections) as an InferResponse."""
    head = body if header_length is None else body[:header_length]
    binary = memoryview(body)[header_length:] if header_length is not None else memoryview(b"")
    doc = json.loads(head)
    outputs = []
    offset = 0
    for out in doc.get("outputs", []):
        name, datatype, shape = out["name"], out["datatype"], tuple(out["shape"])
        size = (out.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            data = from_wire(binary[offset : offset + size], name, datatype, shape)
            offset += size
        else:
            count = int(np.prod(shape)) if shape else 1
            data = json_to_array(out.get("data", []), name, datatype, shape, count)
        outputs.append(InferTensor(name, datatype, shape, data))
    return InferResponse(
        doc.get("model_name", model),
        str(doc.get("model_version", "")),
        outputs,
        id=doc.get("id"),
        parameters=doc.get("parameters") or {},
    )


class FrontDoorBls:
    """Sends BLS requests to the front door at `url`; one pooled aiohttp session."""

    def __init__(self, url: str, *, timeout_s: float) -> None:
        self._url = url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def infer(self, request: InferRequest) -> InferResponse:
        """The front door's answer; its JSON error as the ServingError of its status."""
        if self._session is None:
            self._session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
        body, header_length = encode_request(request)
        path = f"/v2/models/{request.model_name}"
        if request.model_version:
            path += f"/versions/{request.model_version}"
        headers = {
            "Inference-Header-Content-Length": str(header_length),
            "Content-Type": "application/octet-stream",
        }
        try:
            async with self._session.post(
                self._url + path + "/infer", data=body, headers=headers, timeout=self._timeout
            ) as response:
                payload = await response.read()
                if response.status != 200:
                    raise _status_error(response.status, payload)
                length = response.headers.get("Inference-Header-Content-Length")
                return decode_response(
                    payload, int(length) if length is not None else None, request.model_name
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            logger.warning(
                "model=%s BLS through the front door failed: %r", request.model_name, exc
            )
            raise ModelUnavailable(f"the front door did not answer a BLS request: {exc!r}") from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise ServingError(f"the front door's BLS answer could not be read: {exc}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _status_error(status: int, payload: bytes) -> ServingError:
    try:
        message = str(json.loads(payload).get("error", ""))
    except (ValueError, AttributeError):
        message = payload[:200].decode(errors="replace")
    return _STATUS_ERRORS.get(status, ServingError)(message or f"HTTP {status}")
