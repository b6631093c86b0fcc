"""tests/gpu: what only a CUDA device can verify; every test here skips cleanly without one."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(skip)
