"""Triton's response cache: answers of earlier identical requests, kept under one byte bound.

    key(model, version, request, outputs) -> digest of the model, its version, the exact
                                                inputs and the outputs the answer holds
    get(key) -> a copy of the cached answer | None     (a hit refreshes the entry)
    put(key, response)                                  (least recently used entries go first)

One cache per server (`--cache-config local,size=N`), shared by every model whose config says
`response_cache { enable: true }`. The key covers the model name, the version, and each input's
name, datatype, shape and bytes, as Triton's does; it also covers the names of the outputs the
answer holds (those the request asked for; every declared one when it asked for none), since
Thaw's backends compute only those (Triton's key leaves them out, so two requests asking for
different outputs would share one answer there). A request naming every output and one naming
none share an answer, as in Triton: an ensemble's step, which names the outputs it maps, hits
what a client's plain request to that model left. An entry's size is
its output bytes plus a fixed overhead; an answer larger than the whole cache is not kept. Used
on the event loop only.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from runtime.datatypes import serialize_bytes
from runtime.inference import InferRequest, InferResponse, InferTensor

__all__ = ["ResponseCache"]

# Bookkeeping per entry (key, tensor objects, list): counted against the bound as well.
_ENTRY_OVERHEAD = 256


@dataclass(frozen=True, slots=True)
class _Entry:
    outputs: tuple[InferTensor, ...]
    nbytes: int


class ResponseCache:
    """An LRU map from request digests to answers, at most `max_bytes` in all."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"`max_bytes` = {max_bytes}, must be >= 0")
        self.max_bytes = max_bytes
        self.used_bytes = 0
        self.evictions = 0
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(model: str, version: str, request: InferRequest, outputs: Iterable[str]) -> bytes:
        digest = hashlib.blake2b(digest_size=32)
        for text in (model, version):
            _text(digest, text)
        for tensor in sorted(request.inputs, key=lambda t: t.name):
            _text(digest, tensor.name)
            _text(digest, tensor.datatype)
            digest.update(struct.pack(f"<{len(tensor.shape)}q", *tensor.shape))
            data = tensor.data
            raw = serialize_bytes(data) if tensor.datatype == "BYTES" else data.tobytes()
            digest.update(struct.pack("<Q", len(raw)))
            digest.update(raw)
        for name in sorted(set(outputs)):
            _text(digest, name)
        return digest.digest()

    def get(self, key: bytes, model: str, version: str) -> InferResponse | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        # A fresh response and list each time: callers trim outputs and set fields on it.
        return InferResponse(model, version, list(entry.outputs))

    def put(self, key: bytes, response: InferResponse) -> None:
        nbytes = _ENTRY_OVERHEAD + sum(_nbytes(t) for t in response.outputs)
        if nbytes > self.max_bytes or key in self._entries:
            return
        while self.used_bytes + nbytes > self.max_bytes and self._entries:
            _, evicted = self._entries.popitem(last=False)
            self.used_bytes -= evicted.nbytes
            self.evictions += 1
        # Copies: an output may be a view into a whole batch's array, which must not live on.
        outputs = tuple(
            InferTensor(t.name, t.datatype, t.shape, t.data.copy()) for t in response.outputs
        )
        self._entries[key] = _Entry(outputs, nbytes)
        self.used_bytes += nbytes


def _text(digest: hashlib.blake2b, text: str) -> None:
    raw = text.encode()
    digest.update(struct.pack("<I", len(raw)))
    digest.update(raw)


def _nbytes(tensor: InferTensor) -> int:
    data = tensor.data
    if data.dtype.kind == "O":
        return sum(len(item) if isinstance(item, bytes) else 64 for item in data.reshape(-1))
    return int(data.nbytes)
