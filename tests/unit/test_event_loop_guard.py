"""The autouse guard in tests/conftest.py: product code that blocks a running event loop fails
the test; the same call from a worker thread, and a test's own set-up, do not."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from blockbuster import BlockingError

from runtime.models.repository import list_models


async def test_product_code_blocking_the_loop_fails_the_test(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    with pytest.raises(BlockingError):
        list_models(tmp_path)  # a directory scan on the event loop
    assert await asyncio.to_thread(list_models, tmp_path) == ["m"]


async def test_a_tests_own_blocking_set_up_is_not_flagged(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text('name: "m"\n')
    assert (tmp_path / "config.pbtxt").read_text() == 'name: "m"\n'


def test_synchronous_tests_have_no_loop_to_block(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    assert list_models(tmp_path) == ["m"]
