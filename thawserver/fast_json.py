"""JSON for the hot path: orjson's speed with exactly the stdlib `json` module's results.

orjson parses a small infer body ~10x and writes a response ~15x faster than `json` (floats are
most of these bodies, and they are what the stdlib is slowest at). Where the two disagree, the
stdlib answer is kept, so installing orjson changes speed only:

- `loads`: orjson refuses some of what `json.loads` accepts (`NaN`/`Infinity`, a BOM, UTF-16,
  lone surrogates); those texts are handed to `json.loads`, which parses them or raises its
  usual error. It also reads integers past 64 bits as floats, where the stdlib keeps them exact
  (an INT64 input of 2**70 must stay a 400, not become a rounded float): a text with a run of
  19 or more digits goes to the stdlib directly (a ~1 µs scan for a small body).
- `dumps`: compact, like `json.dumps(..., separators=(",", ":"))`. orjson writes NaN and
  infinities as `null`, so a result containing `null` is redone by the stdlib (which writes
  `NaN`, as before); values orjson cannot write (huge ints, non-str keys) fall back too. Text is
  written as UTF-8 rather than `\\u` escapes: the same JSON.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

__all__ = ["HAVE_ORJSON", "dumps", "loads"]

orjson: Any
try:
    orjson = importlib.import_module("orjson")
except ImportError:  # optional speed-up; everything works without it
    orjson = None

HAVE_ORJSON = orjson is not None

# Every digit becomes "0" and every other byte a space: a long digit run is then one `in` away.
_DIGITS_ONLY = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_DIGITS = b"0" * 19  # below -2**63 (19 digits) or 2**64 and up (20 digits)


def _std_dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


if orjson is not None:
    _orjson_loads = orjson.loads
    _orjson_dumps = orjson.dumps
    _DecodeError = orjson.JSONDecodeError

    def loads(data: bytes) -> Any:
        """Parse JSON like `json.loads` (ValueError or RecursionError when it would raise)."""
        if _LONG_DIGITS in data.translate(_DIGITS_ONLY):  # maybe an integer past 64 bits
            return json.loads(data)
        try:
            return _orjson_loads(data)
        except _DecodeError:
            return json.loads(data)

    def dumps(value: Any) -> bytes:
        """Compact JSON bytes of `value`, equal in meaning to the stdlib's."""
        try:
            out: bytes = _orjson_dumps(value)
        except TypeError:
            return _std_dumps(value)
        if b"null" in out:  # maybe a NaN or infinity that orjson wrote as null
            return _std_dumps(value)
        return out

else:

    def loads(data: bytes) -> Any:
        """Parse JSON like `json.loads` (ValueError or RecursionError when it would raise)."""
        return json.loads(data)

    def dumps(value: Any) -> bytes:
        """Compact JSON bytes of `value`, equal in meaning to the stdlib's."""
        return _std_dumps(value)
