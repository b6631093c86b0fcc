"""The in-process triton_python_backend_utils module has the names Triton models use."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from runtime.python import pb_utils


@pytest.mark.parametrize(
    "name",
    ["Tensor", "InferenceRequest", "InferenceResponse", "TritonError", "TritonModelException",
     "get_input_tensor_by_name", "get_output_tensor_by_name", "get_input_config_by_name",
     "get_output_config_by_name", "triton_string_to_numpy", "numpy_to_triton_type",
     "triton_to_numpy_type", "serialize_byte_tensor", "deserialize_bytes_tensor", "Logger",
     "ModelConfig", "TRITONSERVER_RESPONSE_COMPLETE_FINAL"],
)  # fmt: skip
def test_module_exports_tritons_names(name: str) -> None:
    assert hasattr(pb_utils, name)


def test_tensor_round_trip_and_dlpack() -> None:
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor("X", data)
    assert tensor.name() == "X" and tensor.as_numpy() is data
    assert tensor.triton_dtype() == 11
    back = pb_utils.Tensor.from_dlpack("Y", tensor.to_dlpack())
    np.testing.assert_array_equal(back.as_numpy(), data)
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.Tensor("S", np.array(["unicode"]))


def test_request_accessors_and_lookup() -> None:
    x = pb_utils.Tensor("X", np.zeros(1))
    request = pb_utils.InferenceRequest(
        inputs=[x], request_id="r", correlation_id=5, requested_output_names=["Y"],
        parameters={"a": 1},
    )  # fmt: skip
    assert pb_utils.get_input_tensor_by_name(request, "X") is x
    assert pb_utils.get_input_tensor_by_name(request, "Z") is None
    assert request.request_id() == "r" and request.correlation_id() == 5
    assert json.loads(request.parameters()) == {"a": 1}
    # Outside a server, BLS answers an error response (Triton's BLS never raises).
    answer = request.exec()
    assert answer.has_error() and "BLS" in answer.error().message()


async def test_bls_raises_in_initialize_and_finalize_as_in_triton() -> None:
    request = pb_utils.InferenceRequest(
        model_name="square_int32", inputs=[], requested_output_names=["OUT"]
    )
    with pb_utils.outside_execute():  # the runner's initialize / finalize call
        with pytest.raises(pb_utils.TritonModelException) as raised:
            request.exec(decoupled=True)
        assert raised.value.message() == "BLS is only supported during the 'execute' function."
        with pytest.raises(pb_utils.TritonModelException):
            await request.async_exec()
    assert request.exec().has_error()  # in execute: an error response, never raised


def test_response_and_error_codes() -> None:
    error = pb_utils.TritonError("bad", pb_utils.TritonError.INVALID_ARG)
    response = pb_utils.InferenceResponse(output_tensors=[], error=error)
    assert response.has_error() and response.error().message() == "bad"
    assert response.error().code() == 3
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.InferenceResponse(output_tensors="nope")


def test_error_codes_are_tritons_enum() -> None:
    # Triton's binding: an enum `__ErrorCode` nested in TritonError, its values printing by
    # name (a model that logs `error.code()` logs the same line), `int()` the code's number.
    code = pb_utils.TritonError("gone", pb_utils.TritonError.CANCELLED).code()
    assert (str(code), f"{code}", repr(code), int(code)) == (
        "__ErrorCode.CANCELLED", "__ErrorCode.CANCELLED", "<__ErrorCode.CANCELLED: 7>", 7
    )  # fmt: skip
    assert getattr(pb_utils.TritonError, "__ErrorCode")["CANCELLED"] is code
    assert pb_utils.TritonError("x").code() is pb_utils.TritonError.INTERNAL
    assert pb_utils.TritonError("x", 2).code() is pb_utils.TritonError.NOT_FOUND  # a number too


def test_string_types_and_byte_tensors() -> None:
    assert pb_utils.triton_string_to_numpy("TYPE_FP16") is np.float16
    assert pb_utils.numpy_to_triton_type(np.object_) == 13
    data = np.array([b"ab", b"", b"xyz"], dtype=np.object_)
    round_trip = pb_utils.deserialize_bytes_tensor(pb_utils.serialize_byte_tensor(data))
    assert round_trip.tolist() == data.tolist()


def test_serialize_byte_tensor_returns_what_tritons_returns() -> None:
    # Triton 2.51's python backend: bytes (not an array), () when empty, None for other dtypes
    data = np.array([[b"ab", "c"]], dtype=np.object_)
    assert pb_utils.serialize_byte_tensor(data) == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"
    assert pb_utils.serialize_byte_tensor(np.array([b"xy"], dtype=np.bytes_)) == b"\x02\0\0\0xy"
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)) == ()
    assert pb_utils.serialize_byte_tensor(np.array([1.0], dtype=np.float32)) is None


def test_a_tensor_speaks_dlpack_as_tritons_does() -> None:
    writable = np.arange(4, dtype=np.float32)
    tensor = pb_utils.Tensor("X", writable)
    shared = np.from_dlpack(tensor)
    shared[0] = 7.0
    assert writable[0] == 7.0  # the same memory
    assert tensor.__dlpack_device__() == (1, 0)  # kDLCPU
    readonly = np.arange(3, dtype=np.int64)
    readonly.flags.writeable = False
    assert np.from_dlpack(pb_utils.Tensor("R", readonly)).tolist() == [0, 1, 2]  # a copy
    assert type(pb_utils.Tensor("R", readonly).to_dlpack()).__name__ == "PyCapsule"


def test_a_unicode_array_and_a_response_of_arrays_are_refused_in_tritons_words() -> None:
    with pytest.raises(pb_utils.TritonModelException, match=r"NumPy dtype is not supported\."):
        pb_utils.Tensor("U", np.array(["x", "y"]))
    with pytest.raises(TypeError, match="output_tensors must be a list of Tensor"):
        pb_utils.InferenceResponse(output_tensors=[np.zeros(2, np.float32)])
    with pytest.raises(pb_utils.TritonModelException, match="should not be empty"):
        pb_utils.InferenceResponse([None])


def test_model_config_helper_for_auto_complete() -> None:
    config = pb_utils.ModelConfig({"name": "m", "max_batch_size": 0})
    config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [4]})
    config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [4]})  # idempotent
    config.set_max_batch_size(8)
    config.set_dynamic_batching()
    assert config.as_dict()["input"] == [{"name": "X", "data_type": "TYPE_FP32", "dims": [4]}]
    assert config.max_batch_size() == 8 and "dynamic_batching" in config.as_dict()
    with pytest.raises(ValueError):
        config.add_output({"name": "Y"})
    with pytest.raises(ValueError):
        config.set_max_batch_size(2)


def test_custom_metrics_share_families_and_series_and_refuse_misuse() -> None:
    from runtime.observe.custom_metrics import CustomMetrics

    metrics = CustomMetrics()
    metrics.family("reqs", "requests", 0)
    metrics.family("reqs", "requests", 0)  # again, same kind: the same family
    with pytest.raises(ValueError, match="already exists as a counter"):
        metrics.family("reqs", "requests", 1)
    a = metrics.create("reqs", {"m": "x"}, None)
    assert metrics.create("reqs", {"m": "x"}, None) == a  # the same labels: the same series
    metrics.update(a, "increment", 2)
    with pytest.raises(ValueError, match="negative"):
        metrics.update(a, "increment", -1)
    with pytest.raises(ValueError, match="not supported for a counter"):
        metrics.update(a, "set", 1)
    metrics.family("h", "hist", 2)
    h = metrics.create("h", {}, [1.0, 5.0])
    for value in (0.5, 3, 3, 9):
        metrics.update(h, "observe", value)
    [_, hist] = metrics.snapshot()
    assert hist.series[0].cumulative == (1, 3, 4) and hist.series[0].value == 15.5
    assert metrics.value(a) == 2.0


def test_response_sender_closes_after_final_and_checks_default_mode() -> None:
    sent = []
    sender = pb_utils.InferenceResponseSender(lambda r, f: sent.append((r, f)), decoupled=True)
    sender.send(pb_utils.InferenceResponse())
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert len(sent) == 2 and sender.is_closed()
    with pytest.raises(pb_utils.TritonModelException, match="closed"):
        sender.send(pb_utils.InferenceResponse())
    one = pb_utils.InferenceResponseSender(lambda r, f: None, decoupled=False)
    one.send(pb_utils.InferenceResponse())
    with pytest.raises(pb_utils.TritonModelException, match="more than one response"):
        one.send(pb_utils.InferenceResponse())


def test_a_returned_response_is_the_final_send_and_refused_after_a_sent_one() -> None:
    answered = pb_utils.InferenceResponseSender(lambda r, f: None, decoupled=False)
    answered.send(pb_utils.InferenceResponse(), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    with pytest.raises(
        pb_utils.TritonModelException,
        match=r"^Unable to send response\. Non-decoupled model cannot send more than one "
        r"response\.$",
    ):
        answered._returned(pb_utils.InferenceResponse())
    unused = pb_utils.InferenceResponseSender(lambda r, f: None, decoupled=False)
    unused._returned(pb_utils.InferenceResponse())
    assert unused.is_closed()  # a send after the return raises, as in Triton
    with pytest.raises(pb_utils.TritonModelException, match="more than one response"):
        unused.send(pb_utils.InferenceResponse())


def test_is_cancelled_asks_until_true_then_keeps_it() -> None:
    answers = iter([False, True, False])
    asked = []

    def probe() -> bool:
        asked.append(1)
        return next(answers)

    request = pb_utils.InferenceRequest()
    request._cancel_probe = probe
    assert [request.is_cancelled() for _ in range(4)] == [False, True, True, True]
    assert len(asked) == 2
    assert pb_utils.InferenceRequest().is_cancelled() is False  # a BLS request: never asked


def test_a_sender_dropped_without_its_response_says_so_once() -> None:
    dropped = []
    sender = pb_utils.InferenceResponseSender(
        lambda r, f: None, decoupled=False, abandoned=lambda: dropped.append(1)
    )
    del sender
    answered = pb_utils.InferenceResponseSender(
        lambda r, f: None, decoupled=False, abandoned=lambda: dropped.append(2)
    )
    answered.send(pb_utils.InferenceResponse())
    del answered
    assert dropped == [1]


def test_placement_is_a_stub_process_unless_in_process_is_asked_for() -> None:
    from runtime.errors import RepositoryError
    from runtime.python.placement import PythonRuntime, placement
    from tritonconfig.schema import mc

    config = mc.ModelConfig(name="m", backend="python")
    config.instance_group.add(count=1)
    assert placement(config) == PythonRuntime.PROCESS  # as Triton: one stub per instance
    config.parameters["thaw.python_runtime"].string_value = "auto"
    assert placement(config) == PythonRuntime.PROCESS
    config.instance_group[0].count = 3
    assert placement(config) == PythonRuntime.PROCESS
    config.parameters["thaw.python_runtime"].string_value = "in_process"
    assert placement(config) == PythonRuntime.IN_PROCESS
    config.parameters["EXECUTION_ENV_PATH"].string_value = "/envs/py"
    with pytest.raises(RepositoryError, match="cannot use EXECUTION_ENV_PATH"):
        placement(config)
    config.parameters["thaw.python_runtime"].string_value = "threads"
    with pytest.raises(RepositoryError, match="must be one of"):
        placement(config)


def test_wire_carries_small_tensors_inline_and_large_ones_in_memfds() -> None:
    from runtime.python.stub.wire import Channel, Message, Tensor, channel_pair

    left, right = channel_pair()
    a, b = Channel(left), Channel(right)
    small = np.arange(4, dtype=np.float32)
    large = np.arange(200_000, dtype=np.int64)
    text = np.array([b"x", b"yz"], dtype=np.object_)
    a.send(Message({"op": "t"}, [Tensor("s", "FP32", (4,), small), Tensor("l", "INT64",
           large.shape, large), Tensor("b", "BYTES", (2,), text)]))  # fmt: skip
    got = b.recv()
    assert got.fields == {"op": "t"}
    np.testing.assert_array_equal(got.tensors[0].data, small)
    np.testing.assert_array_equal(got.tensors[1].data, large)
    assert got.tensors[1].data.flags.writeable  # mapped from its memfd, not copied
    assert list(got.tensors[2].data) == [b"x", b"yz"]
    a.close()
    b.close()


def test_generate_body_maps_inputs_parameters_and_id() -> None:
    from runtime.codecs.generate import decode_generate, encode_generate
    from runtime.errors import InvalidInput
    from runtime.inference import InferResponse, InferTensor

    meta = {"inputs": [{"name": "PROMPT", "datatype": "BYTES", "shape": [1, 1]},
                       {"name": "N", "datatype": "INT32", "shape": [-1]}]}  # fmt: skip
    body = b'{"PROMPT": "hi", "N": [1, 2], "id": "7", "parameters": {"t": 0.5}, "k": true}'
    request = decode_generate(body, model="m", version="", metadata=meta, max_depth=10)
    # "id" is the request's id and, as Triton passes it on, a parameter too
    assert request.id == "7" and request.parameters == {"id": "7", "t": 0.5, "k": True}
    assert [(t.name, t.shape) for t in request.inputs] == [("PROMPT", (1, 1)), ("N", (2,))]
    with pytest.raises(InvalidInput, match="input 'N' already exists in request"):
        decode_generate(b'{"N": 1, "N": 2}', model="m", version="", metadata=meta, max_depth=10)
    with pytest.raises(InvalidInput, match="non-string as string"):
        decode_generate(b'{"PROMPT": 3}', model="m", version="", metadata=meta, max_depth=10)
    with pytest.raises(InvalidInput, match="parameter 'o' has invalid type"):
        decode_generate(b'{"o": {"a": 1}}', model="m", version="", metadata=meta, max_depth=10)
    out = InferTensor("TEXT", "BYTES", (1,), np.array([b"yo"], dtype=np.object_))
    doc = encode_generate(InferResponse("m", "1", [out], id="7"))
    assert doc == {"id": "7", "model_name": "m", "model_version": "1", "TEXT": "yo"}
    assert list(doc) == ["TEXT", "id", "model_name", "model_version"]  # Triton 2.51's order


@pytest.mark.parametrize(
    ("body", "text"),
    [
        # read as an infer request's `data` (Triton turns the body into one): its kinds, its words
        (b'{"PROMPT": "hi", "N": 2.5}', "Unable to parse 'data': attempt to access JSON "
         "non-signed-integer as signed-integer (input 'N')"),
        (b'{"PROMPT": "hi", "N": "3"}', "non-signed-integer as signed-integer (input 'N')"),
        (b'{"PROMPT": null}', "Unable to parse JSON bytes array: attempt to access JSON "
         "non-string as string (input 'PROMPT')"),
        (b'{"PROMPT": {"a": 1}}', "non-string as string (input 'PROMPT')"),
        (b'{"PROMPT": "hi", "B": 1}', "Unable to parse 'data': attempt to access JSON "
         "non-boolean as boolean (input 'B')"),
    ],
)  # fmt: skip
def test_generate_values_are_read_as_infer_data_is(body: bytes, text: str) -> None:
    from runtime.codecs.generate import decode_generate
    from runtime.errors import InvalidInput

    meta = {"inputs": [{"name": "PROMPT", "datatype": "BYTES", "shape": [1]},
                       {"name": "N", "datatype": "INT32", "shape": [1]},
                       {"name": "B", "datatype": "BOOL", "shape": [1]}]}  # fmt: skip
    with pytest.raises(InvalidInput) as refused:
        decode_generate(body, model="m", version="", metadata=meta, max_depth=10)
    assert refused.value.message.endswith(text)
    ok = decode_generate(b'{"PROMPT": "hi", "N": 3, "B": true}', model="m", version="",
                         metadata=meta, max_depth=10)  # fmt: skip
    assert [(t.name, t.data.tolist(), str(t.data.dtype)) for t in ok.inputs] == [
        ("PROMPT", [b"hi"], "object"), ("N", [3], "int32"), ("B", [True], "bool")
    ]  # fmt: skip


def test_the_python_runtime_values_are_the_ones_thaw_up_checks() -> None:
    # thaw up checks `thaw.python_runtime` against thawwire's list at scan time; the runtime
    # reads it with its own enum: the two must not drift apart.
    from runtime.python.placement import PARAMETER, PythonRuntime
    from thawwire.runtime_parameters import PYTHON_RUNTIME, PYTHON_RUNTIMES

    assert PARAMETER == PYTHON_RUNTIME
    assert {r.value for r in PythonRuntime} == set(PYTHON_RUNTIMES)


@pytest.mark.parametrize("buckets", [[2.5, 0.1, 1.0, 10.0, 5.0], [1, 1, 2, 5, 5]])
def test_histogram_buckets_out_of_order_or_repeated_are_refused_as_triton_does(
    monkeypatch: pytest.MonkeyPatch, buckets: list[float]
) -> None:
    """Triton's qa custom_metrics model (test_histogram_args): TritonModelException."""
    created: list[object] = []

    class Host:
        def metric_family(self, name: str, description: str, kind: int) -> None:
            pass

        def metric_create(self, name: str, labels: object, bounds: object) -> int:
            created.append(bounds)
            return 0

    monkeypatch.setattr(pb_utils, "_host", Host())
    family = pb_utils.MetricFamily("h", "a histogram", pb_utils.MetricFamily.HISTOGRAM)
    with pytest.raises(pb_utils.TritonModelException, match="strictly increasing"):
        family.Metric(labels={}, buckets=buckets)
    assert created == []
    family.Metric(labels={}, buckets=[0.1, 1.0, 2.5])  # ascending: created
    family.Metric(labels={}, buckets=[])  # empty: created (Triton allows it)
    assert created == [[0.1, 1.0, 2.5], None]


def test_a_metric_whose_family_object_is_gone_refuses_every_operation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Triton's qa custom_metrics model (test_metric_lifetime_error): once the model drops its
    MetricFamily object, its Metric's set, increment and value raise, in Triton's words."""
    updates: list[tuple[int, str, float]] = []

    class Host:
        def metric_family(self, name: str, description: str, kind: int) -> None:
            pass

        def metric_create(self, name: str, labels: object, bounds: object) -> int:
            return 7

        def metric_update(self, key: int, op: str, value: float) -> None:
            updates.append((key, op, value))

        def metric_value(self, key: int) -> float:
            return 1.0

    monkeypatch.setattr(pb_utils, "_host", Host())
    family = pb_utils.MetricFamily("g", "a gauge", pb_utils.MetricFamily.GAUGE)
    metric = family.Metric(labels={"a": "b"})
    metric.set(3)
    assert metric.value() == 1.0 and updates == [(7, "set", 3.0)]

    del family  # the model's only reference
    for operation in (lambda: metric.set(10), lambda: metric.increment(10), metric.value):
        with pytest.raises(pb_utils.TritonModelException) as raised:
            operation()
        assert "the corresponding 'MetricFamily' has been deleted" in str(raised.value)
    assert updates == [(7, "set", 3.0)]  # nothing reached the server after it


_ARRAY = np.asarray([1, 2], dtype=np.int32)


@pytest.mark.parametrize(
    "call",
    [
        lambda: pb_utils.InferenceRequest(inputs=None, model_name="m"),
        lambda: pb_utils.InferenceRequest(model_name=None),
        lambda: pb_utils.InferenceRequest(model_name="m", requested_output_names=[None]),
        lambda: pb_utils.InferenceRequest(model_name="m", requested_output_names=None),
        lambda: pb_utils.InferenceRequest(model_name="m", correlation_id=None),
        lambda: pb_utils.InferenceRequest(model_name="m", request_id=None),
        lambda: pb_utils.InferenceRequest(model_name="m", model_version=None),
        lambda: pb_utils.InferenceRequest(model_name="m", flags=None),
        # Plain types everywhere but one element of a list (the checks' fast path).
        lambda: pb_utils.InferenceRequest(model_name="m", requested_output_names=["OUT", 3]),
        lambda: pb_utils.InferenceRequest(model_name="m", requested_output_names=("OUT", b"x")),
        lambda: pb_utils.InferenceRequest(model_name="m", flags=1.0),
        lambda: pb_utils.InferenceRequest(model_name="m", request_id=b"id"),
        lambda: pb_utils.InferenceResponse(output_tensors=None),
        lambda: pb_utils.Tensor(None, _ARRAY),
        lambda: pb_utils.Tensor("OUTPUT0", None),
        lambda: pb_utils.Tensor("", None),
        lambda: pb_utils.Logger.log("message", None),
        lambda: pb_utils.Logger.log("message", 1),
        lambda: pb_utils.Logger.log_info(None),
    ],
)
def test_a_wrongly_typed_argument_is_a_type_error_as_in_triton(call: Callable[[], object]) -> None:
    with pytest.raises(TypeError):
        call()


@pytest.mark.parametrize(
    "call",
    [
        lambda: pb_utils.InferenceRequest(inputs=[None], model_name="m"),
        lambda: pb_utils.InferenceRequest(model_name="m", correlation_id=1.5),
        lambda: pb_utils.InferenceRequest(inputs=(None,), model_name="m"),
        lambda: pb_utils.InferenceRequest(
            inputs=[pb_utils.Tensor("INPUT0", _ARRAY), None], model_name="m"
        ),
        lambda: pb_utils.InferenceRequest(model_name="m", requested_output_names=["OUT", ""]),
        lambda: pb_utils.InferenceResponse(output_tensors=[None]),
        lambda: pb_utils.Tensor("", _ARRAY),
        lambda: pb_utils.Tensor.from_dlpack("OUTPUT0", None),
        lambda: pb_utils.Tensor.from_dlpack("", _ARRAY),
    ],
)
def test_an_empty_tensor_or_name_is_a_model_exception_as_in_triton(
    call: Callable[[], object],
) -> None:
    with pytest.raises(pb_utils.TritonModelException):
        call()


def test_well_typed_arguments_still_build_requests_responses_and_tensors() -> None:
    request = pb_utils.InferenceRequest(
        inputs=[], requested_output_names=[], model_name=b"m", correlation_id="id-5",
        model_version=np.int64(2), flags=np.uint32(0),
    )  # fmt: skip
    assert request.model_name() == "m" and request.correlation_id() == "id-5"
    assert pb_utils.InferenceResponse().output_tensors() == []
    assert pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", _ARRAY)]).output_tensors()


def test_a_request_of_plain_and_of_subclassed_types_keeps_what_it_was_given() -> None:
    class Name(str):
        pass

    tensor = pb_utils.Tensor("INPUT0", _ARRAY)
    for outputs, flags in ((["OUT"], 1), (("OUT",), True), ([Name("OUT")], np.int32(1))):
        request = pb_utils.InferenceRequest(
            inputs=(tensor,), requested_output_names=outputs, model_name="m", flags=flags,
            correlation_id=7, request_id="r",
        )  # fmt: skip
        assert request.inputs() == [tensor] and request.requested_output_names() == {"OUT"}
        assert request.flags() == 1 and request.correlation_id() == 7


def test_get_model_dir_answers_the_bound_directory_and_then_the_last_one(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "1", tmp_path / "b" / "1"
    with pb_utils.bind_model_dir(first):
        assert pb_utils.get_model_dir() == str(first)
        with pb_utils.bind_model_dir(second):
            assert pb_utils.get_model_dir() == str(second)
        assert pb_utils.get_model_dir() == str(first)  # the inner binding is undone
    # Outside any binding (a model's own thread): the directory bound last.
    assert pb_utils.get_model_dir() == str(second)


def test_c_python_backend_utils_is_importable_with_its_shared_memory_pool() -> None:
    from runtime.python.stub.model_runner import install_pb_utils

    install_pb_utils()  # what the runner does before it imports a model
    import c_python_backend_utils  # type: ignore[import-not-found]

    assert c_python_backend_utils.shared_memory.free_memory() == pb_utils.SharedMemory.POOL_BYTES
    assert c_python_backend_utils.Tensor is pb_utils.Tensor


def test_a_correlation_id_or_flags_out_of_their_c_types_are_refused_as_tritons_binding() -> None:
    # uint64 and uint32 in Triton's binding: pybind11 refuses the cast when the request is built.
    for kwargs in ({"correlation_id": -1}, {"correlation_id": 1 << 64}, {"flags": -1}):
        with pytest.raises(RuntimeError, match=r"^Unable to cast Python instance to C\+\+ type"):
            pb_utils.InferenceRequest(
                model_name="m", inputs=[], requested_output_names=[], **kwargs
            )
    top = pb_utils.InferenceRequest(
        model_name="m", inputs=[], requested_output_names=[], correlation_id=(1 << 64) - 1
    )
    assert top.correlation_id() == (1 << 64) - 1
