"""A gRPC call ended with an error: a client's error is a verbose record (as the HTTP front's
"-> 400"), a server's a warning, each naming the code the call ends with."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
import pytest

from runtime.errors import InvalidInput, ModelErrorCancelled, ServingError
from runtime.grpc.handlers import abort_with


class _Aborted(Exception):
    pass


class _Context:
    def __init__(self) -> None:
        self.ended: tuple[Any, ...] = ()

    async def abort(self, code: grpc.StatusCode, message: str, trailing: Any = ()) -> None:
        self.ended = (code, message)
        raise _Aborted


@pytest.mark.parametrize(
    ("exc", "level", "code"),
    [
        (InvalidInput("bad input 'x'"), logging.DEBUG, grpc.StatusCode.INVALID_ARGUMENT),
        (ServingError("it broke"), logging.WARNING, grpc.StatusCode.INTERNAL),
        (ModelErrorCancelled("stopped"), logging.DEBUG, grpc.StatusCode.CANCELLED),
    ],
)
def test_the_record_names_the_code_the_call_ends_with(
    exc: ServingError, level: int, code: grpc.StatusCode, caplog: pytest.LogCaptureFixture
) -> None:
    context = _Context()
    with caplog.at_level(logging.DEBUG, logger="runtime.grpc.handlers"), pytest.raises(_Aborted):
        asyncio.run(abort_with(context, exc))
    assert context.ended == (code, exc.message)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (level, f"gRPC {code.name}: {exc.message}")
    ]
