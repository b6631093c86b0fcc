"""The response cache: keyed by model, version, exact input bytes and the outputs it holds;
bounded, LRU."""

from __future__ import annotations

import numpy as np

from runtime.inference import InferRequest, InferResponse, InferTensor
from runtime.models.response_cache import ResponseCache


def _request(values: list[float], *, name: str = "X") -> InferRequest:
    data = np.asarray(values, np.float32)
    return InferRequest("m", "1", [InferTensor(name, "FP32", data.shape, data)])


def _response(nbytes: int) -> InferResponse:
    data = np.zeros(nbytes // 4, np.float32)
    return InferResponse("m", "1", [InferTensor("Y", "FP32", data.shape, data)])


def test_the_key_changes_with_any_byte_name_shape_model_version_or_output() -> None:
    def key(m: str, v: str, request: InferRequest, outputs: tuple[str, ...] = ("Y",)) -> bytes:
        return ResponseCache.key(m, v, request, outputs)

    base = key("m", "1", _request([1.0, 2.0]))
    assert base == key("m", "1", _request([1.0, 2.0]))
    assert base != key("m", "1", _request([1.0, 2.5]))
    assert base != key("m", "1", _request([1.0, 2.0], name="W"))
    assert base != key("m", "2", _request([1.0, 2.0]))
    assert base != key("n", "1", _request([1.0, 2.0]))
    assert base != key("m", "1", _request([1.0, 2.0]), ("Y", "Z"))
    assert base == key("m", "1", _request([1.0, 2.0]), ("Y", "Y"))  # a name twice: one output
    flat = _request([1.0, 2.0])
    shaped = _request([1.0, 2.0])
    shaped.inputs[0] = InferTensor("X", "FP32", (2, 1), shaped.inputs[0].data.reshape(2, 1))
    assert key("m", "1", flat) != key("m", "1", shaped)  # same bytes, other shape


def test_hits_return_fresh_copies_and_the_bound_evicts_the_least_recently_used() -> None:
    cache = ResponseCache(max_bytes=3 * (256 + 400))
    keys = [bytes([i]) for i in range(4)]
    for k in keys[:3]:
        cache.put(k, _response(400))
    assert len(cache) == 3
    hit = cache.get(keys[0], "m", "1")  # keys[0] is now the most recently used
    assert hit is not None and hit.outputs[0].data.nbytes == 400
    hit.outputs.clear()  # a caller trimming its answer leaves the entry whole
    assert cache.get(keys[0], "m", "1").outputs  # type: ignore[union-attr]
    cache.put(keys[3], _response(400))  # over the bound: keys[1] (least recent) goes
    assert cache.get(keys[1], "m", "1") is None and cache.evictions == 1
    assert all(cache.get(k, "m", "1") is not None for k in (keys[0], keys[2], keys[3]))
    assert cache.used_bytes <= cache.max_bytes


def test_an_answer_larger_than_the_whole_cache_is_not_kept() -> None:
    cache = ResponseCache(max_bytes=1000)
    cache.put(b"k", _response(4000))
    assert len(cache) == 0 and cache.get(b"k", "m", "1") is None
