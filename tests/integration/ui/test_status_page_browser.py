"""The status page in a real browser: Debian's chromium, driven by Playwright, against a real
`thaw up`. A model is woken with a request; the page must show it waking, then warm, with its
cold start and the plots, and load nothing from anywhere but `thaw up` itself.

No browser is downloaded: Playwright launches the system's chromium (`make system-deps`
installs Debian's; `THAW_CHROMIUM` names another). Without one, or without the `playwright`
package, the test skips, saying so. `THAW_SCREENSHOT_DIR=DIR` keeps the screenshots there
(`make screenshot` writes docs/img/status-page.png this way).
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.loop import HUNG_AFTER_S
from tests.fixtures.models import make_add_sub, make_slow_init
from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration


# slow_init's initialize() lasts at least this long, and until the test has seen it waking on
# the page (its hold file): a loaded machine slows the page, never past the wake.
WAKE_S = 3.0

# Decodes a PNG in the browser and counts its colours (every 7th pixel) and how many pixels
# differ from the background.
_PIXELS_JS = """async (b64) => {
  const img = new Image();
  img.src = "data:image/png;base64," + b64;
  await img.decode();
  const c = document.createElement("canvas");
  c.width = img.width; c.height = img.height;
  const g = c.getContext("2d");
  g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data;
  const colors = new Set();
  let ink = 0;
  const bg = [d[0], d[1], d[2]];
  for (let i = 0; i < d.length; i += 4 * 7) {
    colors.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    const off = Math.abs(d[i] - bg[0]) + Math.abs(d[i + 1] - bg[1]) + Math.abs(d[i + 2] - bg[2]);
    if (off > 30) ink++;
  }
  return { width: c.width, height: c.height, colors: colors.size, ink: ink / (d.length / 28) };
}"""


def _infer(url: str, model: str, body: dict[str, Any]) -> int:
    request = urllib.request.Request(
        f"{url}/v2/models/{model}/infer", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=60) as resp:
        return int(resp.status)


def _vector(n: int) -> dict[str, Any]:
    return {"inputs": [{"name": "INPUT0", "shape": [n], "datatype": "FP32", "data": [1.0] * n}]}


_ONNX_BODY = {
    "inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]
}


@pytest.fixture(scope="module")
def slow_init_hold(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """While this file exists, slow_init's initialize() waits (make_slow_init's `hold_file`)."""
    return tmp_path_factory.mktemp("ui_hold") / "slow_init"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, slow_init_hold: Path) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("ui_repo")
    make_onnx_add(repo, "resnet_tiny")
    make_slow_init(repo, "slow_init", delay_s=WAKE_S, hold_file=slow_init_hold)
    make_add_sub(repo)
    (repo / "badcfg" / "1").mkdir(parents=True)
    (repo / "badcfg" / "config.pbtxt").write_text('name: "badcfg"\nbackend: "tensorflow"\n')
    server = UpProcess(
        repo,
        "--warm-pool", "1",
        "--preload-frameworks", "onnxruntime",
        "--cache", str(repo.parent / "ui_cache"),
        "--scale-to-zero-grace-s", "120",
    )  # fmt: skip
    try:
        server.wait_for(
            lambda: all(v not in ("queued", "building")
                        for v in server.get("/thaw/status")["image_builds"].values()),
            120,
            "the start-up image builds",
        )  # fmt: skip
        yield server
    finally:
        server.stop()


def _check_screenshot(browser: Any, png: bytes) -> dict[str, float]:
    page = browser.new_page()
    try:
        pixels: dict[str, float] = page.evaluate(_PIXELS_JS, base64.b64encode(png).decode())
    finally:
        page.close()
    return pixels


def _keep(name: str, png: bytes) -> None:
    where = os.environ.get("THAW_SCREENSHOT_DIR")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        (Path(where) / name).write_bytes(png)


def test_the_page_shows_a_model_waking_then_warm(
    up: UpProcess, browser: Any, slow_init_hold: Path
) -> None:
    page = browser.new_page(viewport={"width": 1440, "height": 1100})
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(up.url + "/ui/")
    row = 'tr[data-model="{}"][data-state="{}"]'
    page.wait_for_selector(row.format("slow_init", "cold"), timeout=15_000)
    page.wait_for_selector(row.format("badcfg", "unavailable"))

    # Some traffic first, so that the plots and the cold-start table have something to show.
    assert _infer(up.url, "resnet_tiny", _ONNX_BODY) == 200
    for _ in range(8):
        _infer(up.url, "resnet_tiny", _ONNX_BODY)
        time.sleep(0.25)

    # Wake slow_init: its request is held while a replica starts, its initialize() held until
    # the page showed it waking (and WAKE_S at least).
    answered: list[int] = []
    waker = threading.Thread(
        target=lambda: answered.append(_infer(up.url, "slow_init", _vector(4)))
    )
    slow_init_hold.write_text(str(HUNG_AFTER_S))
    woken_at = time.monotonic()
    waker.start()
    try:
        try:
            page.wait_for_selector(row.format("slow_init", "waking"), timeout=HUNG_AFTER_S * 1000)
            held = page.inner_text('tr[data-model="slow_init"] td:nth-child(5)')
            waking_png = page.screenshot(full_page=True)
            time.sleep(max(0.0, woken_at + WAKE_S - time.monotonic()))
        finally:
            slow_init_hold.unlink()
        page.wait_for_selector(row.format("slow_init", "warm"), timeout=60_000)
    finally:
        waker.join(60)
    assert answered == [200]
    assert held == "1"  # the held request was on the page while the model woke
    page.wait_for_selector('#cold-starts tr[data-model="slow_init"]', timeout=10_000)
    page.wait_for_selector('#plot-replicas path[data-model="slow_init"]')
    time.sleep(2.5)  # a few more samples on the plots
    warm_png = page.screenshot(full_page=True)

    # What a person reads on it.
    assert page.inner_text('tr[data-model="resnet_tiny"] .state') == "warm"
    assert page.inner_text('tr[data-model="add_sub"] .state') == "cold"
    assert "tensorflow" in page.inner_text('tr[data-model="badcfg"]')
    cold = page.inner_text('#cold-starts tr[data-model="slow_init"]')
    assert "failed" not in cold
    total_s = float(cold.split("\t")[2].split()[0])
    assert total_s >= WAKE_S * 0.9  # initialize() slept WAKE_S inside the restore phase
    assert page.inner_text("#card-warm") == "2 / 4"
    assert page.inner_text("#card-saved").endswith("replica-s")
    assert "live" in page.inner_text("#live-text")
    assert page.locator("#plot-cost path[data-series=used]").count() == 1
    assert page.is_hidden("#shared-panel")  # no model here shares a replica
    assert page.locator("#plot-cold rect").count() >= 3 * 2  # phases of both cold starts
    # each bar's label, however it is cut, names its model whole on hover
    assert "slow_init" in page.locator("#plot-cold text title").all_text_contents()

    # Only thaw up itself was asked for anything (no CDN, no font, no library).
    assert requested and all(u.startswith(up.url + "/") for u in requested), requested
    assert errors == []

    for name, png in (("status-page-waking.png", waking_png), ("status-page.png", warm_png)):
        pixels = _check_screenshot(browser, png)
        assert pixels["width"] == 1440 and pixels["height"] >= 1100
        assert pixels["colors"] > 40, pixels  # text, badges, plot lines: not a blank page
        assert pixels["ink"] > 0.02, pixels
        _keep(name, png)
    page.close()
