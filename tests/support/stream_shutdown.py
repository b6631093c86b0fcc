"""A gRPC stream open across its server's shutdown: the request in flight is answered, one sent
after the shutdown began is refused in-stream (thawwire.grpc_messages.STREAM_STOPPING).

    across_shutdown(grpc_address, model_dir, signal_server, shutting_down) -> (results, errors)

`model_dir` is a tests.fixtures.models.make_slow_request model (its `started` log says when the
first request is inside it); `signal_server()` sends the signal; `shutting_down()` says when the
server's log shows the shutdown has begun.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from tests.fixtures import models

__all__ = ["across_shutdown"]


def _delay(seconds: float) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("DELAY_S", [1], "FP32")
    tensor.set_data_from_numpy(np.array([seconds], np.float32))
    return tensor


def across_shutdown(
    grpc_address: str,
    model_dir: Path,
    signal_server: Callable[[], None],
    shutting_down: Callable[[], bool],
    *,
    delay_s: float = 1.5,
) -> tuple[dict[str, grpcclient.InferResult], list[str]]:
    """The answers to a request in flight when the server was signalled, and to one sent on
    the same stream after its shutdown began, in whatever order they came: the results by
    request id, and the errors' messages (an in-stream error names no request)."""
    answers: queue.Queue[tuple[grpcclient.InferResult | None, Exception | None]] = queue.Queue()
    client = grpcclient.InferenceServerClient(grpc_address)
    try:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        begun = models.begun(model_dir)
        client.async_stream_infer(model_dir.name, [_delay(delay_s)], request_id="in-flight")
        models.wait_begun(model_dir, begun)
        signal_server()
        deadline = time.monotonic() + 30
        while not shutting_down():
            assert time.monotonic() < deadline, "the server did not begin to shut down"
            time.sleep(0.02)
        client.async_stream_infer(model_dir.name, [_delay(0.0)], request_id="after")
        results: dict[str, grpcclient.InferResult] = {}
        errors: list[str] = []
        for _ in range(2):
            result, error = answers.get(timeout=60)
            if result is not None:
                results[result.get_response().id] = result
            else:
                errors.append(str(error))
        client.stop_stream()
        return results, errors
    finally:
        client.close()
