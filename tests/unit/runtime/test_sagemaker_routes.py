"""SageMaker's surface as pure decisions (runtime.http.sagemaker, runtime.process.
sagemaker_flags, ServeConfig's safe port range): which v2 request each SageMaker request is,
its answer's content type, and tritonserver's refusals."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from aiohttp import web

from runtime.config import ConfigError, ServeConfig
from runtime.http.cloud_front import Refusal, Rewrite
from runtime.http.sagemaker import BINARY_MIME, SageMakerRoutes, rewrite
from runtime.process.sagemaker_flags import apply_sagemaker_environment, port_range

ROUTES = SageMakerRoutes("sm model", "live")


def _at(path: str, method: str = "POST", content_type: str = "", length: int = 100) -> object:
    return rewrite(ROUTES, method, path, {"Content-Type": content_type}, length)


def test_ping_asks_the_ping_mode_and_invocations_infer_the_default_model() -> None:
    assert _at("/ping", "GET") == Rewrite("GET", "/v2/health/live")
    target = _at("/invocations")
    assert isinstance(target, Rewrite)
    assert (target.method, target.path, target.infer) == ("POST", "/v2/models/sm%20model/infer",
                                                          True)  # fmt: skip
    assert target.header_length is None  # the whole body is JSON
    assert set(target.drop) == {"Content-Encoding", "Accept-Encoding"}  # never compressed
    binary = _at("/invocations", content_type=BINARY_MIME + "40")
    assert isinstance(binary, Rewrite) and binary.header_length == 40


def test_what_sagemaker_does_not_route() -> None:
    assert _at("/invocations", content_type=BINARY_MIME + "-5") == Refusal(
        400, "inference header size should be in range (0, 100), got: -5"
    )
    for path in ("/models", "/models/", "/models/m", "/models/m/invoke"):
        refusal = _at(path)  # without a multi-model endpoint
        assert isinstance(refusal, Refusal) and refusal.status == 501
    assert _at("/v2/health/ready", "GET") == Refusal(
        400, "no SageMaker route is '/v2/health/ready': /ping, /invocations or /models"
    )


def _fixed(response: web.Response) -> web.Response:
    target = _at("/invocations")
    assert isinstance(target, Rewrite) and target.fix is not None
    target.fix(response)
    return response


def test_an_answer_carries_sagemakers_content_type() -> None:
    binary = web.Response(body=b"{}xxxx", content_type="application/octet-stream",
                          headers={"Inference-Header-Content-Length": "2"})  # fmt: skip
    assert _fixed(binary).headers["Content-Type"] == BINARY_MIME + "2"
    assert "Inference-Header-Content-Length" not in binary.headers
    plain = web.Response(body=b"{}", content_type="application/json")
    assert _fixed(plain).headers["Content-Type"] == "application/json"
    error = web.json_response({"error": "no"}, status=400)
    assert _fixed(error).headers["Content-Type"].startswith("application/json")


def test_the_safe_port_range_as_tritonserver_reads_and_checks_it(tmp_path: Path) -> None:
    assert port_range("8081-9000") == (8081, 9000)
    for bad in ("9000", "a-b", "9000-8081", "1-70000"):
        with pytest.raises(argparse.ArgumentTypeError):
            port_range(bad)
    ok = dict(repository=tmp_path, allow_sagemaker=True, sagemaker_safe_port_range=(8000, 8002))
    ServeConfig(**ok, port=8000, grpc_port=8001, metrics_port=8002)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"cannot listen to GRPC requests at port 9001, "
                       r"allowed port range is \[8000, 8002\]"):  # fmt: skip
        ServeConfig(**ok, port=8000, grpc_port=9001, metrics_port=8002)  # type: ignore[arg-type]
    # A listener that is off is not checked.
    ServeConfig(**ok, port=8000, allow_grpc=False, grpc_port=9001, metrics_port=8002)  # type: ignore[arg-type]


def test_the_environment_names_the_model_and_the_ping_mode() -> None:
    args = argparse.Namespace(allow_sagemaker=True)
    apply_sagemaker_environment(args, {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "m",
                                       "SAGEMAKER_TRITON_PING_MODE": "live"})  # fmt: skip
    assert (args.sagemaker_model, args.sagemaker_ping_mode) == ("m", "live")
    apply_sagemaker_environment(args, {})
    assert args.sagemaker_model == "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"
    with pytest.raises(ValueError, match="SAGEMAKER_TRITON_PING_MODE = 'x'"):
        apply_sagemaker_environment(args, {"SAGEMAKER_TRITON_PING_MODE": "x"})
    # Not read without --allow-sagemaker.
    apply_sagemaker_environment(argparse.Namespace(allow_sagemaker=False),
                                {"SAGEMAKER_TRITON_PING_MODE": "x"})  # fmt: skip
