"""Statistics through a real `thaw up` stay monotonic across scale to zero, as Triton's do."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fixtures.models import make_add_sub
from tests.fixtures.up_process import UpProcess, pid_alive, with_params

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    repo = tmp_path_factory.mktemp("stats_repo")
    with_params(make_add_sub(repo, "counted"), scale_to_zero_grace_s=1)
    server = UpProcess(
        repo, "--warm-pool", "1", "--no-image-build", "--cache", str(repo.parent / "cache")
    )
    yield server
    server.stop()


def _serve(client: httpclient.InferenceServerClient, n: int) -> None:
    a = np.arange(4, dtype=np.float32)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [4], "FP32")
        tensor.set_data_from_numpy(a, binary_data=True)
        inputs.append(tensor)
    for _ in range(n):
        result = client.infer("counted", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)


def _row(client: httpclient.InferenceServerClient) -> dict[str, Any]:
    (row,) = client.get_inference_statistics("counted")["model_stats"]
    assert isinstance(row, dict)
    return row


def _counters(row: dict[str, Any]) -> list[int]:
    phases = row["inference_stats"]
    return [
        row["inference_count"],
        row["execution_count"],
        row["last_inference"],
        *(phases[p][k] for p in sorted(phases) for k in ("count", "ns")),
    ]


def test_stats_count_every_inference_across_scale_to_zero(up: UpProcess) -> None:
    n, m = 5, 3
    with httpclient.InferenceServerClient(up.hostport, network_timeout=60) as client:
        seen = [_counters(_row(client))]
        assert seen[0][0] == 0  # never served: zeros, and nothing woke
        assert up.model("counted")["replicas_ready"] == 0
        _serve(client, n)
        seen.append(_counters(_row(client)))
        _serve(client, 1)  # read by no one before the replica goes: its final read counts it
        pid = up.model("counted")["replicas"][0]["pid"]
        up.wait_for(lambda: up.model("counted")["state"] == "cold", 30, "scale to zero")
        up.wait_for(lambda: not pid_alive(pid), 15, "the replica process to exit")
        seen.append(_counters(_row(client)))
        _serve(client, m)  # a fresh replica, counting from zero
        assert up.model("counted")["replicas"][0]["pid"] != pid
        row = _row(client)
        seen.append(_counters(row))
    assert [s[0] for s in seen] == [0, n, n + 1, n + 1 + m]
    assert row["inference_stats"]["success"]["count"] == n + 1 + m
    assert row["inference_stats"]["fail"]["count"] == 0
    assert row["execution_count"] == n + 1 + m
    for before, after in itertools.pairwise(seen):
        assert all(b <= a for b, a in zip(before, after, strict=True)), (before, after)
