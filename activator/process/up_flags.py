"""`thaw up`'s flags, defined on the `up` parser that activator.process.cli makes: its own,
the scale settings (activator.config), the Kubernetes ones (kube_cli), and those shared with
`thaw serve` and tritonserver (thawserver.*_flags).

    add_up_arguments(parser)   every flag, in `--help` order
    DESCRIPTION                the text `thaw up --help` opens with
"""

from __future__ import annotations

import argparse
from pathlib import Path

from activator.config import SETTING_RANGES, ScaleSettings
from activator.process.body_limit_cli import add_body_limit_arguments
from activator.process.kube_cli import add_kubernetes_arguments
from activator.process.repository_cli import add_repository_arguments, triton_bool
from activator.process.shared_cli import add_shared_arguments
from activator.scaler.backend import ScalerKind
from activator.scaler.local_config import PoolSettings
from thawserver import lora_flags, max_tokens_flag
from thawserver.backend_config_flags import add_backend_config_argument
from thawserver.cache_flags import add_cache_arguments
from thawserver.device_flags import add_replica_device_arguments
from thawserver.grpc_compression import add_compression_argument
from thawserver.grpc_keepalive import add_keepalive_arguments
from thawserver.grpc_tls import add_tls_arguments
from thawserver.limit_flags import add_body_timeout_argument, add_limit_arguments
from thawserver.metrics_config_flags import add_metrics_config_argument
from thawserver.model_config_name_flag import add_model_config_name_argument
from thawserver.rate_limit_flags import add_rate_limit_arguments
from thawserver.restricted_protocols import add_restriction_arguments
from thawserver.reuse_port_flags import add_reuse_port_arguments
from thawserver.settings_flags import add_log_flags, add_trace_flags
from thawserver.tool_call_flags import add_tool_call_arguments
from thawserver.triton_flag_names import add_ignored_flags, add_unsupported_flags
from thawwire.runtime_parameters import SPARE_IMPORTS_AUTO

__all__ = ["DESCRIPTION", "add_up_arguments"]

DESCRIPTION = """\
Run the whole platform on this machine. Every model of the Triton model repository REPO gets
the KServe v2 endpoints at http://HOST:PORT/v2/models/<name>/... and starts at zero replicas.
Metadata, config and readiness are answered without waking a model; the first inference
request holds while a replica is claimed from the warm pool and the model restored into it,
then replicas follow load (Knative-style stable/panic windows) and go back to zero after the
idle grace period. Each scale setting below is the default for every model; a model overrides
it in its config.pbtxt, e.g.

  parameters { key: "thaw.max_replicas" value { string_value: "2" } }

Prometheus metrics are on /metrics; the status page (models, cold starts, plots, the cost
of scale to zero against always-on replicas) on /ui/; `thaw status` prints a table of the models.
SIGTERM/SIGINT stop accepting, drain in-flight requests and stop every replica.
"""

_SETTING_HELP = {
    "min_replicas": "replicas kept even when idle",
    "max_replicas": "upper bound of replicas per model",
    "target_concurrency": "in-flight requests per replica the autoscaler aims for",
    "scale_to_zero_grace_s": "seconds without requests before the last replica goes",
    "stable_window_s": "seconds of history behind normal scaling decisions",
    "panic_window_s": "seconds of history that detect a burst",
    "panic_threshold": "burst = panic-window demand >= this x ready replicas",
    "scale_down_delay_s": "keep the highest replica count of the last N seconds",
    "activation_timeout_s": "seconds a request may be held for a wake-up (then 504; the start "
    "goes on)",
    "load_timeout_s": "seconds one replica start (process + model load) may take before it "
    "fails; the repository load call waits this long",
    "max_held_requests": "held requests per model before 503 + Retry-After",
    "max_held_bytes": "sum of held request bodies (declared) per model before 503",
    "container_concurrency": "in-flight requests per replica (0 = unlimited)",
}


# tritonserver's cloud-port flags: `thaw serve` has them, `thaw up` does not (decision 0027).
_SERVE_ONLY = (
    "--allow-vertex-ai", "--vertex-ai-port", "--vertex-ai-default-model",
    "--vertex-ai-thread-count", "--allow-sagemaker", "--sagemaker-port",
    "--sagemaker-safe-port-range", "--sagemaker-thread-count",
)  # fmt: skip


class _ServeOnly(argparse.Action):
    """A cloud-port flag given to `thaw up`: exit 2 saying where it works."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        where = "docs/decisions/0027-cloud-ports-are-rewrites.md"
        parser.error(f"{option_string} is a thaw serve flag: thaw up has no Vertex AI or "
                     f"SageMaker port ({where})")  # fmt: skip


def add_up_arguments(p: argparse.ArgumentParser) -> None:
    """Every flag of `thaw up`, on `p`."""
    add_repository_arguments(p)
    p.add_argument(
        "--host", default="127.0.0.1",
        help="listen address of every port (default 127.0.0.1; --http-address, --grpc-address "
        "and --metrics-address set one each)",
    )  # fmt: skip
    p.add_argument(
        "--port", "--http-port", type=int, default=8000,
        help="HTTP listen port (default 8000; --http-port is tritonserver's name); 0 picks a "
        "free one",
    )  # fmt: skip
    p.add_argument(
        "--http-address", default=None, metavar="HOST",
        help="HTTP listen address alone, as tritonserver's (default: --host)",
    )  # fmt: skip
    triton = p.add_argument_group("Triton's other ports")
    triton.add_argument(
        "--allow-http", type=_http_on, default=True, metavar="BOOL",
        help="true only: the HTTP port is thaw up's front door (status page, wakes, "
        "direct connections)",
    )  # fmt: skip
    triton.add_argument(
        "--grpc-port", type=int, default=None, metavar="PORT",
        help="KServe v2 gRPC port (default 8001; with --port 0 a free one); models at zero "
        "are held and woken as over HTTP",
    )  # fmt: skip
    triton.add_argument(
        "--metrics-port", type=int, default=None, metavar="PORT",
        help="Prometheus /metrics port, as Triton's (default 8002; with --port 0 a free one); "
        "/metrics is on --port too",
    )  # fmt: skip
    for name in ("grpc", "metrics"):
        triton.add_argument(
            f"--allow-{name}", type=triton_bool, default=True, metavar="BOOL",
            help=f"serve the {name} port (default true)",
        )  # fmt: skip
        triton.add_argument(
            f"--{name}-address", default=None, metavar="HOST",
            help=f"the {name} port's listen address (default: --host, not --http-address)",
        )  # fmt: skip
    for flag in _SERVE_ONLY:
        triton.add_argument(flag, action=_ServeOnly, nargs="?", default=argparse.SUPPRESS,
                            help=argparse.SUPPRESS)  # fmt: skip
    add_reuse_port_arguments(triton)  # --port's and --grpc-port's listeners, not the replicas'
    add_compression_argument(triton, responses="the gRPC front door's responses (as thaw serve)")
    add_keepalive_arguments(triton)
    add_model_config_name_argument(triton, replicas=True)
    triton.add_argument(
        "--model-load-retry-count", dest="model_load_retries", type=int, default=0,
        metavar="N", help="each replica tries a model version whose load fails N more times, "
        "as tritonserver (default 0)",
    )  # fmt: skip
    triton.add_argument(
        "--id", dest="server_id", default="triton", metavar="ID",
        help="this server's identifier: the `name` of its server metadata (default triton)",
    )  # fmt: skip
    add_tls_arguments(
        triton, where="the gRPC front door",
        note="The replicas behind it are reached in plaintext over loopback",
    )  # fmt: skip
    p.add_argument(
        "--cache",
        type=Path,
        default=None,
        metavar="DIR",
        help="snapshot image cache directory (default ~/.cache/thaw/images)",
    )
    p.add_argument(
        "--store",
        default=None,
        metavar="URI",
        help="image store URI (e.g. s3://bucket/prefix or a directory); with it, the local "
        "scaler pulls each model's image into the cache at start-up, without it images are "
        "built there",
    )
    p.add_argument("--no-image-build", action="store_true", help="do not build images at start")
    p.add_argument(
        "--cache-max-bytes",
        type=int,
        default=None,
        metavar="N",
        help="byte budget of the image cache: least recently used chunks are evicted to fit "
        "(default: unbounded)",
    )
    p.add_argument(
        "--host-cache-bytes",
        type=int,
        default=None,
        metavar="N",
        help="keep images of models scaled to zero in shared memory up to N bytes, so their "
        "next wake maps the image instead of reading it (0: off; default 1/8 of this "
        "machine's memory; local scaler only: off with --scaler kubernetes)",
    )
    p.add_argument(
        "--scaler",
        choices=[kind.value for kind in ScalerKind],
        default=ScalerKind.LOCAL.value,
        help="where replicas run: local = `thaw serve` processes on this machine (default); "
        "kubernetes = warm-pool pods claimed on demand (needs the `kubernetes` extra)",
    )
    p.add_argument(
        "--model-settings",
        type=Path,
        default=None,
        metavar="FILE",
        help='per-model `thaw.*` overrides, JSON {"models": {name: {"thaw.<setting>": value}}} '
        "(the Helm chart's models ConfigMap)",
    )
    local = p.add_argument_group("local scaler (--scaler local)")
    local.add_argument(
        "--warm-pool",
        type=int,
        default=1,
        metavar="N",
        help="idle runtime processes kept ready at least (default 1); the pool keeps one per "
        "model woken within --pool-window-s, within --pool-memory-bytes",
    )
    local.add_argument(
        "--pool-memory-bytes",
        type=int,
        default=PoolSettings().budget_bytes,
        metavar="N",
        help="memory (PSS) the idle pool processes and the fork server may use together "
        f"(default {PoolSettings().budget_bytes >> 20} MiB; 0: no idle processes)",
    )
    local.add_argument(
        "--pool-window-s",
        type=float,
        default=PoolSettings().window_s,
        metavar="S",
        help="a model's wake keeps an idle process for it this long (default %(default)g)",
    )
    local.add_argument(
        "--fork-server",
        choices=["on", "off"],
        default="on",
        help="fork pool processes from one process that imported the frameworks (default "
        "on); off: start each as a fresh interpreter",
    )
    local.add_argument(
        "--preload-frameworks",
        default="onnxruntime,torch",
        metavar="LIST",
        help="frameworks warm-pool processes import before ready, a comma list of onnxruntime, "
        "torch, tensorrt (default onnxruntime,torch; '' for none)",
    )
    local.add_argument(
        "--python-spare-stubs",
        type=int,
        default=None,
        metavar="N",
        help="Python stub processes each pool process starts while it waits to be claimed "
        "(0-8; default: as many as the repository's Python model with the most instances "
        "runs, at start; 0 without one): a "
        "Python model's cold start takes one instead of waiting for an interpreter to start "
        "and import numpy; a replica releases those its model did not take (0: none, each "
        "stub starts at the load)",
    )
    local.add_argument(
        "--python-spare-stub-imports",
        default=SPARE_IMPORTS_AUTO,
        metavar="LIST",
        help="comma list of modules each spare stub imports while it waits (e.g. torch): a "
        "Python model importing one finds it imported at its cold start; each costs its "
        "memory in every idle pool process (default auto: the installed packages the "
        "repository's Python models import, read from their .py files at start; '' for none)",
    )
    local.add_argument(
        "--target",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="where pool processes run KIND_AUTO models and which images they look up: auto "
        "(default: each pool process finds this machine's GPUs without creating a CUDA "
        "context, as Triton resolves KIND_AUTO, and becomes CUDA-ready when there are any), "
        "cpu, or cuda",
    )
    local.add_argument(
        "--arena-bytes",
        type=int,
        default=0,
        help="restore arena pre-faulted in every idle pool process (default 0: a restore "
        "allocates an arena the size of the model that claimed the process)",
    )
    add_shared_arguments(local)
    p.add_argument(
        "--request-timeout-s",
        type=float,
        default=300.0,
        help="a proxied request with no answer by then gets 504 (default 300)",
    )
    p.add_argument(
        "--drain-timeout-s",
        type=float,
        default=30.0,
        help="scale-down/shutdown wait for in-flight requests (default 30)",
    )
    p.add_argument(
        "--exit-timeout-secs",
        dest="drain_timeout_s",
        type=float,
        metavar="EXIT_TIMEOUT_SECS",
        help="tritonserver's name for --drain-timeout-s (the last one given wins)",
    )
    add_body_limit_arguments(p)  # --max-body-bytes and the platform's own calls' cap
    p.add_argument(
        "--backend-directory", type=Path, metavar="DIR",
        help="Python-based backends, as tritonserver's flag: a config's `backend: NAME` that "
        "Thaw does not have runs DIR/NAME/model.py as a Python model (e.g. Triton's "
        "vllm_backend in DIR/vllm/); given to every replica too. Local scaler only",
    )  # fmt: skip
    _add_connection_arguments(p)
    add_tool_call_arguments(p, {})  # given to each local replica (thawserver.tool_call_flags)
    lora_flags.add_lora_argument(p, {})  # used here, and given to each local replica
    max_tokens_flag.add_default_max_tokens_argument(p, {})  # given to each local replica
    p.add_argument(
        "--direct-connections",
        choices=["on", "off"],
        default="on",
        help="hand a warm model's new client connections straight to a replica, taking the "
        "activator out of their data path (default on; per model: thaw.direct_connections "
        '"true"/"false"). Direct connections skip the activator\'s queue, breaker and '
        "timeouts; a replica that dies mid-request leaves its client a 502 from the "
        "activator (a reset if the answer was being written)",
    )
    local.add_argument(
        "--direct-max-age-s",
        type=float,
        default=10.0,
        help="a direct connection older than this is closed after its next response, so "
        "clients reconnect through the activator and load rebalances (default 10); a "
        "replica being drained closes them at their next response whatever their age",
    )
    p.add_argument(
        "--gpu-hour-price",
        type=float,
        default=None,
        metavar="PRICE",
        help="price of one GPU-hour: the status page, `thaw status --cost` and "
        "/thaw/status then show GPU-seconds used and saved as money too",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="thaw up's log level, and its local replicas' (default info)",
    )
    _add_log_and_trace_arguments(p)
    restricted = p.add_argument_group(
        "restricted APIs (as thaw serve and tritonserver; applied at the front doors, HTTP and "
        "gRPC, before a request is held or forwarded; direct connections are off with an HTTP one)"
    )
    add_restriction_arguments(restricted)
    _add_header_forward_arguments(p)
    cache = p.add_argument_group(
        "response cache (as thaw serve and tritonserver; each replica keeps its own, "
        "--scaler local)"
    )
    add_cache_arguments(cache)
    add_kubernetes_arguments(p)
    scale = p.add_argument_group("scale settings (defaults for every model; thaw.<name> overrides)")
    defaults = ScaleSettings()
    for name, (low, high) in SETTING_RANGES.items():
        default = getattr(defaults, name)
        scale.add_argument(
            f"--{name.replace('_', '-')}",
            dest=f"scale_{name}",
            default=None,
            metavar="N",
            help=f"{_SETTING_HELP[name]} (default {default}, range [{low:g}, {high:g}])",
        )

    device = p.add_argument_group(
        "GPU and loading (tritonserver's flags, as thaw serve takes them; given to every "
        "replica, --scaler local)"
    )
    add_replica_device_arguments(device)
    # --cache-directory, --metrics-interval-ms, --repoagent-directory, the thread counts, ...
    quiet = p.add_argument_group("tritonserver flags accepted without effect (logged)")
    add_ignored_flags(quiet, p)
    # Last: any other tritonserver flag is refused by name (docs/scale-to-zero.md).
    add_unsupported_flags(p, "up")


def _http_on(text: str) -> bool:
    """`--allow-http`: true, or exit 2 saying why thaw up cannot turn its HTTP port off."""
    if not triton_bool(text):
        raise argparse.ArgumentTypeError(
            "thaw up cannot turn its HTTP port off: it is the front door (the status page, "
            "wakes from zero, direct connections); thaw serve --allow-http=false can"
        )
    return True


def _add_log_and_trace_arguments(p: argparse.ArgumentParser) -> None:
    """tritonserver's logging and trace flags, as on `thaw serve` (thawserver.settings_flags);
    clients change these settings through /v2/logging and /v2/trace/setting, never a file."""
    g = p.add_argument_group("logging and tracing (tritonserver's flags, as on thaw serve)")
    add_log_flags(g)
    add_trace_flags(g)


def _add_header_forward_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group(
        "request headers as parameters, the rate limiter, backend settings (as thaw serve and "
        "tritonserver; given to every replica, --scaler local)"
    )
    for surface, what in (("http", "HTTP headers"), ("grpc", "gRPC metadata")):
        group.add_argument(
            f"--{surface}-header-forward-pattern", default="", metavar="REGEX",
            help=f"{what} whose name matches (case-insensitive, anywhere in the name; a leading "
            "(?-i) makes it case-sensitive) reach the model as string request parameters",
        )  # fmt: skip
    add_rate_limit_arguments(group, replicas=True)
    add_backend_config_argument(group, replicas=True)
    add_metrics_config_argument(group, replicas=True)


def _add_connection_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("slow and idle clients (every port; 0 turns a limit off)")
    add_limit_arguments(group)
    add_body_timeout_argument(group, also=", never past --request-timeout-s")
