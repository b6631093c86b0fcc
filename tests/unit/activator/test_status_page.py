"""The status page's routes (`/ui/`, `/thaw/history`) and the cost view in the status document
and /metrics, against the activator app with a fake scaler backend and a tiny upstream."""

from __future__ import annotations

import asyncio
import re
import time
import tomllib
from collections.abc import AsyncIterator
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from activator.config import ActivatorConfig, ScaleSettings
from activator.observe.status_document import StatusDocument
from activator.surfaces.app import build_app
from activator.surfaces.status_page import ASSETS
from tests.fakes.scaler_backend import WAKE_DEADLINE_S, FakeScalerBackend
from tests.fakes.upstream import MODEL_CONFIG, start_upstream

ROOT = Path(__file__).resolve().parents[3]
UI = ROOT / "activator" / "surfaces" / "ui"

GPU_CONFIG = MODEL_CONFIG + "instance_group [ {{ kind: KIND_GPU gpus: [ 0, 1 ] }} ]\n"


@pytest.fixture
async def activator(tmp_path: Path) -> AsyncIterator[tuple[str, FakeScalerBackend]]:
    upstream = await start_upstream()
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text(MODEL_CONFIG.format(name="m"))
    (tmp_path / "gpu" / "1").mkdir(parents=True)
    (tmp_path / "gpu" / "config.pbtxt").write_text(GPU_CONFIG.format(name="gpu"))
    config = ActivatorConfig(
        repository=tmp_path,
        build_images=False,
        defaults=ScaleSettings(activation_timeout_s=WAKE_DEADLINE_S),
        tick_s=0.05,
        history_interval_s=0.05,
        gpu_hour_price=2.5,
    )
    url = str(upstream.make_url("")).rstrip("/")
    backend = FakeScalerBackend(url=url, open_gate=True, claim_s=0.03, restore_s=0.07)
    server = TestServer(build_app(config, backend=backend), host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/"), backend
    await server.close()
    await upstream.close()


async def _get(url: str, **kwargs: Any) -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as s, s.get(url, **kwargs) as r:
        return r.status, dict(r.headers), await r.read()


async def _json(url: str) -> Any:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def test_the_page_and_its_assets_are_served_with_a_same_origin_policy(
    activator: tuple[str, FakeScalerBackend],
) -> None:
    url, _ = activator
    status, headers, _ = await _get(f"{url}/ui", allow_redirects=False)
    assert status == 302 and headers["Location"] == "/ui/"
    status, headers, body = await _get(f"{url}/ui/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    assert b'src="status.js"' in body and b'href="status.css"' in body
    for name, kind in ASSETS.items():
        status, headers, body = await _get(f"{url}/ui/{name}")
        assert status == 200 and headers["Content-Type"].startswith(kind)
        assert body == (UI / name).read_bytes()


async def test_anything_else_under_ui_is_a_json_404(
    activator: tuple[str, FakeScalerBackend],
) -> None:
    url, _ = activator
    for path in ("/ui/secret.py", "/ui/..%2fapp.py", "/ui/index.html/x"):
        status, headers, body = await _get(url + path)
        assert status == 404, path
        assert headers["Content-Type"] == "application/json" and b'"error"' in body


def test_the_page_loads_nothing_from_elsewhere() -> None:
    """No CDN, no library: every file the page names is one of the served assets."""
    html = (UI / "index.html").read_text()
    linked = set(re.findall(r'(?:src|href)="([^"]+)"', html))
    assert {"status.js", "status.css"} <= linked
    for target in linked:
        assert "://" not in target and not target.startswith("//"), target
    script = (UI / "status.js").read_text()
    fetched = re.findall(r'getJSON\(\s*[`"]([^`"]+)', script)
    assert fetched and all(f.startswith("../thaw/") for f in fetched)
    assert "import " not in script and "://" not in script.replace("http://www.w3.org/2000/svg", "")


def test_every_asset_is_package_data_in_pyproject() -> None:
    """An installed (non-editable) Thaw must carry the page: pyproject's package-data globs
    cover every file in activator/surfaces/ui/, and every file served is there."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["activator.surfaces"]
    files = sorted(p.relative_to(ROOT / "activator" / "surfaces").as_posix() for p in UI.iterdir())
    assert files == sorted(f"ui/{name}" for name in ASSETS)
    for name in files:
        assert any(fnmatch(name, g) for g in globs), name


async def test_history_since_must_be_a_sample_number(
    activator: tuple[str, FakeScalerBackend],
) -> None:
    url, _ = activator
    for bad in ("-1", "x", "1e3", "9" * 30):
        status, _, body = await _get(f"{url}/thaw/history", params={"since": bad})
        assert status == 400 and b"'since' must be a sample number" in body


async def test_a_wake_up_shows_in_the_history_cold_starts_cost_and_metrics(
    activator: tuple[str, FakeScalerBackend],
) -> None:
    url, _ = activator
    before = await _json(f"{url}/thaw/history")
    assert set(before["models"]) == {"gpu", "m"}
    assert before["interval_s"] == 0.05
    async with aiohttp.ClientSession() as s:
        for model in ("m", "gpu"):
            async with s.post(f"{url}/v2/models/{model}/infer", data=b"{}") as r:
                assert r.status == 200

    async def doc() -> StatusDocument:
        return StatusDocument.from_json(await _json(f"{url}/thaw/status"))

    seen: list[StatusDocument] = []

    async def costs_accrue() -> bool:
        seen.append(await doc())
        return all(c.replica_seconds > 0.1 for c in seen[-1].cost.models)

    deadline = time.monotonic() + 10  # a bound on the wait for the ledger's ticks, not a speed
    while not await costs_accrue():
        if time.monotonic() > deadline:
            raise AssertionError(f"replica-seconds never accrued: {seen[-1].cost}")
        await asyncio.sleep(0.02)
    status = seen[-1]
    assert {c.model for c in status.cold_starts} == {"gpu", "m"}
    cold = next(c for c in status.cold_starts if c.model == "m")
    assert (cold.claim_s, cold.restore_s) == (0.03, 0.07) and cold.total_s is not None
    cost = {c.model: c for c in status.cost.models}
    assert cost["gpu"].gpus_per_replica == 2 and cost["m"].gpus_per_replica == 0
    assert cost["gpu"].gpu_seconds == pytest.approx(2 * cost["gpu"].replica_seconds)
    assert cost["m"].peak_replicas == 1 and cost["m"].gpu_seconds == 0
    raw = (await _json(f"{url}/thaw/status"))["cost"]
    assert raw["gpu_hour_price"] == 2.5
    gpu_row = next(r for r in raw["models"] if r["model"] == "gpu")
    assert gpu_row["spent_money"] == pytest.approx(gpu_row["gpu_seconds"] / 3600 * 2.5)

    after = await _json(f"{url}/thaw/history?since={before['last_seq']}")
    assert after["first_seq"] == before["last_seq"] + 1
    assert max(after["models"]["m"]["ready"]) == 1
    assert after["models"]["m"]["replica_seconds"][-1] > 0

    _, _, body = await _get(f"{url}/metrics")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples[name, tuple(sorted(labels.items()))]

    assert value("thaw_replica_seconds_total", model="m") > 0.1
    assert value("thaw_gpu_seconds_total", model="gpu") > 0.2
    assert value("thaw_saved_replica_seconds", model="m") >= 0
    assert value("thaw_peak_replicas", model="m") == 1
    assert value("thaw_gpus_per_replica", model="gpu") == 2
    assert value("thaw_model_state", model="m", state="warm") == 1
    assert value("thaw_model_state", model="m", state="cold") == 0
