"""`thaw up` flag handling and the `thaw status` table."""

from __future__ import annotations

import argparse
import http.server
import io
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from activator.errors import ConfigError
from activator.observe.cost import CostFigures
from activator.observe.status_document import CostReport, ModelState, ModelStatus, StatusDocument
from activator.process import cli, status_cli
from activator.scaler.backend import PoolStatus
from activator.scaler.local_config import LocalConfig


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli.register(sub)
    status_cli.register(sub)
    return parser.parse_args(list(argv))


def test_scale_flags_become_the_default_settings(tmp_path: Path) -> None:
    args = _parse("up", str(tmp_path), "--max-replicas", "3", "--scale-to-zero-grace-s", "5")
    config = cli.build_config(args)
    assert config.defaults.max_replicas == 3
    assert config.defaults.scale_to_zero_grace_s == 5.0
    assert config.defaults.min_replicas == 0
    assert config.host == "127.0.0.1" and config.port == 8000


def test_the_scaler_is_chosen_at_the_cli_with_its_own_settings(tmp_path: Path) -> None:
    args = _parse(
        "up", str(tmp_path), "--scaler", "local", "--warm-pool", "3",
        "--preload-frameworks", "onnxruntime", "--direct-max-age-s", "4",
    )  # fmt: skip
    config = cli.build_config(args)
    assert isinstance(config.scaler, LocalConfig)
    assert config.scaler.pool.min_idle == 3
    assert config.scaler.preload_frameworks == ("onnxruntime",)
    assert config.scaler.direct_max_age_s == 4.0
    assert cli.build_config(_parse("up", str(tmp_path))).scaler == LocalConfig(
        serve_command=config.scaler.serve_command
    )  # --scaler local is the default


def test_pool_and_cache_budgets_are_flags(tmp_path: Path) -> None:
    args = _parse(
        "up", str(tmp_path), "--pool-memory-bytes", "1000000", "--pool-window-s", "30",
        "--fork-server", "off", "--host-cache-bytes", "0", "--cache-max-bytes", "5000000",
    )  # fmt: skip
    config = cli.build_config(args)
    assert config.scaler.pool.budget_bytes == 1_000_000 and config.scaler.pool.window_s == 30
    assert not config.scaler.fork_server and config.scaler.arena_bytes == 0
    assert config.host_cache_bytes == 0 and config.cache_max_bytes == 5_000_000
    default = cli.build_config(_parse("up", str(tmp_path)))
    assert default.scaler.fork_server and default.host_cache_bytes > 0  # on by default here


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--pool-memory-bytes", "-1", "`--pool-memory-bytes` = -1, must be in [0, "),
        ("--pool-window-s", "nan", "`--pool-window-s` = nan, must be in [0, 86400]"),
        ("--cache-max-bytes", "0", "`--cache-max-bytes` = 0, must be in [1, "),
        ("--host-cache-bytes", "-5", "`--host-cache-bytes` = -5, must be in [0, "),
    ],
)
def test_bad_budgets_are_refused_naming_the_flag(
    tmp_path: Path, flag: str, value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        cli.build_config(_parse("up", str(tmp_path), flag, value))


def test_an_unknown_scaler_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        _parse("up", str(tmp_path), "--scaler", "nomad")
    assert info.value.code == 2
    assert "invalid choice: 'nomad'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--stable-window-s", "3"), "`--stable-window-s` = 3, must be in [6, 3600]"),
        (("--port", "70000"), "`--port` = 70000, must be in [0, 65535]"),
        (("--warm-pool", "-1"), "`--warm-pool` = -1, must be in [0, 64]"),
        (("--max-held-requests", "lots"), "`--max-held-requests` = 'lots', must be an integer"),
    ],
)
def test_bad_flags_are_refused_in_one_form(
    tmp_path: Path, argv: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        cli.build_config(_parse("up", str(tmp_path), *argv))
    assert message in info.value.message


def test_missing_repository_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _parse("up", str(tmp_path / "nope"), "--cache", str(tmp_path / "c"))
    assert cli.run(args) == 2
    assert "is not a directory" in capsys.readouterr().err


def _model(name: str, state: ModelState, **fields: Any) -> ModelStatus:
    zero = {"replicas_ready": 0, "replicas_desired": 0, "replicas_starting": 0}
    zero.update(held_requests=0, in_flight=0, direct_connections=0)
    return ModelStatus(name, state, **{**zero, **fields})


def test_status_table_lists_every_model() -> None:
    resnet = _model(
        "resnet50", ModelState.WARM, replicas_ready=2, replicas_desired=3, held_requests=4,
        in_flight=7, last_cold_start_s=0.2412, last_error=None,
    )  # fmt: skip
    llm = _model(
        "llm", ModelState.WARM, last_cold_start_s=2.5, last_error=None, first_token_cold_s=2.61,
        first_token_warm_s=0.034,
    )  # fmt: skip
    bert = _model(
        "bert", ModelState.COLD, last_cold_start_s=None, last_error="failed to load: boom"
    )
    doc = StatusDocument(models=(resnet, bert, llm), warm_pool=PoolStatus(size=1, ready=1))
    table = status_cli.format_table(doc)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["MODEL", "STATE", "READY/DESIRED"]
    assert "FIRST TOKEN COLD/WARM" in lines[0]
    assert lines[1].split()[:8] == ["resnet50", "warm", "2/3", "4", "7", "0.241", "s", "-"]
    assert lines[2].split()[:6] == ["bert", "cold", "0/0", "0", "0", "-"]
    assert lines[3].split()[5:8] == ["2.500", "s", "2.610/0.034"]  # cold start, first token
    assert "failed to load: boom" in lines[2]
    assert lines[-1] == "warm pool: 1/1 ready"


def test_status_table_shows_image_states_and_the_pools_memory() -> None:
    resnet = _model("resnet50", ModelState.COLD, last_cold_start_s=None, last_error=None)
    pool = PoolStatus(
        size=2, ready=1, starting=1, source="fork-server", idle_pss_bytes=(72 << 20,),
        server_pss_bytes=156 << 20, budget_bytes=2 << 30, demand=2, limit="demand",
        last_start_s=0.094,
    )  # fmt: skip
    doc = StatusDocument(models=(resnet,), warm_pool=pool, image_builds={"resnet50": "cached"})
    lines = status_cli.format_table(doc).splitlines()
    assert "IMAGE" in lines[0] and "cached" in lines[1]
    assert lines[2] == (
        "warm pool: 1/2 ready, 1 starting (fork-server; size set by demand; 2 models woke "
        "recently; last start -> ready 0.094 s)"
    )
    assert lines[3] == (
        "  memory (PSS): idle processes 72 MiB; fork server 156 MiB; budget 2048 MiB"
    )


def _cost_doc(price: float | None = None) -> StatusDocument:
    figures = (
        CostFigures("bert", 3600.0, 91.0, 1, 3509.0, 1, 3600.0),
        CostFigures("resnet", 3600.0, 720.0, 2, 1800.0, 2, 7200.0),
    )
    return StatusDocument(
        models=(), warm_pool=PoolStatus(1, 1), cost=CostReport(gpu_hour_price=price, models=figures)
    )


def test_cost_view_shows_used_vs_always_on_per_model_and_in_total() -> None:
    lines = status_cli.format_cost(_cost_doc()).splitlines()
    assert lines[0].split()[:5] == ["MODEL", "GPUS", "PEAK", "REPLICA-S", "GPU-S"]
    bert, resnet, total = (line.split() for line in lines[1:4])
    # model, gpus, peak, replica-s, gpu-s, idle, always-on, saved replica-s, saved gpu-s, %
    assert bert == ["bert", "1", "1", "91.0", "91.0", "3,509.0", "3,600.0", "3,509.0",
                    "3,509.0", "97%"]  # fmt: skip
    assert resnet[3:] == ["720.0", "1,440.0", "1,800.0", "7,200.0", "6,480.0", "12,960.0", "90%"]
    assert total[0] == "TOTAL" and total[1:4] == ["3", "811.0", "1,531.0"]
    assert "SPENT" not in lines[0]
    assert "min_replicas = peak" in lines[-1]


def test_cost_view_prices_gpu_seconds_with_the_server_or_the_flag_price() -> None:
    served = status_cli.format_cost(_cost_doc(price=3.6)).splitlines()
    assert served[0].split()[-3:] == ["SPENT", "SAVED", "MONEY"]
    # bert: 91 GPU-s used, 3509 saved, at 3.6 per GPU-hour
    assert served[1].split()[-2:] == ["0.09", "3.51"]
    flagged = status_cli.format_cost(_cost_doc(price=3.6), gpu_hour_price=36.0).splitlines()
    assert flagged[1].split()[-2:] == ["0.91", "35.09"]
    assert "money at 36 per GPU-hour" in flagged[-1]


def test_watch_redraws_until_interrupted_and_survives_a_restarting_server() -> None:
    out = io.StringIO()
    answers: list[str | Exception] = [
        "frame 1", status_cli.StatusUnreadable("connection refused"), "frame 3",
    ]  # fmt: skip
    slept: list[float] = []

    def frame() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if not answers:
            raise KeyboardInterrupt

    code = status_cli.watch(frame, interval_s=1.5, out=out, clear=True, sleep=sleep)
    assert code == 0
    text = out.getvalue()
    assert text.count("\x1b[H\x1b[2J") == 3  # the screen is cleared before each frame
    assert "frame 1" in text and "frame 3" in text
    assert "connection refused (retrying every 1.5 s)" in text
    assert slept == [1.5, 1.5, 1.5]


def test_watch_without_a_terminal_prints_frames_one_after_another() -> None:
    out = io.StringIO()
    status_cli.watch(
        lambda: "f", interval_s=1, out=out, clear=False, frames=3, sleep=lambda _: None
    )
    assert out.getvalue() == "f\nf\nf\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--watch", "0"), "`--watch` = 0, must be in [0.1, 3600]"),
        (("--gpu-hour-price", "-2"), "`--gpu-hour-price` = -2, must be in [0, 1000000]"),
    ],
)
def test_bad_status_flags_exit_2_with_a_message(
    argv: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert status_cli.run(_parse("status", "--url", "http://127.0.0.1:9", *argv)) == 2
    assert message in capsys.readouterr().err


def test_thaw_up_takes_a_gpu_hour_price(tmp_path: Path) -> None:
    assert cli.build_config(_parse("up", str(tmp_path))).gpu_hour_price is None
    config = cli.build_config(_parse("up", str(tmp_path), "--gpu-hour-price", "2.5"))
    assert config.gpu_hour_price == 2.5
    with pytest.raises(ConfigError, match=r"`--gpu-hour-price` = -1, must be in \[0, 1000000\]"):
        cli.build_config(_parse("up", str(tmp_path), "--gpu-hour-price", "-1"))


def test_kubernetes_has_no_host_memory_tier(tmp_path: Path) -> None:
    # The tier is a tmpfs directory local replicas map; pods run on other nodes.
    config = cli.build_config(_parse("up", str(tmp_path), "--scaler", "kubernetes"))
    assert config.host_cache_bytes == 0 and config.cache_dir is None
    assert not config.build_images  # no start-up builds or pulls on a cluster
    with pytest.raises(ConfigError, match="must be 0 with --scaler kubernetes"):
        cli.build_config(
            _parse("up", str(tmp_path), "--scaler", "kubernetes", "--host-cache-bytes", "1024")
        )


def test_status_table_and_document_show_explicit_modes_load_state() -> None:
    later = _model("later", ModelState.COLD, last_cold_start_s=None, last_error=None,
                   load_state="not loaded")  # fmt: skip
    gone = _model("gone", ModelState.COLD, last_cold_start_s=None, last_error=None,
                  load_state="unloaded")  # fmt: skip
    ok = _model("ok", ModelState.COLD, last_cold_start_s=None, last_error=None,
                load_state="loaded")  # fmt: skip
    doc = StatusDocument(models=(later, gone, ok), warm_pool=PoolStatus(size=1, ready=1))
    lines = status_cli.format_table(doc).splitlines()
    assert lines[1].split()[:4] == ["later", "cold", "(not", "loaded)"]
    assert lines[2].split()[:3] == ["gone", "cold", "(unloaded)"]
    assert lines[3].split()[:3] == ["ok", "cold", "0/0"]
    again = StatusDocument.from_json(doc.to_json())
    assert [m.load_state for m in again.models] == ["not loaded", "unloaded", "loaded"]


def test_status_reads_a_url_given_as_host_and_port_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`thaw status --url localhost:8000` (as curl takes it) reads http://localhost:8000, a
    real HTTP server on loopback here; it used to fail with "unknown url type"."""
    doc = StatusDocument(
        models=(_model("resnet50", ModelState.COLD, last_cold_start_s=None, last_error=None),),
        warm_pool=PoolStatus(size=1, ready=1),
    )
    body = json.dumps(doc.to_json()).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path == "/thaw/status"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body) if ok else 0))
            self.end_headers()
            if ok:
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        assert status_cli.run(_parse("status", "--url", f"127.0.0.1:{port}")) == 0
        out = capsys.readouterr().out
        assert out.splitlines()[1].split()[:2] == ["resnet50", "cold"]
    finally:
        server.shutdown()
        server.server_close()
