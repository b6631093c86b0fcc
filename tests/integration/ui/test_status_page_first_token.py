"""The status page's time to first token (issue 28) in a real browser: a generative model woken
through the OpenAI API shows its first token at zero and warm; a model never asked shows none.
The same figures are in `/thaw/status`, which the page draws (tests/integration/ui/conftest.py
provides the browser)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import openai_models
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration

NONE = "\u2013"  # the page's en dash for a figure it does not have


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    repo = tmp_path / "repo"
    openai_models.make_echo_llm(repo)
    openai_models.make_not_generative(repo)
    server = UpProcess(
        repo, "--warm-pool", "1", "--preload-frameworks", "", "--no-image-build",
        "--cache", str(tmp_path / "cache"),
    )  # fmt: skip
    yield server
    server.stop()


def _complete(up: UpProcess, prompt: str) -> int:
    body = {"model": "echo_llm", "prompt": prompt, "max_tokens": 2}
    request = urllib.request.Request(
        up.url + "/v1/completions", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=120) as resp:
        return int(resp.status)


def test_the_page_shows_time_to_first_token_at_zero_and_warm(browser: Any, up: UpProcess) -> None:
    assert up.model("echo_llm")["first_token_cold_s"] is None  # never asked yet
    assert _complete(up, "wake up") == 200  # found it at zero
    assert _complete(up, "again") == 200  # found a replica ready
    echo, other = up.model("echo_llm"), up.model("not_generative")
    assert echo["first_token_cold_s"] > 0 and echo["first_token_warm_s"] > 0
    assert other["first_token_cold_s"] is None and other["first_token_warm_s"] is None

    page = browser.new_page(viewport={"width": 1440, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(up.url + "/ui/")
    page.wait_for_selector('tr[data-model="echo_llm"][data-state="warm"]', timeout=15_000)
    shown = page.inner_text('tr[data-model="echo_llm"] td.first-token')
    cold, warm = (part.strip() for part in shown.split("/"))
    assert NONE not in (cold, warm), shown  # both figures, each with its unit
    assert cold.endswith(("ms", " s")) and warm.endswith(("ms", " s")), shown
    assert page.inner_text('tr[data-model="not_generative"] td.first-token') == NONE
    assert errors == []
    page.close()
