"""The browser the status-page tests drive: Debian's chromium through Playwright.

No browser is downloaded: Playwright launches the system's chromium (`make system-deps`
installs Debian's; `THAW_CHROMIUM` names another). Without one, or without the `playwright`
package, every test here skips, saying so.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = os.environ.get("THAW_CHROMIUM") or shutil.which("chromium")
sync_api = pytest.importorskip("playwright.sync_api", reason="the `playwright` package is missing")
if CHROMIUM is None:
    pytest.skip(
        "no chromium to drive (Debian package `chromium`: make system-deps)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless chromium for the module's tests."""
    args = ["--no-sandbox"] if os.geteuid() == 0 else []  # chromium refuses its sandbox as root
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=args)
        yield chromium
        chromium.close()
