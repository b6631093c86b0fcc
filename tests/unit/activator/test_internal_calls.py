"""The deployment's token (thawwire.internal_calls): made, written 0600, read back; a file that
holds no token is refused in words; the cap is lifted only for the token itself; the token is
never in a repr; both servers' flags take it, and a Kubernetes activator without a file keeps
the client cap; a header forward pattern never copies it into a request's parameters; the
activator's own calls to replicas carry it (a load's override files), with no token none."""

from __future__ import annotations

import argparse
import re
import stat
from pathlib import Path

import pytest
from aiohttp import web

from activator.config import ActivatorConfig, BoundAddresses
from activator.errors import ConfigError as UpConfigError
from activator.process import cli as up_cli
from activator.scaler.local.backend import serve_args
from activator.scaler.local_config import LocalConfig
from activator.surfaces.proxy import new_session
from runtime.config import ConfigError as ServeConfigError
from runtime.header_forward import forwarded_headers
from runtime.process import cli as serve_cli
from thawserver.body_limit import body_cap
from thawwire.internal_calls import (
    HEADER,
    InternalCalls,
    TokenError,
    new_token,
    read_token,
    write_token,
)


def test_a_token_is_written_for_its_user_alone_and_read_back(tmp_path: Path) -> None:
    token = new_token()
    assert len(token) >= 43 and token != new_token()
    path = tmp_path / "token"
    write_token(path, token)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_token(path) == token
    path.write_text(token + "\n")  # a mounted Secret may end in a newline
    assert read_token(path) == token
    with pytest.raises(FileExistsError):  # never over an existing file (or a planted link)
        write_token(path, token)


@pytest.mark.parametrize(
    "content, words",
    [
        (b"", "holds no token"),
        (b"short", "holds no token"),
        (b"a b" * 20, "holds no token"),
        (b"\xff" * 40, "holds no token"),
        (b"x" * 5000, "over 4096 bytes"),
    ],
)
def test_a_file_that_holds_no_token_is_refused_in_words(
    tmp_path: Path, content: bytes, words: str
) -> None:
    path = tmp_path / "token"
    path.write_bytes(content)
    with pytest.raises(TokenError, match=words):
        read_token(path)
    with pytest.raises(TokenError, match="cannot read"):
        read_token(tmp_path / "missing")


def test_only_the_token_lifts_the_cap_and_no_repr_shows_it() -> None:
    calls = InternalCalls("t" * 43, max_body_bytes=4096)
    assert body_cap(calls, "t" * 43, public=1024)[0] == 4096
    assert body_cap(calls, "t" * 42, public=1024)[0] == 1024
    assert body_cap(calls, None, public=1024)[0] == 1024
    assert body_cap(calls, "t" * 43 + "\u00e9", public=1024)[0] == 1024
    assert body_cap(calls, "t" * 43, public=8192)[0] == 8192  # never below the client cap
    assert body_cap(calls, "t" * 43, public=1024) == (4096, "--max-internal-body-bytes")
    assert body_cap(calls, "x" * 43, public=1024) == (1024, "--max-body-bytes")
    assert body_cap(None, "t" * 43, public=1024) == (1024, "--max-body-bytes")
    assert "t" * 43 not in repr(calls) and "hidden" in repr(calls)
    config = ActivatorConfig(repository=Path("repo"), internal_calls=calls)
    assert "t" * 43 not in repr(config)


def _up(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    up_cli.register(parser.add_subparsers())
    return parser.parse_args(["up", *argv])


def test_thaw_up_makes_a_token_locally_reads_a_given_one_and_has_none_on_kubernetes(
    tmp_path: Path,
) -> None:
    made = up_cli.internal_calls(_up(str(tmp_path)), kubernetes=False)
    assert made is not None and made.max_body_bytes == 4 << 30
    assert up_cli.internal_calls(_up(str(tmp_path)), kubernetes=True) is None
    path = tmp_path / "token"
    write_token(path, "k" * 40)
    given = _up(
        str(tmp_path), "--internal-token-file", str(path), "--max-internal-body-bytes", "4096"
    )
    for kubernetes in (False, True):
        calls = up_cli.internal_calls(given, kubernetes=kubernetes)
        assert calls == InternalCalls("k" * 40, 4096)
    path.write_text("nope")
    with pytest.raises(UpConfigError, match=r"--internal-token-file: .* holds no token"):
        up_cli.internal_calls(given, kubernetes=True)
    with pytest.raises(UpConfigError, match="--max-internal-body-bytes"):
        up_cli.build_config(_up(str(tmp_path), "--max-internal-body-bytes", "10"))


def test_every_replica_gets_the_token_file_and_the_internal_cap(tmp_path: Path) -> None:
    calls = InternalCalls("z" * 43, 1 << 20)
    config = ActivatorConfig(repository=tmp_path, internal_calls=calls)
    bound = BoundAddresses(http_port=1, grpc_port=None, front_door_url="http://127.0.0.1:1")
    argv = serve_args(
        config, LocalConfig(), bound, handoff_socket=tmp_path / "s", internal_token=tmp_path / "t"
    )
    at = argv.index("--internal-token-file")
    assert argv[at : at + 4] == [
        "--internal-token-file", str(tmp_path / "t"), "--max-internal-body-bytes", str(1 << 20)
    ]  # fmt: skip
    assert "z" * 43 not in " ".join(argv)  # a file's path, never the token: argv is public


def _serve(*argv: str):  # type: ignore[no-untyped-def]
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    return serve_cli.build_config(parser.parse_args(["serve", *argv]))


def test_thaw_serve_reads_the_token_file_and_refuses_a_bad_one(tmp_path: Path) -> None:
    assert _serve("repo").internal_calls is None
    path = tmp_path / "token"
    write_token(path, "s" * 40)
    config = _serve("repo", "--internal-token-file", str(path), "--max-internal-body-bytes", "2048")
    assert config.internal_calls == InternalCalls("s" * 40, 2048)
    assert "s" * 40 not in repr(config)
    with pytest.raises(ServeConfigError, match="cannot read"):
        _serve("repo", "--internal-token-file", str(tmp_path / "missing"))
    with pytest.raises(ServeConfigError, match="max_internal_body_bytes"):
        _serve("repo", "--internal-token-file", str(path), "--max-internal-body-bytes", "1")


def test_no_forward_pattern_copies_the_token_into_parameters() -> None:
    headers = [(HEADER.encode(), b"secret" * 8), (b"x-user", b"u"), (HEADER.lower(), "s" * 40)]
    found = forwarded_headers(re.compile(".*"), headers)
    assert found == {"x-user": "u"}
    assert forwarded_headers(re.compile("thaw", re.IGNORECASE), headers) == {}


async def test_the_activators_own_calls_to_replicas_carry_the_token_and_only_with_one() -> None:
    seen: list[str | None] = []

    async def load(request: web.Request) -> web.Response:
        seen.append(request.headers.get(HEADER))
        return web.Response()

    app = web.Application()
    app.router.add_post("/v2/repository/models/{model}/load", load)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/v2/repository/models/m/load"
    token = new_token()
    try:
        for internal in (InternalCalls(token, 1 << 30), None):
            session = new_session(internal)
            try:
                async with session.post(url, json={}) as response:
                    assert response.status == 200
            finally:
                await session.close()
    finally:
        await runner.cleanup()
    assert seen == [token, None]
