"""Activator configuration: the frozen `ActivatorConfig` and per-model `ScaleSettings`.

Per-model settings come from `config.pbtxt` `parameters` (string values, keys `thaw.<field>`),
with the `thaw up` flags of the same names (`--<field-with-dashes>`) as defaults. Every
invalid value is refused at start-up in one form:
``"`thaw.stable_window_s` = 3 (model bert), must be in [6, 3600]"``. The scaler
backend's own settings are its config, `ActivatorConfig.scaler` (activator.scaler.local_config).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from pathlib import Path

from activator.errors import ConfigError
from activator.scaler.kube_config import KubernetesConfig, is_class_name
from activator.scaler.local_config import LocalConfig
from thawserver.connection_limits import ConnectionLimits
from thawserver.grpc_keepalive import GrpcKeepalive
from thawserver.grpc_tls import GrpcTls
from thawserver.metrics_config_flags import MetricsSettings
from thawserver.ranges import number, out_of_range
from thawserver.redaction import Redactor
from thawserver.restricted_protocols import Category, Restriction
from thawwire.internal_calls import InternalCalls
from thawwire.log_settings import LogSettings
from thawwire.runtime_parameters import RUNTIME_PARAMETERS, runtime_parameter_error
from thawwire.trace_settings import TraceSetting
from tritonconfig import DEFAULT_MAX_BATCH_SIZE

__all__ = [
    "BOOL_SETTINGS",
    "CHOICE_SETTINGS",
    "NAME_SETTINGS",
    "SETTING_RANGES",
    "ActivatorConfig",
    "BoundAddresses",
    "Placement",
    "ScaleSettings",
    "validated",
]

PARAMETER_PREFIX = "thaw."


class Placement(StrEnum):
    """A model's `thaw.placement`: replicas of its own, or room in replicas it shares with
    other models (activator.scaler.placement; docs/density.md)."""

    DEDICATED = "dedicated"  # one runtime per replica of the model: Thaw's behaviour before it
    SHARED = "shared"  # loaded into a running runtime with room, evicting idle models


@dataclass(frozen=True)
class ScaleSettings:
    """How one model scales; times in seconds, concurrency in in-flight requests."""

    min_replicas: int = 0
    max_replicas: int = 4
    target_concurrency: float = 8.0  # desired in-flight requests per replica
    scale_to_zero_grace_s: float = 30.0  # idle time before the last replica goes
    stable_window_s: float = 60.0
    panic_window_s: float = 6.0
    panic_threshold: float = 2.0  # panic when panic-window demand >= this x ready capacity
    scale_down_delay_s: float = 0.0  # keep the highest desired count this long
    activation_timeout_s: float = 60.0  # how long a request is held; then 504, the start goes on
    # How long one replica start (process or pod, plus the model's load) may take before it
    # fails; never less than `activation_timeout_s` (`start_timeout_s`). Triton bounds no
    # load: the default lets a large model's load finish (docs/scale-to-zero.md).
    load_timeout_s: float = 600.0
    max_held_requests: int = 1000
    max_held_bytes: int = 256 * 1024 * 1024  # sum of held requests' declared Content-Length
    container_concurrency: int = 0  # per-replica in-flight limit; 0 = unlimited (Knative's default)
    # Hand a warm model's new client connections straight to a replica
    # (activator.direct.front_door): the activator leaves the data path, so its per-request
    # limits and 502s do not apply there.
    direct_connections: bool = True
    # Keep the model's image in every node's cache (Kubernetes: the prefetch DaemonSet pulls
    # hot models' images onto each node, so a cold start there reads local disk, not S3).
    hot: bool = False
    # Kubernetes: which warm pool the model's pods come from (`thaw up --pool-class
    # NAME=DEPLOYMENT`; `default` is `--pool-deployment`), e.g. a GPU class and a CPU one.
    placement_class: str = "default"
    # Where its replicas run: runtimes of its own (the default), or room in runtimes shared with
    # other `shared` models, within a budget, evicting idle ones (`thaw up --scaler local`).
    placement: Placement = Placement.DEDICATED

    @property
    def start_timeout_s(self) -> float:
        """Seconds one replica start may take: `load_timeout_s`, or `activation_timeout_s`
        where that is longer (a start is never cut shorter than its held requests wait)."""
        return max(self.load_timeout_s, self.activation_timeout_s)


# field -> (inclusive low, inclusive high); the type is the dataclass field's type.
SETTING_RANGES: dict[str, tuple[float, float]] = {
    "min_replicas": (0, 100),
    "max_replicas": (1, 100),
    "target_concurrency": (0.01, 100_000),
    "scale_to_zero_grace_s": (0, 86_400),
    "stable_window_s": (6, 3600),
    "panic_window_s": (1, 3600),
    "panic_threshold": (1.1, 100),
    "scale_down_delay_s": (0, 3600),
    "activation_timeout_s": (0.5, 3600),
    "load_timeout_s": (0.5, 86_400),
    "max_held_requests": (1, 1_000_000),
    "max_held_bytes": (0, 1 << 40),
    "container_concurrency": (0, 100_000),
}

# Settings that are names (a DNS label each): set in config.pbtxt or the model-settings file.
NAME_SETTINGS = frozenset({"placement_class"})
# Settings that take one of a closed set of words: field -> the StrEnum of its words.
CHOICE_SETTINGS: dict[str, type[StrEnum]] = {"placement": Placement}
_INT_FIELDS = frozenset(f.name for f in dataclasses.fields(ScaleSettings) if f.type == "int")
# Settings that are switches: "true"/"false" in config.pbtxt, on/off as `thaw up` flags.
BOOL_SETTINGS = frozenset(f.name for f in dataclasses.fields(ScaleSettings) if f.type == "bool")
_BOOL_WORDS = {"true": True, "false": False, "on": True, "off": False}


def _from(problem: str, origin: str) -> str:
    """thawserver.ranges' message with where the value came from after the value:
    "`thaw.x` = 3 (model bert), must be in [6, 3600]"."""
    head, sep, tail = problem.partition(", must")
    return f"{head}{origin}{sep}{tail}"


def _parse_bool(raw: object, label: str, suffix: str, words: str) -> bool:
    if isinstance(raw, bool):
        return raw
    value = _BOOL_WORDS.get(str(raw).strip().lower())
    if value is None:
        raise ConfigError(f"`{label}` = {raw!r}{suffix}, must be {words}")
    return value


def _parse_choice(name: str, raw: object, label: str, suffix: str) -> StrEnum:
    words = CHOICE_SETTINGS[name]
    try:
        return words(str(raw).strip().lower())
    except ValueError:
        choices = " or ".join(w.value for w in words)
        raise ConfigError(f"`{label}` = {raw!r}{suffix}, must be {choices}") from None


def _parse_name(raw: object, label: str, suffix: str) -> str:
    text = str(raw).strip()
    if not is_class_name(text):
        raise ConfigError(f"`{label}` = {raw!r}{suffix}, must be a DNS label (a-z, 0-9, '-')")
    return text


def _parse_one(name: str, raw: object, label: str, suffix: str) -> float | int:
    """Convert and range-check one setting; `label` (without its backticks) and `suffix`
    name its origin."""
    low, high = SETTING_RANGES[name]
    is_int = name in _INT_FIELDS
    try:
        text = str(raw).strip()
        value: float | int = int(text) if is_int else float(text)
    except ValueError:
        kind = "an integer" if is_int else "a number"
        range_text = f"[{number(low)}, {number(high)}]"
        raise ConfigError(f"`{label}` = {raw!r}{suffix}, must be {kind} in {range_text}") from None
    problem = out_of_range(label, value, low, high)
    if problem is not None:
        raise ConfigError(_from(problem, suffix))
    return value


def validated(
    settings: ScaleSettings,
    overrides: Mapping[str, object],
    *,
    model: str | None = None,
) -> ScaleSettings:
    """Return `settings` with `overrides` applied and checked.

    Keys are `thaw.<field>` when `model` is given (config.pbtxt parameters; other keys are
    ignored, the runtime's own `thaw.` keys checked and left to it, unknown `thaw.` keys
    refused) and bare field names otherwise (flags).
    """
    changes: dict[str, float | int | bool | str] = {}
    known = SETTING_RANGES.keys() | BOOL_SETTINGS | NAME_SETTINGS | CHOICE_SETTINGS.keys()
    for key, raw in overrides.items():
        if model is not None:
            if not key.startswith(PARAMETER_PREFIX):
                continue
            name, label, suffix = key[len(PARAMETER_PREFIX) :], key, f" (model {model})"
            words = "true or false"
            if key in RUNTIME_PARAMETERS:  # the replica's to read; its value checked here
                problem = runtime_parameter_error(key, raw)
                if problem is not None:
                    raise ConfigError(problem + suffix)
                continue
            if name not in known:
                raise ConfigError(f"unknown setting `{key}`{suffix}")
        else:
            name, label, suffix = key, f"--{key.replace('_', '-')}", ""
            words = "on or off"
            if name not in known:
                raise ConfigError(f"unknown setting `{key}`")
        if name in BOOL_SETTINGS:
            changes[name] = _parse_bool(raw, label, suffix, words)
        elif name in NAME_SETTINGS:
            changes[name] = _parse_name(raw, label, suffix)
        elif name in CHOICE_SETTINGS:
            changes[name] = _parse_choice(name, raw, label, suffix)
        else:
            changes[name] = _parse_one(name, raw, label, suffix)
    result = dataclasses.replace(settings, **changes)  # type: ignore[arg-type]
    _check_relations(result, model)
    return result


def _check_relations(s: ScaleSettings, model: str | None) -> None:
    """The bounds one setting sets another's: each message names the bounding setting."""
    suffix = f" (model {model})" if model else ""
    prefix = PARAMETER_PREFIX if model else ""
    for name, value, low, bound in (
        ("min_replicas", s.min_replicas, 0, "max_replicas"),
        ("panic_window_s", s.panic_window_s, 1, "stable_window_s"),
    ):
        problem = out_of_range(f"{prefix}{name}", value, low, getattr(s, bound))
        if problem is not None:  # below `low`: refused by SETTING_RANGES already
            raise ConfigError(f"{_from(problem, suffix)} ({bound})")


@dataclass(frozen=True)
class ActivatorConfig:
    """Everything `thaw up` was started with; built once in cli.py.

    `scaler` is the chosen scaler backend's own config (`--scaler`): its type says which
    backend runs the replicas (`LocalConfig`: local processes; `KubernetesConfig`: pods).
    """

    repository: Path
    host: str = "127.0.0.1"  # the HTTP front door's address (`--http-address`, else `--host`)
    # The gRPC and metrics ports' addresses (`--grpc-address` / `--metrics-address`, else
    # `--host`; tritonserver's flags): None means `host`.
    grpc_host: str | None = None
    metrics_host: str | None = None
    # tritonserver's repeatable `--model-repository`: the repositories after `repository`,
    # whose models are served beside its own (one index; a name in two is unavailable).
    more_repositories: tuple[Path, ...] = ()
    # tritonserver's `--model-namespacing=true`: each repository a namespace; a name several
    # hold is refused by name (Triton's ambiguity) and runs as its own namespace's ensemble
    # step (activator.fleet.repository); --scaler local only.
    model_namespacing: bool = False
    # tritonserver's `--strict-readiness`: ready only once the start is done (the warm pool
    # primed, every `--load-model` woken); False: ready once the server answers.
    strict_readiness: bool = True
    # tritonserver's `--exit-on-error`; False, given: a repository that cannot be read leaves
    # `thaw up` answering, neither live nor ready (activator.surfaces.answers.server_live).
    exit_on_error: bool | None = None
    # False: tritonserver's `--disable-auto-complete-config` (or `--strict-model-config=true`),
    # for the activator's own reading of the configs and every replica's.
    auto_complete_config: bool = True
    # `--backend-config=[onnxruntime,]default-max-batch-size` (thawserver.backend_config_flags):
    # the max_batch_size ONNX auto-complete gives a model that can batch and sets none.
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    port: int = 8000
    cache_dir: Path | None = None
    cache_max_bytes: int | None = None  # node-cache budget (`--cache-max-bytes`), None: unbounded
    store: str | None = None
    # The shared host-memory tier (images kept in RAM between wakes, `--host-cache-bytes`;
    # 0: off) and its directory on a tmpfs, made by cli.py for this `thaw up` and removed at exit.
    host_cache_bytes: int = 0
    host_cache_dir: Path | None = None
    build_images: bool = True  # build snapshot images into the cache at start-up
    defaults: ScaleSettings = field(default_factory=ScaleSettings)
    # `--lora-separator`: the OpenAI routes list and route `<model><separator><lora>`
    # (thawwire.openai_lora); None: no LoRA selection.
    lora_separator: str | None = None
    max_body_bytes: int = 64 * 1024 * 1024  # declared request bodies above this get 413
    # tritonserver's `--metrics-config` (latency counters, summaries): the replicas' flags and
    # the families a model at zero shows (activator.endpoint.replica_metrics)
    metrics_settings: MetricsSettings = field(default_factory=MetricsSettings)
    # The deployment's token and the body cap of the requests that carry it: replicas' BLS
    # calls and ensemble steps (thawwire.internal_calls). None: every body has the client cap.
    internal_calls: InternalCalls | None = field(default=None, repr=False)
    request_timeout_s: float = 300.0  # a forwarded request with no response by then gets 504
    body_timeout_s: float = 60.0  # a request body not fully received by then gets 408
    # Head deadline, idle keep-alive timeout and connection cap of each listener
    # (thawserver.connection_limits; 0 turns one off).
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)
    # `--model-control-mode explicit`: the repository load/unload API (warm a model now,
    # scale it to zero now) is served; off by default, as Triton's `none` mode.
    model_control: bool = False
    # `--model-control-mode poll`: the repository is read again every this many seconds
    # (`--repository-poll-secs`; activator.fleet.reload); None: only an explicit load does.
    repository_poll_s: float | None = None
    # `--load-model` (explicit mode): woken at start, as the `load` call wakes a model; one
    # that fails refuses the start, as tritonserver's does. `*`: every servable model.
    load_models: tuple[str, ...] = ()
    # `--load-model-at-zero`: explicit mode's models loaded at start, not woken (`*`: all).
    loaded_at_zero: tuple[str, ...] = ()
    # tritonserver's `--backend-directory`: a config's backend Thaw does not have runs
    # `<dir>/<backend>/model.py` as a Python model (tritonconfig.python_based); the replicas
    # get the same flag. None: no Python-based backends.
    backend_directory: Path | None = None
    drain_timeout_s: float = 30.0  # scale-down waits this long for in-flight requests
    # In-flight requests of all models on one shared replica (`thaw.placement` shared), at
    # most (`--shared-replica-concurrency`); 0: unlimited (each model's own limit still holds).
    shared_replica_concurrency: int = 0
    tick_s: float = 0.5  # autoscaler evaluation period
    scaler: LocalConfig | KubernetesConfig = field(default_factory=LocalConfig)
    # The gRPC front door (activator.surfaces.grpc_surface) and Triton's metrics port; None:
    # not served. The ports asked for: what binding made of them is `BoundAddresses`.
    grpc_port: int | None = 8001
    # tritonserver's `--reuse-http-port` / `--reuse-grpc-port`: the front doors' listeners
    # (`port`, `grpc_port`) with SO_REUSEPORT, shared with other servers on the port
    # (thawserver.reuse_port_flags); the metrics port and the replicas' ports never are
    reuse_http_port: bool = False
    reuse_grpc_port: bool = False
    # tritonserver's `--grpc-infer-response-compression-level` at the gRPC front door, whose
    # responses are the replicas' forwarded (thawserver.grpc_compression)
    grpc_response_compression_level: str = "none"
    # tritonserver's `--model-config-name` (tritonconfig.config_name), for the repository's
    # reads and every replica's
    model_config_name: str = ""
    # tritonserver's `--id`: the server metadata's `name` (thawwire.server_info)
    server_id: str = "triton"
    # tritonserver's gRPC keepalive and HTTP/2 ping flags at the front door
    # (thawserver.grpc_keepalive); a replica's gRPC port is the activator's alone
    grpc_keepalive: GrpcKeepalive = field(default_factory=GrpcKeepalive)
    # tritonserver's `--grpc-use-ssl[-mutual]` at the gRPC front door, files read and checked
    # at start (thawserver.grpc_tls); None: plaintext. Replicas behind it are reached over
    # loopback plaintext, as the HTTP front door reaches them.
    grpc_tls: GrpcTls | None = None
    metrics_port: int | None = 8002
    # The status page and cost view (activator.observe.history, activator.observe.cost): a
    # sample of every model per interval, the last `history_samples` kept; money =
    # GPU-seconds x this price.
    history_interval_s: float = 1.0
    history_samples: int = 1800
    gpu_hour_price: float | None = None
    # Triton's `--http-restricted-api` / `--grpc-restricted-protocol`, parsed once by cli.py as
    # `thaw serve` parses them (thawserver.restricted_protocols): the header each restricted
    # category needs, applied at the front doors (HTTP, gRPC). Empty: nothing restricted.
    http_restrictions: Mapping[Category, Restriction] = field(default_factory=dict)
    grpc_restrictions: Mapping[Category, Restriction] = field(default_factory=dict)
    # The logging extension's start settings (tritonserver's --log-* flags), the lowest
    # severity logged at verbose level 0 (`--log-level`), and the trace extension's operator
    # setting (--trace-config): thawwire.log_settings, thawwire.trace_settings.
    log_settings: LogSettings = field(default_factory=LogSettings)
    log_floor: str = "info"
    trace_defaults: TraceSetting = field(default_factory=TraceSetting)

    @property
    def body_deadline_s(self) -> float:
        """How long a request body the activator reads may take to arrive: `--body-timeout-s`,
        never past the request's own deadline (`--request-timeout-s`)."""
        return min(self.body_timeout_s, self.request_timeout_s)

    @cached_property
    def redactor(self) -> Redactor:
        """What error bodies must not show (the repository's and the cache's directories):
        one for every surface of this config (thawserver.redaction)."""
        return Redactor([*self.repositories, self.cache_dir])

    @property
    def repositories(self) -> tuple[Path, ...]:
        """Every model repository served, REPO first."""
        return (self.repository, *self.more_repositories)


@dataclass(frozen=True)
class BoundAddresses:
    """Where one `thaw up` listens, as binding its sockets returned it (`--port 0` and
    `--grpc-port 0` resolved to real ports): made once by activator.process.serving before
    the app starts and handed to what needs a real address (the local backend's replicas
    reach the front door here), never written back into the `ActivatorConfig`."""

    http_port: int
    grpc_port: int | None  # None: no gRPC port (`--allow-grpc false`)
    # How a local replica reaches the HTTP listener (a wildcard address means loopback): the
    # URL it sends what it cannot answer on a handed-off connection to, and ensemble steps.
    front_door_url: str
    # How a local replica reaches the gRPC front door (HOST:PORT) for BLS streams; None: off.
    front_door_grpc: str | None = None
