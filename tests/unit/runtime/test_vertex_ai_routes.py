"""Vertex AI's surface as pure decisions (runtime.http.vertex_ai, runtime.process.
vertex_ai_flags): which v2 request each Vertex AI request is, the default model, tritonserver's
refusals, and what the `AIP_*` environment sets."""

from __future__ import annotations

import argparse

import pytest

from runtime.errors import ServingError
from runtime.http.cloud_front import Refusal, Rewrite
from runtime.http.vertex_ai import (
    BINARY_MIME,
    REDIRECT_HEADER,
    VertexRoutes,
    default_model,
    rewrite,
)
from runtime.process.vertex_ai_flags import (
    add_vertex_ai_arguments,
    apply_vertex_ai_environment,
    vertex_ai_settings,
)

ROUTES = VertexRoutes.from_config("/v1/endpoints/[0-9]+:predict", "/health", "add sub")


def _at(path: str, method: str = "POST", length: int | None = 100, **headers: str) -> object:
    return rewrite(ROUTES, method, path, {k.replace("_", "-"): v for k, v in headers.items()},
                   length)  # fmt: skip


def _redirect(endpoint: str, method: str = "POST") -> object:
    return rewrite(ROUTES, method, "/v1/endpoints/1:predict", {REDIRECT_HEADER: endpoint}, 0)


def test_health_and_a_plain_prediction() -> None:
    assert _at("/health", "GET") == Rewrite("GET", "/v2/health/ready")
    assert _at("/v1/endpoints/42:predict") == Rewrite(
        "POST", "/v2/models/add%20sub/infer", infer=True
    )
    # The whole path matches the route, as RE2::FullMatch: a longer one does not.
    assert isinstance(_at("/v1/endpoints/42:predict/x"), Refusal)
    assert _at("/health/x", "GET") == Refusal(
        400, "no Vertex AI route is '/health/x': the health route or the predict route"
    )


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        (BINARY_MIME + "40", Rewrite("POST", "/v2/models/add%20sub/infer", infer=True,
                                     header_length=40)),
        (BINARY_MIME + " 7xyz", Rewrite("POST", "/v2/models/add%20sub/infer", infer=True,
                                        header_length=7)),
        # atoi reads no digits: 0, the whole body raw tensor bytes (refused later: two inputs).
        (BINARY_MIME + "abc40", Rewrite("POST", "/v2/models/add%20sub/infer", infer=True,
                                        header_length=0)),
        (BINARY_MIME + "-1", Refusal(400, "inference header size should be in range (0, 100), "
                                     "got: -1")),
        (BINARY_MIME + "101", Refusal(400, "inference header size should be in range (0, 100), "
                                      "got: 101")),
        ("x/" + BINARY_MIME + "4", Refusal(400, f"expect MIME type for binary data starts with "
                                           f"'{BINARY_MIME}', got: x/{BINARY_MIME}4")),
        ("application/json", Rewrite("POST", "/v2/models/add%20sub/infer", infer=True)),
    ],
)  # fmt: skip
def test_the_json_length_of_a_prediction_comes_from_its_content_type(
    content_type: str, expected: object
) -> None:
    assert _at("/v1/endpoints/1:predict", Content_Type=content_type) == expected


@pytest.mark.parametrize(
    ("endpoint", "method", "path"),
    [
        ("v2", "GET", "/v2"),
        ("v2/health/live", "GET", "/v2/health/live"),
        ("metrics", "GET", "/metrics"),
        ("v2/models/stats", "GET", "/v2/models/stats"),
        ("v2/models/m", "GET", "/v2/models/m"),
        ("v2/models/m/versions/3/ready", "GET", "/v2/models/m/versions/3/ready"),
        ("v2/models/m/config", "GET", "/v2/models/m/config"),
        ("v2/models/m/stats", "GET", "/v2/models/m/stats"),
        ("v2/systemsharedmemory/status", "GET", "/v2/systemsharedmemory/status"),
        ("v2/systemsharedmemory/region/r/register", "POST",
         "/v2/systemsharedmemory/region/r/register"),
        ("v2/cudasharedmemory/status", "GET", "/v2/cudasharedmemory/status"),
        ("v2/repository/index", "POST", "/v2/repository/index"),
        ("v2/repository/models/m/unload", "POST", "/v2/repository/models/m/unload"),
    ],
)  # fmt: skip
def test_a_redirect_reaches_tritons_endpoints_by_their_method(
    endpoint: str, method: str, path: str
) -> None:
    assert _redirect(endpoint) == Rewrite(method, path)


def test_a_redirected_infer_and_what_no_redirect_reaches() -> None:
    assert _redirect("v2/models/m/versions/2/infer") == Rewrite(
        "POST", "/v2/models/m/versions/2/infer", infer=True
    )
    for endpoint in ("v2/logging", "v2/trace/setting", "v2/models/m/generate", "../etc", ""):
        refusal = _redirect(endpoint)
        assert isinstance(refusal, Refusal) and refusal.status == 400
    assert _redirect("v2", method="GET") == Refusal(
        405, "a X-Vertex-Ai-Triton-Redirect request must be a POST, not GET"
    )


def test_the_default_model_is_the_named_one_loaded_or_the_only_one() -> None:
    assert default_model("", ["m"]) == "m"
    assert default_model("b", ["a", "b"]) == "b"
    with pytest.raises(ServingError, match="only a single model if default model is not"):
        default_model("", ["a", "b"])
    with pytest.raises(ServingError, match="only a single model"):
        default_model("", [])
    with pytest.raises(ServingError, match="Expect the default model 'c' is loaded"):
        default_model("c", ["a", "b"])


def test_routes_must_be_set_and_be_regular_expressions() -> None:
    with pytest.raises(ServingError, match=r"^API_PREDICT_ROUTE is not defined for Vertex AI"):
        VertexRoutes.from_config("", "/h", "m")
    with pytest.raises(ServingError, match=r"^AIP_HEALTH_ROUTE is not defined for Vertex AI"):
        VertexRoutes.from_config("/p", "", "m")
    with pytest.raises(ServingError, match="AIP_PREDICT_ROUTE '/p\\(' is not a regular exp"):
        VertexRoutes.from_config("/p(", "/h", "m")


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("repository", nargs="?")
    p.add_argument("--model-repository", dest="model_repositories", action="append", default=[])
    p.add_argument("--allow-http", default=None, type=lambda t: t == "true")
    p.add_argument("--allow-grpc", default=None, type=lambda t: t == "true")
    add_vertex_ai_arguments(p.add_argument_group("g"))
    return p.parse_args(list(argv))


def test_without_vertex_ai_environment_the_port_is_off_and_the_others_on() -> None:
    args = _args("repo")
    apply_vertex_ai_environment(args, {})
    assert (args.allow_vertex_ai, args.allow_http, args.allow_grpc) == (False, True, True)
    assert vertex_ai_settings(args)["vertex_ai_port"] == 8080


def test_aip_mode_prediction_turns_vertex_ai_on_and_the_others_off_unless_given() -> None:
    env = {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "5234", "AIP_PREDICT_ROUTE": "/p",
           "AIP_HEALTH_ROUTE": "/h", "AIP_STORAGE_URI": "s3://bucket/models"}  # fmt: skip
    args = _args("--allow-grpc=true")
    apply_vertex_ai_environment(args, env)
    assert (args.allow_vertex_ai, args.allow_http, args.allow_grpc) == (True, False, True)
    settings = vertex_ai_settings(args)
    assert settings["vertex_ai_port"] == 5234
    assert settings["vertex_ai_host"] == "0.0.0.0"
    assert (settings["vertex_ai_predict_route"], settings["vertex_ai_health_route"]) == ("/p", "/h")
    assert args.model_repositories == ["s3://bucket/models"]
    # A repository given wins over AIP_STORAGE_URI; a flag over the environment.
    args = _args("--model-repository=local", "--allow-vertex-ai=false", "--vertex-ai-port=9")
    apply_vertex_ai_environment(args, env)
    assert args.model_repositories == ["local"]
    assert (args.allow_vertex_ai, vertex_ai_settings(args)["vertex_ai_port"]) == (False, 9)


def test_an_aip_http_port_that_is_no_number_is_refused() -> None:
    with pytest.raises(ValueError, match="AIP_HTTP_PORT = 'http', must be a port number"):
        apply_vertex_ai_environment(_args(), {"AIP_HTTP_PORT": "http"})
