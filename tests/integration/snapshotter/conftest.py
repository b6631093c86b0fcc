"""Integration fixtures: a moto S3 server on 127.0.0.1, a fault-injecting proxy in front of it,
and tiny real models (ONNX, TorchScript) in a Triton-style repository."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from snapshot_s3_fakes import BUCKET, FaultProxy

from tests.fixtures.moto_s3 import moto_server


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """A real moto S3 server subprocess on 127.0.0.1 (killed at the end of the session)."""
    with moto_server() as url:
        yield url


@pytest.fixture(scope="session")
def fault_proxy(moto_url: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(moto_url)
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
def s3_env(fault_proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """boto3's standard environment pointing at the proxy; a fresh bucket prefix per test."""
    env = {
        "AWS_ENDPOINT_URL_S3": fault_proxy.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    import boto3

    client = boto3.client("s3", endpoint_url=fault_proxy.url)
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=BUCKET)
    fault_proxy.faults.set("none", 0)
    return env


@pytest.fixture(scope="session")
def model_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`<repo>/mlp_onnx/1/model.onnx` and `<repo>/mlp_torchscript/1/model.pt`, random weights,
    each a few hundred KiB so images have several 4 KiB-aligned tensors and ranged GETs."""
    import torch

    repo = tmp_path_factory.mktemp("repo")
    torch.manual_seed(0)
    module = make_mlp().eval()  # type: ignore[attr-defined]
    (repo / "mlp_torchscript" / "1").mkdir(parents=True)
    torch.jit.save(torch.jit.script(module), str(repo / "mlp_torchscript" / "1" / "model.pt"))
    (repo / "mlp_onnx" / "1").mkdir(parents=True)
    torch.onnx.export(
        module, (torch.randn(2, 64),), str(repo / "mlp_onnx" / "1" / "model.onnx"),
        input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"}}, dynamo=False,
    )  # fmt: skip
    return repo


def _mlp_class() -> type:
    import torch

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1 = torch.nn.Linear(64, 512)
            self.norm = torch.nn.LayerNorm(512)
            self.l2 = torch.nn.Linear(512, 256)
            self.bn = torch.nn.BatchNorm1d(256)
            self.l3 = torch.nn.Linear(256, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.l3(torch.relu(self.bn(self.l2(torch.relu(self.norm(self.l1(x)))))))

    return Mlp


def make_mlp() -> object:
    module = _mlp_class()()
    import torch

    with torch.no_grad():
        module.bn.running_mean.uniform_(-1, 1)  # type: ignore[attr-defined]
        module.bn.running_var.uniform_(0.5, 2)  # type: ignore[attr-defined]
    return module
