"""`--exit-on-error=false` and a missing repository: the server answers, neither live nor ready,
its metadata still served (tritonserver's failed-to-initialize server, qa/L0_lifecycle
test_parse_error_noexit); without the flag given, the start fails and the server exits."""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from runtime.config import ModelControlMode, ServeConfig
from runtime.http.app import SERVER_STATE, build_app
from runtime.process import cli
from tests.fakes.model_service import FakeModelService


class FakeMetrics:
    """The metrics source build_app takes: an empty exposition."""

    def exposition(self) -> bytes:
        return b""


def _config(tmp_path: Path, exit_on_error: bool | None) -> ServeConfig:
    return ServeConfig(
        repository=tmp_path / "xyzx",  # not there
        model_control_mode=ModelControlMode.EXPLICIT,
        exit_on_error=exit_on_error,
    )


async def _settled(client: TestClient) -> None:
    for _ in range(200):  # the start runs in the background
        if (await client.get("/v2/health/live")).status != 200:
            return
        await asyncio.sleep(0.01)


async def test_exit_on_error_false_serves_not_live_not_ready(tmp_path: Path) -> None:
    service = FakeModelService()
    app = build_app(_config(tmp_path, False), service, FakeMetrics())
    async with TestClient(TestServer(app)) as client:
        await _settled(client)
        assert (await client.get("/v2/health/live")).status == 503
        assert (await client.get("/v2/health/ready")).status == 503
        assert (await (await client.get("/v2")).json())["name"] == "triton"
        state = app[SERVER_STATE]
        assert not state.failed.is_set()  # the process keeps serving
        assert "failed to stat file" in str(state.start_error)


class _FailingStart(FakeModelService):
    async def start(self) -> None:
        raise RuntimeError("a backend failed to start")


async def test_without_the_flag_a_failed_start_ends_the_server(tmp_path: Path) -> None:
    config = replace(_config(tmp_path, None), repository=tmp_path)
    app = build_app(config, _FailingStart(), FakeMetrics())
    async with TestClient(TestServer(app)) as client:
        await _settled(client)
        assert app[SERVER_STATE].failed.is_set()  # runtime.process.server exits 1 on it


def test_without_the_flag_a_missing_repository_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser(prog="thaw")
    cli.register(parser.add_subparsers())
    assert cli.run(parser.parse_args(["serve", str(tmp_path / "xyzx")])) == 2
    assert "is not a directory" in capsys.readouterr().err
