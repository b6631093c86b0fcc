"""Which of the Triton Python client's examples run, how, and against which server: each
example run (`Case`: its script, arguments, the port `-u` names, its PASS line, why it is skipped
or which failure is a difference kept on purpose) and each server start they need (`ServerMode`:
its models, control mode and tritonserver flags), as qa/L0_http and qa/L0_grpc's test.sh run
them. Read by tests/conformance/triton_client_examples.py."""

from __future__ import annotations

from dataclasses import dataclass

from tests.fixtures.client_example_models import ALL_MODELS, EXPLICIT_MODELS

__all__ = ["CASES", "REPOSITORIES", "Case", "ServerMode"]

_NO_CUDA = "CUDA shared memory: needs a GPU and tritonclient's cuda_shared_memory (cuda-python)"
_NO_IMAGE = (
    "imports Pillow (not installed here) to read an image; test.sh checks the class it prints "
    "(VULTURE), which takes the real inception/densenet weights (downloaded)"
)


@dataclass(frozen=True)
class Case:
    """One example run: its script, its arguments, which server it needs.

    `url`: the port `-u` names (http | grpc), or "fixed" for a script that hard-codes
    localhost:8000/8001. `mode`: the server it runs against, a key of REPOSITORIES.
    `pass_line`: the line the script prints on success, checked when set. `skip`: why it cannot
    run on this machine. `deliberate`: (a line of Thaw's failing output, why Thaw answers so on
    purpose): such a failure is reported `deliberate`, not `failed`; any other still fails."""

    name: str
    script: str
    args: tuple[str, ...] = ()
    url: str = "http"
    mode: str = "default"
    pass_line: str | None = None
    skip: str | None = None
    deliberate: tuple[str, str] | None = None


def _case(script: str, *args: str, **kw: object) -> Case:
    name = " ".join((script, *[a for a in args if a != "-v"]))
    url = str(kw.pop("url", None) or ("grpc" if "grpc" in script else "http"))
    return Case(name, f"{script}.py", args, url, **kw)  # type: ignore[arg-type]


CASES: tuple[Case, ...] = (
    _case("simple_http_health_metadata", "-v"),
    _case("simple_http_infer_client", "-v"),
    _case(
        "simple_http_infer_client",
        "--request-compression-algorithm",
        "gzip",
        "--response-compression-algorithm",
        "deflate",
    ),
    _case("simple_http_aio_infer_client", "-v", pass_line="PASS: infer"),
    _case("simple_http_async_infer_client", "-v"),
    _case("simple_http_string_infer_client", "-v", pass_line="PASS: string"),
    _case("simple_http_shm_client", "-v", pass_line="PASS: system shared memory"),
    _case("simple_http_shm_string_client", "-v", pass_line="PASS: system shared memory"),
    _case("simple_http_sequence_sync_infer_client", "-v", pass_line="PASS: Sequence"),
    _case("simple_http_sequence_sync_infer_client", "-v", "-d", pass_line="PASS: Sequence"),
    _case("reuse_infer_objects_client", "-v", "-i", "http"),
    _case("reuse_infer_objects_client", "-v", "-i", "grpc", url="grpc"),
    _case(
        "simple_http_model_control",
        "-v",
        mode="http-model-control",
        pass_line="PASS: model control",
    ),
    _case("simple_grpc_health_metadata", "-v"),
    _case("simple_grpc_infer_client", "-v", pass_line="PASS: infer"),
    _case("simple_grpc_infer_client", "-C", "gzip", pass_line="PASS: infer"),
    _case(
        "simple_grpc_infer_client",
        "-v",
        "-C",
        "deflate",
        mode="grpc-compression",
        pass_line="PASS: infer",
    ),
    _case("simple_grpc_aio_infer_client", "-v", pass_line="PASS: grpc aio infer"),
    _case("simple_grpc_async_infer_client", "-v", pass_line="PASS: Async infer"),
    _case("simple_grpc_string_infer_client", "-v", pass_line="PASS: string"),
    _case("simple_grpc_shm_client", "-v", pass_line="PASS: system shared memory"),
    _case("simple_grpc_shm_string_client", "-v", pass_line="PASS: system shared memory"),
    _case("simple_grpc_sequence_sync_infer_client", "-v", pass_line="PASS: Sequence"),
    _case("simple_grpc_sequence_sync_infer_client", "-v", "-d", pass_line="PASS: Sequence"),
    _case("simple_grpc_sequence_stream_infer_client", "-v", pass_line="PASS: Sequence"),
    _case("simple_grpc_sequence_stream_infer_client", "-v", "-d", pass_line="PASS: Sequence"),
    _case(
        "simple_grpc_aio_sequence_stream_infer_client",
        "-v",
        pass_line="PASS: grpc aio sequence stream",
    ),
    _case(
        "simple_grpc_aio_sequence_stream_infer_client",
        "-v",
        "-d",
        pass_line="PASS: grpc aio sequence stream",
    ),
    _case("simple_grpc_keepalive_client", "-v", pass_line="PASS: KeepAlive"),
    _case("simple_grpc_custom_args_client", "-v", pass_line="PASS: CustomArgs"),
    _case("simple_grpc_custom_repeat", "-v", pass_line="PASS: Decoupled API"),
    _case(
        "simple_grpc_model_control",
        "-v",
        mode="grpc-model-control",
        pass_line="PASS: model control",
        deliberate=(
            "FAILED: expected status 'StatusCode.INTERNAL' for oversized file parameter, got "
            "status='StatusCode.INVALID_ARGUMENT'",
            "client HEAD (after 2.51) wants INTERNAL for a 256-byte `file:` name; Thaw's "
            "INVALID_ARGUMENT is on purpose (docs/triton-http-parity.md)",
        ),
    ),
    _case("grpc_explicit_byte_content_client", "-v", pass_line="PASS: explicit string"),
    _case("grpc_explicit_int_content_client", "-v", pass_line="PASS: explicit int"),
    _case("grpc_explicit_int8_content_client", "-v", pass_line="PASS: explicit int8"),
    _case("grpc_client", "-v", pass_line="PASS"),
    _case("memory_growth_test", "-i", "http", "-r", "20", url="fixed"),
    _case("memory_growth_test", "-i", "grpc", "-r", "20", url="fixed"),
    _case("simple_http_cudashm_client", "-v", skip=_NO_CUDA),
    _case("simple_grpc_cudashm_client", "-v", skip=_NO_CUDA),
    _case("image_client", skip=_NO_IMAGE),
    _case("grpc_image_client", skip=_NO_IMAGE),
    _case("ensemble_image_client", skip=_NO_IMAGE + "; and a preprocessing (DALI) ensemble"),
)


@dataclass(frozen=True)
class ServerMode:
    """A server the examples run against: its models, whether it is in explicit model-control
    mode, and tritonserver flags test.sh gives that start (every target gets them)."""

    models: tuple[str, ...]
    explicit: bool = False
    flags: tuple[str, ...] = ()


# The model-control examples count the repository index: 7 models over HTTP, 8 over gRPC (the
# repositories of qa/L0_http and qa/L0_grpc; the eighth there is inception_graphdef).
REPOSITORIES: dict[str, ServerMode] = {
    "default": ServerMode(ALL_MODELS),
    "http-model-control": ServerMode(EXPLICIT_MODELS, explicit=True),
    "grpc-model-control": ServerMode((*EXPLICIT_MODELS, "inception_graphdef"), explicit=True),
    # qa/L0_grpc's start for `simple_grpc_infer_client.py -C deflate`.
    "grpc-compression": ServerMode(
        ("simple",), flags=("--grpc-infer-response-compression-level=high",)
    ),
}
