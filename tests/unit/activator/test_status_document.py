"""The status document: one shape for `GET /thaw/status` and `thaw status`, checked strictly."""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from activator.config import ActivatorConfig, ScaleSettings
from activator.observe.cost import CostFigures
from activator.observe.status_document import (
    ColdStartReport,
    CostReport,
    ModelState,
    ModelStatus,
    ReplicaState,
    ReplicaStatus,
    StatusDocument,
)
from activator.process import status_cli
from activator.scaler.backend import PoolStatus, ReplicaHandle
from activator.surfaces.app import build_app
from tests.fakes.scaler_backend import FakeScalerBackend
from tests.fakes.upstream import MODEL_CONFIG

_REPLICA = ReplicaStatus("m-1", "http://127.0.0.1:9", 4242, 2, 3, 1, ReplicaState.READY)
_WARM = ModelStatus(
    "m", ModelState.WARM, 1, 1, 0, 0, 2, 3, 0.25, None, (_REPLICA,),
    first_token_cold_s=1.5, first_token_warm_s=0.03,
)  # fmt: skip
DOC = StatusDocument(
    models=(_WARM, ModelStatus.unavailable("broken", "config.pbtxt:1: no backend")),
    warm_pool=PoolStatus(size=1, ready=0),
    image_builds={"m": "built"},
    cold_starts=(
        ColdStartReport("m", 1_700_000_100.5, 0.01, 0.2, 0.04, 0.25),
        ColdStartReport("m", 1_700_000_000.0, None, None, None, None, "could not be activated"),
    ),
    cost=CostReport(2.5, (CostFigures("m", 600.0, 90.0, 1, 500.0, 1, 600.0),)),
)


def test_the_document_survives_json_both_ways() -> None:
    assert StatusDocument.from_json(json.loads(json.dumps(DOC.to_json()))) == DOC
    measured = PoolStatus(
        size=3, ready=2, starting=1, source="fork-server", idle_pss_bytes=(70 << 20, 71 << 20),
        server_pss_bytes=150 << 20, budget_bytes=2 << 30, demand=3, limit="demand",
        last_start_s=0.09, starts=5, failures=0,
    )  # fmt: skip
    doc = StatusDocument(models=DOC.models, warm_pool=measured, image_builds={"m": "cached"})
    assert StatusDocument.from_json(json.loads(json.dumps(doc.to_json()))) == doc


def test_a_pool_that_reports_only_its_size_still_parses() -> None:
    doc = DOC.to_json()
    doc["warm_pool"] = {"size": 2, "ready": 1}
    assert StatusDocument.from_json(doc).warm_pool == PoolStatus(size=2, ready=1)


def test_a_document_of_an_older_thaw_up_without_the_optional_model_fields_parses() -> None:
    doc = DOC.to_json()
    for key in ("placement_class", "first_token_cold_s", "first_token_warm_s"):
        doc["models"][0].pop(key)
    (model, _) = StatusDocument.from_json(doc).models
    assert (model.first_token_cold_s, model.first_token_warm_s, model.placement_class) == (
        None, None, None,
    )  # fmt: skip


def test_the_cost_section_carries_derived_figures_for_other_readers() -> None:
    (row,) = DOC.to_json()["cost"]["models"]
    assert row["saved_replica_seconds"] == 510.0 and row["gpu_seconds"] == 90.0
    assert row["spent_money"] == pytest.approx(90 / 3600 * 2.5)
    assert row["saved_money"] == pytest.approx(510 / 3600 * 2.5)
    assert DOC.to_json()["cold_starts"][1]["error"] == "could not be activated"


def test_an_unavailable_model_has_the_same_fields_as_a_served_one() -> None:
    served, unavailable = DOC.to_json()["models"]
    assert list(served) == list(unavailable) == [
        "model", "state", "replicas_ready", "replicas_desired", "replicas_starting",
        "held_requests", "in_flight", "direct_connections", "last_cold_start_s",
        "last_error", "replicas", "placement_class", "first_token_cold_s",
        "first_token_warm_s", "load_state",
    ]  # fmt: skip
    assert unavailable["state"] == "unavailable" and unavailable["replicas"] == []
    assert served["replicas"][0] == {
        "id": "m-1", "url": "http://127.0.0.1:9", "pid": 4242, "in_flight": 2,
        "direct_connections": 3, "direct_in_flight": 1, "state": "ready",
    }  # fmt: skip


def _broken(change: Any) -> dict[str, Any]:
    doc = DOC.to_json()
    change(doc)
    return doc


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "the document must be a JSON object"),
        ({"models": {}}, "'models' must be a JSON array"),
        (_broken(lambda d: d["models"][0].pop("in_flight")), "models[0]: 'in_flight' must be"),
        (
            _broken(lambda d: d["models"][1].update(held_requests=True)),
            "models[1]: 'held_requests' must be an integer, not True",
        ),
        (
            _broken(lambda d: d["models"][0].update(state="asleep")),
            "models[0]: state 'asleep' is not one of cold, waking, warm",
        ),
        (
            _broken(lambda d: d["models"][0]["replicas"][0].update(pid="4242")),
            "models[0].replicas[0]: 'pid' must be int or null",
        ),
        (
            _broken(lambda d: d["models"][0].update(first_token_cold_s="fast")),
            "models[0]: 'first_token_cold_s' must be float or null",
        ),
        (_broken(lambda d: d.pop("warm_pool")), "warm_pool must be a JSON object"),
        (
            _broken(lambda d: d["warm_pool"].update(idle_pss_bytes=["1"])),
            "warm_pool: 'idle_pss_bytes' must be an array of integers",
        ),
        (
            _broken(lambda d: d["warm_pool"].update(last_start_s="fast")),
            "warm_pool: 'last_start_s' must be float or null",
        ),
        (_broken(lambda d: d.update(image_builds={"m": 1})), "image_builds: every value"),
        (_broken(lambda d: d.pop("cold_starts")), "'cold_starts' must be a JSON array"),
        (
            _broken(lambda d: d["cold_starts"][0].update(total_s="fast")),
            "cold_starts[0]: 'total_s' must be float or null, not 'fast'",
        ),
        (
            _broken(lambda d: d["cold_starts"][1].pop("began_unix")),
            "cold_starts[1]: 'began_unix' must be a number, not missing",
        ),
        (_broken(lambda d: d.update(cost=[])), "cost must be a JSON object"),
        (
            _broken(lambda d: d["cost"]["models"][0].update(peak_replicas=1.5)),
            "cost.models[0]: 'peak_replicas' must be an integer, not 1.5",
        ),
        (
            _broken(lambda d: d["cost"].update(gpu_hour_price="cheap")),
            "cost: 'gpu_hour_price' must be float or null",
        ),
    ],
)
def test_another_shape_is_refused_naming_what_does_not_fit(doc: Any, message: str) -> None:
    with pytest.raises(ValueError) as info:
        StatusDocument.from_json(doc)
    assert message in str(info.value)


@pytest.fixture
async def activator(tmp_path: Path) -> AsyncIterator[str]:
    for name in ("zeta", "alpha"):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "config.pbtxt").write_text(MODEL_CONFIG.format(name=name))
    (tmp_path / "broken" / "1").mkdir(parents=True)
    (tmp_path / "broken" / "config.pbtxt").write_text('backend: "tensorflow"\n')
    config = ActivatorConfig(
        repository=tmp_path,
        build_images=False,
        defaults=ScaleSettings(activation_timeout_s=1),
    )
    backend = FakeScalerBackend(open_gate=True)
    backend.pool = PoolStatus(size=2, ready=1)
    backend.running["zeta"] = [ReplicaHandle("zeta-0", "zeta", "http://fake/zeta-0", 0, 0, 77)]
    server = TestServer(build_app(config, backend=backend), host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()


async def test_the_activator_serves_the_document_thaw_status_reads(activator: str) -> None:
    async with aiohttp.ClientSession() as s, s.get(f"{activator}/thaw/status") as r:
        doc = StatusDocument.from_json(await r.json())
    assert [(m.model, m.state) for m in doc.models] == [
        ("alpha", ModelState.COLD),
        ("broken", ModelState.UNAVAILABLE),
        ("zeta", ModelState.WARM),  # found running at start: adopted, nothing started
    ]
    assert doc.models[2].replicas[0].pid == 77
    assert "tensorflow" in (doc.models[1].last_error or "")
    assert doc.warm_pool == PoolStatus(size=2, ready=1)  # what the backend reports


def status_args(*argv: str) -> argparse.Namespace:
    """`thaw status ARGV...` parsed by its own parser."""
    parser = argparse.ArgumentParser()
    status_cli.register(parser.add_subparsers())
    return parser.parse_args(["status", *argv])


@pytest.fixture
def not_thaw() -> Iterator[str]:
    """An HTTP server whose /thaw/status answers JSON of another shape."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"models": [{"model": "m"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_thaw_status_refuses_a_document_of_another_shape(
    not_thaw: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = status_args("--url", not_thaw)
    assert status_cli.run(args) == 1
    err = capsys.readouterr().err
    assert "is not a `thaw up` status document" in err
    assert "models[0]: 'state' must be a string, not missing" in err


async def test_thaw_status_prints_the_table_of_a_running_activator(
    activator: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = await asyncio.to_thread(status_args, "--url", activator)  # argparse stats files
    assert await asyncio.to_thread(status_cli.run, args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in lines[1:4]] == [
        ["alpha", "cold", "0/0"],
        ["broken", "unavailable", "0/0"],
        ["zeta", "warm", "1/1"],
    ]
    assert lines[-1] == "warm pool: 1/2 ready"
