"""Shared placement's flags, its status section (both ways through JSON, strictly parsed) and
its lines in `thaw status`."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from activator.errors import ConfigError
from activator.observe.shared_report import SharedReport
from activator.observe.status_document import StatusDocument
from activator.process import cli, status_cli
from activator.scaler.backend import PoolStatus, SharedCounts, SharedReplicaStatus
from activator.scaler.local_config import LocalConfig, SharedSettings

MiB = 1 << 20
REPORT = SharedReport(
    (
        SharedReplicaStatus(
            "shared-1",
            "http://127.0.0.1:4000",
            2048 * MiB,
            300 * MiB,
            ("bert", "resnet50"),
            pid=4242,
        ),
    ),
    {
        "bert": SharedCounts(evictions=2, loads={"cache": 1, "host": 2}),
        "resnet50": SharedCounts(),
    },
)


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(list(argv))


def test_the_flags_become_the_local_backend_s_shared_settings(tmp_path: Path) -> None:
    config = cli.build_config(
        _parse("up", str(tmp_path), "--shared-replica-bytes", str(512 * MiB),
               "--shared-model-overhead-bytes", "0", "--evict-grace-s", "1.5",
               "--shared-release-grace-s", "3", "--shared-replica-concurrency", "16")
    )  # fmt: skip
    assert isinstance(config.scaler, LocalConfig)
    assert config.scaler.shared == SharedSettings(512 * MiB, 0, 1.5, 3.0)
    assert config.shared_replica_concurrency == 16
    default = cli.build_config(_parse("up", str(tmp_path)))
    assert isinstance(default.scaler, LocalConfig)
    assert default.scaler.shared == SharedSettings() and default.shared_replica_concurrency == 0


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--shared-replica-bytes", "10", "`--shared-replica-bytes` = 10, must be in [1048576, "),
        ("--evict-grace-s", "-1", "`--evict-grace-s` = -1, must be in [0, 86400]"),
        ("--shared-replica-concurrency", "-2", "`--shared-replica-concurrency` = -2, must be"),
    ],
)
def test_bad_shared_flags_are_refused_naming_the_flag(
    tmp_path: Path, flag: str, value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        cli.build_config(_parse("up", str(tmp_path), flag, value))


def test_the_section_survives_json_both_ways_and_is_empty_when_absent() -> None:
    doc = StatusDocument(models=(), warm_pool=PoolStatus(size=1, ready=1), shared=REPORT)
    assert StatusDocument.from_json(doc.to_json()) == doc
    older = doc.to_json()
    del older["shared"]  # a `thaw up` from before shared placement
    assert StatusDocument.from_json(older).shared == SharedReport()


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ([], "shared must be a JSON object"),
        ({"replicas": {}}, "shared: 'replicas' must be a JSON array"),
        ({"replicas": [{"id": 1, "url": "u"}]}, "shared.replicas[0]: 'id' must be a string"),
        (
            {"replicas": [{"id": "s", "url": "u", "budget_bytes": -1, "used_bytes": 0}]},
            "shared.replicas[0]: 'budget_bytes' must be a non-negative integer, not -1",
        ),
        (
            {
                "replicas": [
                    {"id": "s", "url": "u", "budget_bytes": 1, "used_bytes": 0, "models": [3]}
                ]
            },
            "'models' must be an array of strings",
        ),
        ({"models": {"m": {"evictions": "2"}}}, "shared.models.m: 'evictions' must be"),
        ({"models": {"m": {"evictions": 0, "loads": {"host": 1.5}}}}, "'host' must be"),
    ],
)
def test_another_shape_is_refused_naming_what_does_not_fit(section: Any, message: str) -> None:
    doc = StatusDocument(models=(), warm_pool=PoolStatus(size=0, ready=0)).to_json()
    doc["shared"] = section
    with pytest.raises(ValueError, match=re.escape(message)):
        StatusDocument.from_json(doc)


def test_thaw_status_shows_each_shared_replica_and_what_placement_did() -> None:
    doc = StatusDocument(models=(), warm_pool=PoolStatus(size=1, ready=1), shared=REPORT)
    table = status_cli.format_table(doc)
    assert "shared replica shared-1 (pid 4242): 300 MiB of 2048 MiB: bert, resnet50" in table
    assert "  bert: evicted 2x; loads 1 from cache, 2 from host" in table
    assert "resnet50:" not in table  # nothing happened to it yet


def test_a_shared_pod_is_shown_by_its_address_not_a_pid() -> None:
    pod = SharedReplicaStatus(
        id="thaw-pool-x1", url="http://10.0.0.7:8000", budget_bytes=9 << 20,
        used_bytes=8 << 20, models=("onnx_a", "onnx_c"),
    )  # fmt: skip
    report = SharedReport(replicas=(pod,))
    doc = StatusDocument(models=(), warm_pool=PoolStatus(size=1, ready=1), shared=report)
    table = status_cli.format_table(doc)
    line = "shared replica thaw-pool-x1 (http://10.0.0.7:8000): 8 MiB of 9 MiB: onnx_a, onnx_c"
    assert line in table
