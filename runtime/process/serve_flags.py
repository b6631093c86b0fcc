"""`thaw serve`'s flags: its own, tritonserver's (runtime.process.triton_flags) and the shared
ones (thawserver.*_flags), defined on the `serve` parser that runtime.process.cli makes.

    add_serve_arguments(parser)   every flag, in `--help` order
    DESCRIPTION                   the text `thaw serve --help` opens with
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from runtime.config import HTTP_FRONTS, ModelControlMode
from runtime.process.triton_flags import add_secs_aliases, add_triton_flags, add_unsupported_flags
from thawserver.cache_flags import add_cache_arguments
from thawserver.device_flags import MIN_COMPUTE_CAPABILITY, parse_compute_capability
from thawserver.limit_flags import add_body_timeout_argument, add_limit_arguments
from thawserver.lora_flags import add_lora_argument
from thawserver.max_tokens_flag import add_default_max_tokens_argument
from thawserver.tool_call_flags import add_tool_call_arguments
from thawwire.internal_calls import DEFAULT_MAX_BODY_BYTES as DEFAULT_INTERNAL_BODY_BYTES

__all__ = ["DESCRIPTION", "add_serve_arguments"]

DESCRIPTION = """\
Serve a Triton model repository (<repo>/<model>/config.pbtxt, <repo>/<model>/<version>/model.*)
over the KServe v2 HTTP (8000) and gRPC (8001) protocols, like `tritonserver
--model-repository REPO`; tritonserver's own flags work too (below). /metrics is served on the
HTTP port and on the metrics port (8002). With --port 0 free ports are chosen (for gRPC and
metrics too, unless given); the server prints `THAW_LISTENING_GRPC HOST:PORT`,
`THAW_LISTENING_METRICS http://HOST:PORT` and last `THAW_LISTENING http://HOST:PORT` on stdout
once it accepts connections. With --allow-vertex-ai / --allow-sagemaker it also answers Google
Vertex AI's and Amazon SageMaker's routes on ports of their own, as tritonserver does
(docs/vertex-ai.md, docs/sagemaker.md).
"""


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """Every flag of `thaw serve`, on `p` (made with conflict_handler="resolve": the catch of
    tritonserver flags Thaw lacks, added last, never shadows one defined before it)."""
    p.add_argument(
        "repository", metavar="REPO", nargs="?", default=None,
        help="model repository: a directory or s3://[host:port/]bucket/path (or "
        "--model-repository=DIR, repeatable)",
    )  # fmt: skip
    p.add_argument(
        "--host", dest="host", default="127.0.0.1",
        help="address to bind: HTTP's, and gRPC's and metrics' unless given theirs "
        "(default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--http-address", dest="http_address", default=None, metavar="HOST",
        help="HTTP bind address only, as tritonserver's (default: --host)",
    )  # fmt: skip
    p.add_argument(
        "--port", "--http-port", dest="port", type=int, default=8000,
        help="HTTP port; 0 picks a free one (default 8000)",
    )  # fmt: skip
    p.add_argument(
        "--front", choices=HTTP_FRONTS, default="python",
        help="what listens on the HTTP (and gRPC) port: python, the server itself; native, "
        "the native front (`make native` builds it; decision 0032): it answers the hot Python "
        "models' infers through their stubs and forwards every other request to the server "
        "on a private Unix socket (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--model-control-mode",
        type=str.lower,  # tritonserver takes any case (`--model-control-mode=POLL`)
        choices=[m.value for m in ModelControlMode],
        default="none",
        help="none: load every model at start; poll: also reload on repository changes; "
        "explicit: load only --load-model and what the load API asks for (default none)",
    )
    p.add_argument(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="in explicit mode, a model to load at start (repeatable; '*' loads all)",
    )
    p.add_argument(
        "--repository-poll-secs",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="with --model-control-mode poll: seconds between reads of the repository (default 15)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=64 * 1024 * 1024,
        help="request body cap, also after gzip/deflate decoding; over it -> 413 (default 64 MiB)",
    )
    p.add_argument(
        "--max-json-depth",
        type=int,
        default=100,
        metavar="N",
        help="JSON nesting cap: a deeper request body gets 400 (default 100, Triton's)",
    )
    p.add_argument(
        "--store", default=None, metavar="URI", help="snapshot image store: s3://... or a dir"
    )
    p.add_argument("--cache", type=Path, default=None, metavar="DIR", help="local image cache")
    p.add_argument(
        "--target",
        default="auto",
        help="where KIND_AUTO runs and which images are looked up: auto (default: GPUs if this "
        "machine has them, found without creating a CUDA context, as Triton resolves "
        "KIND_AUTO), cpu, or cuda[:sm_XX]",
    )
    p.add_argument(
        "--preload-frameworks",
        default="",
        metavar="LIST",
        help="comma list of onnxruntime,torch,tensorrt to import before reporting ready",
    )
    p.add_argument(
        "--python-spare-stubs",
        default="0",
        metavar="N",
        help="start N Python stub processes before reporting ready (0-8; default 0), taken by "
        "the first Python models loaded, so their load does not wait for an interpreter to "
        "start; those not taken end once a load is done; auto: as many as the repository's "
        "Python model with the most instances runs, read before ready (a warm pod; `thaw up` "
        "decides for its pool processes)",
    )
    p.add_argument(
        "--python-spare-stub-imports",
        default="",
        metavar="LIST",
        help="comma list of modules each spare stub imports while it waits (e.g. torch): a "
        "Python model that imports them finds them imported; each costs its memory in every "
        "spare; auto: the installed packages the repository's Python models import, read "
        "from their .py files before ready (default: none)",
    )
    p.add_argument(
        "--arena-bytes",
        type=int,
        default=0,
        help="pre-fault a restore arena of this many bytes before ready (default 0: each "
        "restore allocates an arena the size of its image)",
    )
    p.add_argument(
        "--cache-max-bytes",
        type=int,
        default=None,
        metavar="N",
        help="byte budget of the --cache directory: least recently used chunks are evicted "
        "to fit (default: unbounded)",
    )
    p.add_argument(
        "--host-cache-bytes",
        type=int,
        default=0,
        metavar="N",
        help="keep restored images in shared memory up to N bytes, so the next load of the "
        "same image (by any process using the same --host-cache directory) maps it instead "
        "of reading it (default 0: off)",
    )
    p.add_argument(
        "--host-cache",
        type=Path,
        default=None,
        metavar="DIR",
        help="directory of the shared host-memory tier, on a tmpfs (default "
        "/dev/shm/thaw-host-<uid>)",
    )
    p.add_argument(
        "--log-level", default="info", help="debug|info|warning|error|critical (default info)"
    )
    p.add_argument(
        "--exit-timeout-secs",
        type=float,
        default=30.0,
        help="on SIGTERM, how long in-flight requests may take to finish, then how long "
        "unloading may take (default 30)",
    )
    add_body_timeout_argument(p)
    add_limit_arguments(p)
    add_tool_call_arguments(p, os.environ)
    add_lora_argument(p, os.environ)
    add_default_max_tokens_argument(p, os.environ)
    p.add_argument(
        "--event-loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="auto uses uvloop when it is installed (faster HTTP), else asyncio",
    )
    p.add_argument(
        "--inline-exec-max-us",
        type=int,
        default=200,
        help="a Python-backend model whose executions all took at most this many microseconds "
        "runs on the event loop instead of a worker thread (0: never; default %(default)s)",
    )
    add_cache_arguments(p)
    _add_gpu_flags(p)
    internal = p.add_argument_group("internal (set by `thaw up` for its replicas)")
    internal.add_argument(
        "--handoff-socket",
        type=Path,
        default=None,
        metavar="PATH",
        help="Unix socket (created 0600) on which `thaw up` hands over client connections",
    )
    internal.add_argument(
        "--front-door",
        default=None,
        metavar="URL",
        help="the platform's front door (http://HOST:PORT): where requests on handed-off "
        "connections go when this replica cannot answer them, BLS calls to models it "
        "does not serve (woken there from zero), and a Python model's load_model, "
        "unload_model and is_model_ready (the platform's load state, not this server's)",
    )
    internal.add_argument(
        "--front-door-grpc",
        default=None,
        metavar="HOST:PORT",
        help="the front door's gRPC service, where BLS streams to models this replica does "
        "not serve go (a decoupled model's every response comes back)",
    )
    internal.add_argument(
        "--internal-token-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="file holding the deployment's token (made by `thaw up`, or a Kubernetes Secret): "
        "this replica's BLS calls and ensemble steps through the front door carry it, and "
        "requests that carry it are capped at --max-internal-body-bytes instead of "
        "--max-body-bytes",
    )
    internal.add_argument(
        "--max-internal-body-bytes",
        type=int,
        default=DEFAULT_INTERNAL_BODY_BYTES,
        metavar="N",
        help="body cap of the platform's own requests (those with the token of "
        "--internal-token-file: BLS calls, ensemble steps); default 4 GiB",
    )
    internal.add_argument(
        "--handoff-state",
        type=Path,
        default=None,
        metavar="PATH",
        help="file of per-connection state bytes shared with `thaw up` for handed-off "
        "connections (it answers them if this process dies)",
    )
    internal.add_argument(
        "--fork-server-fd",
        type=int,
        default=None,
        metavar="FD",
        help="run as the fork server of `thaw up`'s warm pool on this inherited socket: "
        "import the frameworks once, then fork ready-to-serve children on request",
    )
    internal.add_argument(
        "--ensemble-steps-url",
        default=None,
        metavar="URL",
        help="run ensemble steps on the models behind this URL instead of in this process",
    )
    internal.add_argument(
        "--handoff-max-age-s",
        type=float,
        default=10.0,
        metavar="S",
        help="a handed-off connection's next response after this long closes it "
        "(default %(default)s)",
    )
    add_triton_flags(p)
    add_secs_aliases(p)
    add_unsupported_flags(p)  # after every definition (see the docstring)


def _compute_capability(text: str) -> float:
    try:
        return parse_compute_capability(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_gpu_flags(p: argparse.ArgumentParser) -> None:
    """The GPU flags (docs/gpu.md): a CUDA-ready warm process before it reports ready."""
    gpu = p.add_argument_group("GPU (CUDA-ready warm processes; docs/gpu.md)")
    gpu.add_argument(
        "--cuda-memory-pool-byte-size",
        action="append",
        default=[],
        metavar="<gpu>:<bytes>",
        help="before reporting ready, create the CUDA context on this GPU and reserve this much "
        "device memory for restores and models (repeatable, one per GPU; Triton's flag)",
    )
    gpu.add_argument(
        "--model-load-gpu-limit",
        action="append",
        default=[],
        metavar="<device_id>:<fraction>",
        help="refuse to create a model's GPU instance on this GPU while its used memory is over "
        "this fraction of its total (repeatable, one per GPU; Triton's flag)",
    )
    gpu.add_argument(
        "--pinned-memory-pool-byte-size",
        type=int,
        default=0,
        metavar="BYTES",
        help="pin a host staging buffer of this size before reporting ready; restores to a GPU "
        "copy through it in 32 MiB slots (default 0: each restore pins its own ring of 512 MiB)",
    )
    gpu.add_argument(
        "--min-supported-compute-capability", type=_compute_capability,
        default=MIN_COMPUTE_CAPABILITY, metavar="CC",
        help="GPUs of a lower compute capability are not used: KIND_AUTO leaves them out and an "
        "instance group naming one fails to load, in Triton's words (Triton's flag; default "
        "%(default)s)",
    )  # fmt: skip
    gpu.add_argument(
        "--vram-headroom-bytes",
        type=int,
        default=512 << 20,
        metavar="BYTES",
        help="a restore to a GPU needs the image plus this much free device memory, else the "
        "load fails with 503 (default 512 MiB)",
    )
