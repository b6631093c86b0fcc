"""Request rescheduling (Triton's iterative sequences) in a real `thaw serve`, in a stub process
and in process: a Python model releases a request with `set_release_flags(RESCHEDULE)` and
`sequence_batching { iterative_sequence: true }` runs it again on the same instance, flagged
neither START nor END, until the model lets it go; a request without a sequence id is a
sequence of its own. Non-decoupled over HTTP (one response, after the last run), decoupled
over a gRPC stream (a response per run, the stream kept open between runs). A model that
breaks the contract gets Triton's texts: a response returned for a rescheduled request, or
RESCHEDULE from a model that is not an iterative one.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import python_model
from tests.fixtures.serve_process import ServeProcess, serving

pytestmark = pytest.mark.integration

_RUNTIMES = ("process", "in_process")

# Runs each request IN times (rescheduled IN - 1 times), then answers how many runs it had
# and the flags of its first and last run; keyed by correlation id, so sequences interleave.
_RETRY_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.runs = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            corrid = request.correlation_id()
            wanted = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            runs = self.runs.setdefault(corrid, [])
            runs.append(request.flags())
            if len(runs) < wanted:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
                continue
            del self.runs[corrid]
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("RUNS", np.array([len(runs)], np.int32)),
                pb_utils.Tensor("FIRST_FLAGS", np.array([runs[0]], np.int32)),
                pb_utils.Tensor("LAST_FLAGS", np.array([runs[-1]], np.int32)),
                pb_utils.Tensor("CORRID", np.array([corrid], np.int64)),
            ]))
        return responses
"""

# Counts down from IN, one response per run, rescheduling until it sends the last (final).
_COUNTDOWN_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.left = {}

    def execute(self, requests):
        for request in requests:
            corrid = request.correlation_id()
            if request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                self.left[corrid] = int(
                    pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0]
                )
            self.left[corrid] -= 1
            left = self.left[corrid]
            response = pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([left], np.int32)),
                pb_utils.Tensor("FLAGS", np.array([request.flags()], np.int32)),
            ])
            sender = request.get_response_sender()
            if left <= 0:
                del self.left[corrid]
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(response)
        return None
"""

# Reschedules and still returns a response (Triton's stub refuses that), or reschedules with
# None where the model's scheduler cannot run a request again.
_RESCHEDULE_ALWAYS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            answer = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0] > 0
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([1], np.int32))])
                if answer else None
            )
        return responses
"""

_ITERATIVE = "sequence_batching { iterative_sequence: true }\n"


def _config(name: str, runtime: str, outputs: dict[str, str], extra: str) -> str:
    declared = ",\n".join(
        f'  {{ name: "{n}" data_type: {t} dims: [ 1 ] }}' for n, t in outputs.items()
    )
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n{extra}'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        f"output [\n{declared}\n]\n"
        f'parameters {{ key: "thaw.python_runtime" value: {{ string_value: "{runtime}" }} }}\n'
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("rescheduling")
    retry_out = {
        "RUNS": "TYPE_INT32",
        "FIRST_FLAGS": "TYPE_INT32",
        "LAST_FLAGS": "TYPE_INT32",
        "CORRID": "TYPE_INT64",
    }
    for runtime in _RUNTIMES:
        python_model(
            repo, f"retry_{runtime}", _config(f"retry_{runtime}", runtime, retry_out, _ITERATIVE),
            _RETRY_PY,
        )  # fmt: skip
        countdown = f"countdown_{runtime}"
        python_model(
            repo,
            countdown,
            _config(
                countdown,
                runtime,
                {"OUT": "TYPE_INT32", "FLAGS": "TYPE_INT32"},
                _ITERATIVE + "model_transaction_policy { decoupled: true }\n",
            ),
            _COUNTDOWN_PY,
        )
        for name, extra in ((f"wrong_{runtime}", _ITERATIVE), (f"plain_{runtime}", "")):
            python_model(
                repo, name, _config(name, runtime, {"OUT": "TYPE_INT32"}, extra),
                _RESCHEDULE_ALWAYS_PY,
            )  # fmt: skip
    with serving(repo) as proc:
        yield proc


def _in(value: int, module: Any = httpclient) -> Any:
    tensor = module.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    return tensor


def _retry(client: httpclient.InferenceServerClient, model: str, runs: int, **seq: Any) -> tuple:
    result = client.infer(model, [_in(runs)], **seq)
    return tuple(
        int(result.as_numpy(name)[0]) for name in ("RUNS", "FIRST_FLAGS", "LAST_FLAGS", "CORRID")
    )


@pytest.mark.parametrize("runtime", _RUNTIMES)
def test_a_rescheduled_request_runs_again_until_the_model_answers(
    server: ServeProcess, runtime: str
) -> None:
    client = httpclient.InferenceServerClient(server.hostport)
    model = f"retry_{runtime}"
    runs, first, last, corrid = _retry(client, model, 3)
    # START on the first run only (Triton's iterative sequencer clears it on a reschedule),
    # never END; a request without a sequence id was given one of its own.
    assert (runs, first, last) == (3, 1, 0)
    assert corrid != 0
    # Not rescheduled: one run, with START.
    assert _retry(client, model, 1)[:3] == (1, 1, 1)
    # Requests at once (a client each: tritonclient.http's is one thread's), each its own
    # sequence: none takes another's runs.
    results: list[tuple] = []

    def one(runs: int) -> None:
        results.append(
            (runs, _retry(httpclient.InferenceServerClient(server.hostport), model, runs))
        )

    threads = [threading.Thread(target=one, args=(n,)) for n in (2, 4, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted((n, r[0]) for n, r in results) == [(2, 2), (4, 4), (5, 5)]
    assert len({r[3] for _, r in results}) == 3


@pytest.mark.parametrize("runtime", _RUNTIMES)
def test_a_clients_sequence_ends_with_its_requests_release(
    server: ServeProcess, runtime: str
) -> None:
    client = httpclient.InferenceServerClient(server.hostport)
    model = f"retry_{runtime}"
    assert _retry(client, model, 2, sequence_id=4242, sequence_start=True) == (2, 1, 0, 4242)
    # The sequence ended when the model let its request go (Triton: a release that is no
    # RESCHEDULE ends an iterative sequence), so a request without START names none.
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        _retry(client, model, 1, sequence_id=4242)


def _stream(server: ServeProcess, model: str, counts: list[int]) -> dict[str, list[tuple]]:
    """Each count as a request of its own on one gRPC stream: {request id: [(OUT, FLAGS)]}."""
    answers: queue.Queue[Any] = queue.Queue()
    got: dict[str, list[tuple]] = {str(i): [] for i in range(len(counts))}
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        for index, count in enumerate(counts):
            client.async_stream_infer(model, [_in(count, grpcclient)], request_id=str(index))
        for _ in range(sum(counts)):
            item = answers.get(timeout=120)
            if isinstance(item, InferenceServerException):
                raise item
            response = item.get_response()
            got[response.id].append((int(item.as_numpy("OUT")[0]), int(item.as_numpy("FLAGS")[0])))
        client.stop_stream()
    return got


@pytest.mark.parametrize("runtime", _RUNTIMES)
def test_a_decoupled_request_streams_a_response_per_run(server: ServeProcess, runtime: str) -> None:
    got = _stream(server, f"countdown_{runtime}", [3])
    assert got == {"0": [(2, 1), (1, 0), (0, 0)]}
    # Two requests on one stream, each rescheduled on the one instance, do not mix.
    got = _stream(server, f"countdown_{runtime}", [4, 2])
    assert got == {"0": [(3, 1), (2, 0), (1, 0), (0, 0)], "1": [(1, 1), (0, 0)]}


@pytest.mark.parametrize("runtime", _RUNTIMES)
def test_a_response_for_a_rescheduled_request_is_refused(
    server: ServeProcess, runtime: str
) -> None:
    client = httpclient.InferenceServerClient(server.hostport)
    with pytest.raises(InferenceServerException) as caught:
        client.infer(f"wrong_{runtime}", [_in(1)])
    assert (
        "Expected a None object in the execute function return list for reschduled request"
        in caught.value.message()
    )


@pytest.mark.parametrize("runtime", _RUNTIMES)
def test_reschedule_from_a_model_that_is_no_iterative_sequence_is_an_error(
    server: ServeProcess, runtime: str
) -> None:
    client = httpclient.InferenceServerClient(server.hostport)
    with pytest.raises(InferenceServerException) as caught:
        client.infer(f"plain_{runtime}", [_in(0)])
    assert "while the model is not configured to handle such a flag" in caught.value.message()
    # The server goes on serving.
    assert _retry(client, f"retry_{runtime}", 2)[0] == 2
