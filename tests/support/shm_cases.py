"""System shared-memory stories told with tritonclient (HTTP and gRPC) and its shm utils, for
any server that speaks Triton's protocol: `thaw serve` (tests/integration/runtime) and
`thaw up` (tests/integration/activator) run the same cases against an `add_sub` model
(FP32 [4] INPUT0, INPUT1 -> OUTPUT0 = sum, OUTPUT1 = difference)."""

from __future__ import annotations

import base64
import os
import queue
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

__all__ = ["SHM_CASES"]

_BYTES = 16  # FP32 [4]


@contextmanager
def _regions(client: Any, *sizes: int) -> Iterator[list[tuple[str, Any]]]:
    """Fresh shm objects of `sizes` bytes, registered under unique names; always cleaned up."""
    made: list[tuple[str, Any]] = []
    try:
        for size in sizes:
            name = f"t{uuid.uuid4().hex[:12]}"
            handle = shm.create_shared_memory_region(name, "/" + name, size)
            made.append((name, handle))
            client.register_system_shared_memory(name, "/" + name, size)
        yield made
    finally:
        for name, handle in made:
            try:
                client.unregister_system_shared_memory(name)
            finally:
                shm.destroy_shared_memory_region(handle)


def _ab() -> tuple[np.ndarray, np.ndarray]:
    return np.arange(4, dtype=np.float32), np.full(4, 0.5, dtype=np.float32)


def _http_io(
    names: list[str], *, out_sizes: tuple[int, int] = (_BYTES, _BYTES), out_offset: int = 0
) -> tuple[list[Any], list[Any]]:
    inputs = [httpclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
    inputs[0].set_shared_memory(names[0], _BYTES)
    inputs[1].set_shared_memory(names[1], _BYTES)
    outputs = [httpclient.InferRequestedOutput(f"OUTPUT{i}", binary_data=True) for i in (0, 1)]
    outputs[0].set_shared_memory(names[2], out_sizes[0], offset=out_offset)
    outputs[1].set_shared_memory(names[3], out_sizes[1])
    return inputs, outputs


def _grpc_io(names: list[str]) -> tuple[list[Any], list[Any]]:
    inputs = [grpcclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
    inputs[0].set_shared_memory(names[0], _BYTES)
    inputs[1].set_shared_memory(names[1], _BYTES)
    outputs = [grpcclient.InferRequestedOutput(f"OUTPUT{i}") for i in (0, 1)]
    outputs[0].set_shared_memory(names[2], _BYTES)
    outputs[1].set_shared_memory(names[3], _BYTES)
    return inputs, outputs


def _fill_inputs(regions: list[tuple[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    a, b = _ab()
    shm.set_shared_memory_region(regions[0][1], [a])
    shm.set_shared_memory_region(regions[1][1], [b])
    return a, b


def _out(handle: Any) -> np.ndarray:
    return shm.get_contents_as_numpy(handle, np.float32, [4])


def case_http_round_trip(http: Any, grpc: Any, model: str) -> None:
    """Inputs read from regions, outputs written to regions, the answer carries no data."""
    with _regions(http, *[_BYTES] * 4) as regions:
        a, b = _fill_inputs(regions)
        inputs, outputs = _http_io([n for n, _ in regions])
        result = http.infer(model, inputs, outputs=outputs)
        np.testing.assert_array_equal(_out(regions[2][1]), a + b)
        np.testing.assert_array_equal(_out(regions[3][1]), a - b)
        out0 = result.get_output("OUTPUT0")
        assert out0["datatype"] == "FP32" and out0["shape"] == [4]
        assert "data" not in out0 and "binary_data_size" not in out0.get("parameters", {})
        status = http.get_system_shared_memory_status(regions[0][0])
        assert status == [
            {"name": regions[0][0], "key": "/" + regions[0][0], "offset": 0, "byte_size": _BYTES}
        ]


def case_grpc_round_trip(http: Any, grpc: Any, model: str) -> None:
    """The same over gRPC, one input in a region and one sent raw (Triton's mixed case)."""
    with _regions(grpc, *[_BYTES] * 4) as regions:
        a, b = _fill_inputs(regions)
        inputs, outputs = _grpc_io([n for n, _ in regions])
        inputs[1] = grpcclient.InferInput("INPUT1", [4], "FP32")
        inputs[1].set_data_from_numpy(b)
        grpc.infer(model, inputs, outputs=outputs)
        np.testing.assert_array_equal(_out(regions[2][1]), a + b)
        np.testing.assert_array_equal(_out(regions[3][1]), a - b)
        status = grpc.get_system_shared_memory_status()
        assert {regions[0][0], regions[3][0]} <= set(status.regions)


def case_output_offset(http: Any, grpc: Any, model: str) -> None:
    """An output at an offset lands there, and not a byte before it is touched."""
    with _regions(http, _BYTES, _BYTES, 2 * _BYTES, _BYTES) as regions:
        a, b = _fill_inputs(regions)
        sentinel = np.full(4, 7.0, dtype=np.float32)
        shm.set_shared_memory_region(regions[2][1], [sentinel])
        inputs, outputs = _http_io([n for n, _ in regions], out_offset=_BYTES)
        http.infer(model, inputs, outputs=outputs)
        whole = shm.get_contents_as_numpy(regions[2][1], np.float32, [8])
        np.testing.assert_array_equal(whole[:4], sentinel)
        np.testing.assert_array_equal(whole[4:], a + b)


def _refused(text: str, call: Any, *args: Any, **kwargs: Any) -> None:
    """`call(*args, **kwargs)` is refused with `text` in its error."""
    with pytest.raises(InferenceServerException) as info:
        call(*args, **kwargs)
    assert text in str(info.value), str(info.value)


def case_hostile_registrations(http: Any, grpc: Any, model: str) -> None:
    """Bad keys, escaping keys, bounds, duplicates: each a clear error, the server serves on."""
    missing = f"/missing{uuid.uuid4().hex[:8]}"
    for client in (http, grpc):
        register = client.register_system_shared_memory
        for key in ("/../etc/passwd", "/a/b", "..", "/", missing):
            _refused("Unable to open shared memory region", register, "bad", key, 8)
        with _regions(client, 64) as regions:
            name = regions[0][0]
            key = "/" + name
            _refused(f"shared memory region '{name}' already in manager", register, name, key, 8)
            for offset, size in ((0, 65), (1, 64), (64, 1), (2**40, 1)):
                _refused(
                    "failed to register shared memory region 'oob': invalid args",
                    register, "oob", key, size, offset=offset,
                )  # fmt: skip
        _refused(
            "Unable to find system shared memory region: 'never'",
            client.get_system_shared_memory_status, "never",
        )  # fmt: skip
    _refused("byte_size", http.register_system_shared_memory, "neg", "/x", -1)
    # tritonclient sends the handle as given: base64 text, as cudashm.get_raw_handle returns it
    handle = base64.b64encode(b"\0" * 64)
    _refused("GPUs not supported", http.register_cuda_shared_memory, "gpu", handle, 0, 8)
    assert http.get_cuda_shared_memory_status() == []
    assert http.is_server_live()


def case_hostile_inference(http: Any, grpc: Any, model: str) -> None:
    """Unregistered regions, offsets and sizes out of bounds, a size that does not match the
    input, an output region too small: each a 400 in Triton's words; the server serves on."""
    with _regions(http, *[_BYTES] * 4) as regions:
        _fill_inputs(regions)
        names = [n for n, _ in regions]
        cases: list[tuple[str, tuple[list[Any], list[Any]]]] = [
            ("Unable to find shared memory region: 'nowhere'", _http_io(["nowhere", *names[1:]])),
            ("Invalid offset for shared memory region", _http_io(names, out_offset=2**64 - 32)),
            ("Invalid offset + byte size", _http_io(names, out_offset=8)),
            (
                "shared memory size specified with the request for output 'OUTPUT0' (8 bytes) "
                "should be at least 16 bytes to hold the results",
                _http_io(names, out_sizes=(8, _BYTES)),
            ),
        ]
        for text, (inputs, outputs) in cases:
            _refused(text, http.infer, model, inputs, outputs=outputs)
        inputs, outputs = _http_io(names)
        inputs[1].set_shared_memory(names[1], 8)
        _refused(
            f"input byte size mismatch for input 'INPUT1' for model '{model}'. Expected 16, got 8",
            http.infer, model, inputs, outputs=outputs,
        )  # fmt: skip
        g_inputs, g_outputs = _grpc_io(["nowhere", *names[1:]])
        _refused(
            "Unable to find shared memory region", grpc.infer, model, g_inputs, outputs=g_outputs
        )
        # The regions are all free again (nothing left in use), and a good request works.
        inputs, outputs = _http_io(names)
        http.infer(model, inputs, outputs=outputs)
    left = {row["name"] for row in http.get_system_shared_memory_status()}
    assert not left & set(names)


def case_truncated_object(http: Any, grpc: Any, model: str) -> None:
    """A client that shrinks its object after registering gets a refusal, never a crash."""
    with _regions(http, *[_BYTES] * 4) as regions:
        _fill_inputs(regions)
        os.truncate("/dev/shm/" + regions[0][0], 4)
        inputs, outputs = _http_io([n for n, _ in regions])
        _refused("truncated", http.infer, model, inputs, outputs=outputs)
        assert http.is_server_live()


def case_grpc_stream(http: Any, grpc: Any, model: str) -> None:
    """`ModelStreamInfer` with inputs and outputs in regions: each request's outputs land in
    its own regions, its answer carries no bytes for them, and its id comes back."""
    answers: queue.Queue[Any] = queue.Queue()
    with _regions(grpc, *[_BYTES] * 8) as regions:
        names = [n for n, _ in regions]
        a, b = _ab()
        for first in (0, 4):
            shm.set_shared_memory_region(regions[first][1], [a * (first + 1)])
            shm.set_shared_memory_region(regions[first + 1][1], [b])
        grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            for first in (0, 4):
                inputs, outputs = _grpc_io(names[first : first + 4])
                grpc.async_stream_infer(model, inputs, outputs=outputs, request_id=f"r{first}")
            got = [answers.get(timeout=30) for _ in range(2)]
        finally:
            grpc.stop_stream()
        for result, error in got:
            assert error is None, error
            assert result.get_response().raw_output_contents in ([], [b"", b""])
        assert sorted(result.get_response().id for result, _ in got) == ["r0", "r4"]
        for first in (0, 4):
            np.testing.assert_array_equal(_out(regions[first + 2][1]), a * (first + 1) + b)
            np.testing.assert_array_equal(_out(regions[first + 3][1]), a * (first + 1) - b)
        # An unknown region is answered in-stream with Triton's words; the stream goes on.
        grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            inputs, outputs = _grpc_io(["nowhere", *names[1:4]])
            grpc.async_stream_infer(model, inputs, outputs=outputs)
            _, error = answers.get(timeout=30)
            inputs, outputs = _grpc_io(names[:4])
            grpc.async_stream_infer(model, inputs, outputs=outputs)
            result, second = answers.get(timeout=30)
        finally:
            grpc.stop_stream()
        assert error is not None and "Unable to find shared memory region" in str(error)
        assert second is None, second
    left = set(grpc.get_system_shared_memory_status().regions)
    assert not left & set(names)  # none left registered, none left in use


SHM_CASES = {
    name.removeprefix("case_"): fn
    for name, fn in dict(globals()).items()
    if name.startswith("case_") and callable(fn)
}
