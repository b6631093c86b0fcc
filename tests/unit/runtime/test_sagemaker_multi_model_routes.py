"""SageMaker's multi-model endpoint as decisions (runtime.http.sagemaker_models): which of its
answers each `/models` request is, dispatched as tritonserver's; which repository and directory
a load's url is; which errors are SageMaker's 507."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import RawTestServer, TestClient

from runtime.errors import DeviceOutOfMemory, RepositoryError
from runtime.http.cloud_front import Answer, Refusal, Rewrite
from runtime.http.sagemaker import BINARY_MIME, SageMakerRoutes, rewrite
from runtime.http.sagemaker_models import (
    TARGET_MODEL,
    Layout,
    MultiModelEndpoint,
    _Loaded,
    invocation_status,
    layout,
    out_of_memory,
)
from tests.fixtures.models import make_add_sub, make_ensemble


class _Models:
    async def register_repository(self, root: Path, mapping: Mapping[str, str]) -> None: ...
    async def unregister_repository(self, root: Path) -> None: ...
    async def load(self, name: str) -> float | None:
        return None

    async def unload(self, name: str, *, unload_dependents: bool = False) -> None: ...
    def model_ready(self, name: str, version: str | None) -> bool:
        return True


def _endpoint(**loaded: str) -> MultiModelEndpoint:
    endpoint = MultiModelEndpoint(_Models(), body_timeout_s=5)
    for name, target in loaded.items():
        endpoint._loaded[name] = _Loaded(target, Path("/opt/ml/models") / name)
    return endpoint


def _at(endpoint: MultiModelEndpoint, method: str, path: str, **headers: str) -> object:
    routes = SageMakerRoutes("default", "live", endpoint)
    return rewrite(routes, method, path, {"Content-Type": "", **headers}, 100)


def test_the_routes_dispatch_as_tritonservers() -> None:
    endpoint = _endpoint(abc="abc", digest="resnet.tar.gz")
    for method, path in [("GET", "/models"), ("GET", "/models/"), ("GET", "/models/abc"),
                         ("GET", "/models/abc/invoke"), ("POST", "/models"),
                         ("POST", "/models/abc"), ("DELETE", "/models/abc")]:  # fmt: skip
        assert isinstance(_at(endpoint, method, path), Answer), (method, path)
    invoke = _at(endpoint, "POST", "/models/abc/invoke")
    assert isinstance(invoke, Rewrite) and invoke.path == "/v2/models/abc/infer" and invoke.infer
    # The target header names the model; else the one the name was loaded as.
    named = _at(endpoint, "POST", "/models/digest/invoke")
    assert isinstance(named, Rewrite) and named.path == "/v2/models/resnet.tar.gz/infer"
    header = _at(endpoint, "POST", "/models/abc/invoke", **{TARGET_MODEL: "other"})
    assert isinstance(header, Rewrite) and header.path == "/v2/models/other/infer"
    binary = _at(endpoint, "POST", "/models/abc/invoke", **{"Content-Type": BINARY_MIME + "40"})
    assert isinstance(binary, Rewrite) and binary.header_length == 40
    assert _at(endpoint, "POST", "/models/unknown/invoke") == Refusal(
        404, "model 'unknown' is not loaded by the multi-model endpoint"
    )
    refused = _at(endpoint, "PUT", "/models/abc")
    assert isinstance(refused, Refusal) and refused.status == 400
    assert isinstance(_at(endpoint, "GET", "/models/a/b/c"), Refusal)


def test_an_invocations_errors_are_400_or_507() -> None:
    for status, text, expected in [(200, "{}", 200), (503, "queue full", 400),
                                   (500, "MemoryError: no", 507), (400, "OOM", 507),
                                   (404, "unknown model", 400)]:  # fmt: skip
        response = web.Response(status=status, text=text)
        invocation_status(response)
        assert response.status == expected, (status, text)
    assert out_of_memory("CUDA out of memory. Tried to allocate")
    assert not out_of_memory("unexpected shape")


def test_a_urls_layout_as_sagemaker_downloads_it(tmp_path: Path) -> None:
    one = tmp_path / "opt" / "digest"
    make_add_sub(one, "model")
    assert layout(str(one / "model")) == Layout(one, "model")
    assert layout(str(one / "model") + "/") == Layout(one, "model")
    assert layout(str(one)) == Layout(one, "model")  # its one model directory

    several = tmp_path / "several"
    make_add_sub(several, "first")
    make_add_sub(several, "second")
    with pytest.raises(RepositoryError, match="of its 2 model directories 0 are ensembles"):
        layout(str(several))
    make_ensemble(several, "fan", 'name: "fan"\nplatform: "ensemble"\n')
    assert layout(str(several)) == Layout(several, "fan")
    make_ensemble(several, "fan2", 'platform:"ensemble"\n')
    with pytest.raises(RepositoryError, match="2 are ensembles"):
        layout(str(several))


@pytest.mark.parametrize("url", ["relative/dir", "/", "/no/such/dir", "/tmp/\0x"])
def test_a_url_that_is_no_models_directory_is_refused(url: str) -> None:
    with pytest.raises(RepositoryError, match="failed to register"):
        layout(url)


def test_an_empty_directory_or_a_fifo_config_is_refused_not_waited_on(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(RepositoryError, match="holds no model directory"):
        layout(str(tmp_path / "empty"))
    for name in ("a", "b"):
        (tmp_path / "fifo" / name).mkdir(parents=True)
        os.mkfifo(tmp_path / "fifo" / name / "config.pbtxt")
    with pytest.raises(RepositoryError, match="0 are ensembles"):
        layout(str(tmp_path / "fifo"))


class _NoRoom(_Models):
    """Models whose load Thaw refuses for GPU memory, in words without Triton's OOM ones."""

    def __init__(self) -> None:
        self.unregistered: list[Path] = []

    async def load(self, name: str) -> float | None:
        raise DeviceOutOfMemory(f"model '{name}': its instances' own weight copies do not fit")

    async def unregister_repository(self, root: Path) -> None:
        self.unregistered.append(root)


async def test_a_load_the_gpu_has_no_room_for_is_507_and_unregistered(tmp_path: Path) -> None:
    make_add_sub(tmp_path / "digest", "model")
    models = _NoRoom()
    endpoint = MultiModelEndpoint(models, body_timeout_s=5)
    answer = _at(endpoint, "POST", "/models")
    assert isinstance(answer, Answer)
    server = RawTestServer(answer.respond)
    async with TestClient(server) as client:
        body = {"model_name": "big", "url": str(tmp_path / "digest" / "model")}
        response = await client.post("/models", json=body)
        assert response.status == 507
        assert "do not fit" in (await response.json())["error"]
    assert models.unregistered == [tmp_path / "digest"]
