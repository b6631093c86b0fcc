"""The status page's shared replicas in a real browser (Debian's chromium, driven by Playwright)
against a real `thaw up` with shared placement: which models live on which replica, its budget
used of its total, each shared model's evictions and where its loads came from (the host tier
after an eviction). Skips like test_status_page_browser.py without chromium or `playwright`."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.onnx_models import make_onnx_add
from tests.fixtures.up_process import UpProcess, with_params

pytestmark = pytest.mark.integration


MiB = 1 << 20
SIZE = MiB  # floats per ONNX model: 4 MiB of weights each
EVICT_GRACE_S = 0.5
MODELS = ("onnx_a", "onnx_b", "onnx_c")


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    repo = tmp_path / "repo"
    for name in MODELS:
        # A long scale-to-zero grace: the only way out of the shared replica is eviction.
        with_params(make_onnx_add(repo, name, size=SIZE), placement="shared",
                    scale_to_zero_grace_s=600)  # fmt: skip
    server = UpProcess(
        repo, "--warm-pool", "1", "--preload-frameworks", "onnxruntime",
        "--cache", str(tmp_path / "cache"), "--host-cache-bytes", str(256 * MiB),
        # Room for two of the three 4 MiB models (plus their files' few bytes of graph).
        "--shared-replica-bytes", str(9 * MiB), "--shared-model-overhead-bytes", "0",
        "--evict-grace-s", str(EVICT_GRACE_S),
    )  # fmt: skip
    try:
        server.wait_for(
            lambda: all(server.get("/thaw/status")["image_builds"].get(m) == "built"
                        for m in MODELS),
            180,
            "the start-up image builds",
        )  # fmt: skip
        yield server
    finally:
        assert server.stop() == 0


def _infer(up: UpProcess, model: str) -> int:
    body = {"inputs": [{"name": "INPUT0", "shape": [1, SIZE], "datatype": "FP32",
                        "data": [1.0] * SIZE}]}  # fmt: skip
    request = urllib.request.Request(
        f"{up.url}/v2/models/{model}/infer", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=120) as resp:
        return int(resp.status)


def _idle_past_grace() -> None:
    """Let the eviction grace pass (a setting of this test's `thaw up`, not a measurement)."""
    time.sleep(EVICT_GRACE_S + 0.2)


def test_the_page_draws_shared_replicas_their_budget_evictions_and_rewakes(
    up: UpProcess, browser: Any
) -> None:
    page = browser.new_page(viewport={"width": 1440, "height": 1100})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(up.url + "/ui/")
    page.wait_for_selector('#models tr[data-model="onnx_a"]', timeout=15_000)
    # Nothing woken yet: no shared replica, so the panel says so (shared models are known
    # only once one was placed).
    assert page.locator("#shared-replicas tbody tr").count() == 0

    assert _infer(up, "onnx_a") == 200
    assert _infer(up, "onnx_b") == 200
    page.wait_for_selector('#shared-replicas tr[data-replica] .chip[data-model="onnx_b"]')
    (host,) = [r["id"] for r in up.get("/thaw/status")["shared"]["replicas"]]
    row = f'#shared-replicas tr[data-replica="{host}"]'
    assert page.is_visible("#shared-panel") and page.is_hidden("#no-shared")

    _idle_past_grace()
    assert _infer(up, "onnx_c") == 200  # onnx_a, the least recently used idle one, is evicted
    _idle_past_grace()
    assert _infer(up, "onnx_a") == 200  # re-woken from the host tier: onnx_b goes
    page.wait_for_selector('#shared-models tr[data-model="onnx_b"] td.evictions:text-is("1")')
    # The page shows what it last polled: a document read mid-wake already counts onnx_b's
    # eviction while onnx_b is still being unloaded. Wait for the settled one (the wake above
    # has answered, so the next poll has it), not for the first render with the count.
    page.wait_for_selector(f'{row} .chip[data-model="onnx_b"]', state="detached")
    page.wait_for_selector('#shared-models tr[data-model="onnx_a"] td.loads-host:text-is("2")')

    # What a person reads on it.
    chips = page.locator(f"{row} .chip").all_inner_texts()
    assert sorted(c.strip() for c in chips) == ["onnx_a", "onnx_c"]
    (replica,) = up.get("/thaw/status")["shared"]["replicas"]
    used_mib = replica["used_bytes"] / MiB
    assert 8 <= used_mib <= 9  # two 4 MiB models and their graphs' few bytes
    assert page.inner_text(f"{row} td.budget") == f"{used_mib:.1f} MiB / 9.0 MiB"
    width = page.eval_on_selector(f"{row} .budgetbar span", "e => e.style.width")
    assert float(width.rstrip("%")) == pytest.approx(used_mib / 9 * 100, abs=0.01)
    a = '#shared-models tr[data-model="onnx_a"]'
    assert page.inner_text(f"{a} td.evictions") == "1"
    assert page.inner_text(f"{a} td.loads-host") == "2"  # first wake and the re-wake: RAM
    assert page.inner_text(f"{a} td.loads-store") == "0"
    assert page.inner_text(f"{a} td:nth-child(2)") == host
    assert page.inner_text('#shared-models tr[data-model="onnx_b"] td:nth-child(2)') == "at zero"
    assert errors == []
    page.close()
