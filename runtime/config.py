"""ServeConfig: every setting of one `thaw serve` process, built once from flags and validated."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from runtime.header_forward import compile_pattern
from thawserver import connection_limits, device_flags, ranges
from thawserver.backend_config_flags import default_max_batch_size
from thawserver.connection_limits import ConnectionLimits
from thawserver.grpc_compression import GRPC_COMPRESSION_LEVELS
from thawserver.grpc_keepalive import GrpcKeepalive
from thawserver.grpc_tls import GrpcTls
from thawserver.metrics_config_flags import MetricsSettings
from thawserver.redaction import Redactor
from thawserver.restricted_protocols import (
    Category,
    Restriction,
    parse_http_restrictions,
    parse_restrictions,
)
from thawwire.internal_calls import InternalCalls
from thawwire.log_settings import LogSettings
from thawwire.model_control import POLL_SECS_RANGE, ModelControlMode
from thawwire.openai_api import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_MAX_TOOL_CALL_PARSE_BYTES,
    MAX_TOKENS_LIMIT,
    TOOL_CALL_PARSERS,
)
from thawwire.runtime_parameters import PYTHON_SPARE_STUBS_MAX
from thawwire.trace_settings import TraceSetting

__all__ = [
    "HTTP_FRONTS",
    "ConfigError",
    "ModelControlMode",
    "ServeConfig",
    "parse_cuda_pool",
    "parse_gpu_limit",
]

_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
_FRAMEWORKS = ("onnxruntime", "torch", "tensorrt")
_TARGETS = ("auto", "cpu", "cuda")
# `cuda:sm_NN`: a GPU of that compute capability (snapshotter.image_ref's image targets).
_CUDA_ARCH_TARGET = re.compile(r"cuda:sm_[0-9]{2,3}")
_EVENT_LOOPS = ("auto", "asyncio", "uvloop")
HTTP_FRONTS = ("python", "native")


class ConfigError(ValueError):
    """A setting is out of range; the message names the setting, its value and the range."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeConfig:
    """Settings of one model server; sizes in bytes, durations in seconds.

    The settings given as text (header-forward patterns, restrictions, the private
    directories) are validated and parsed once, here; the surfaces read the parsed values
    (`http_header_forward`, `http_restrictions`, `redactor`, ...), never the text again.
    """

    repository: Path
    host: str = "127.0.0.1"
    port: int = 8000
    model_control_mode: ModelControlMode = ModelControlMode.NONE
    load_models: tuple[str, ...] = ()
    repository_poll_secs: float = 15.0
    max_body_bytes: int = 64 * 1024 * 1024
    max_json_depth: int = 100
    store: str | None = None
    cache: Path | None = None
    target: str = "cpu"
    preload_frameworks: tuple[str, ...] = ()
    # Python stub processes started while the server waits for its first load (a pool process).
    python_spare_stubs: int = 0
    python_spare_stubs_auto: bool = False  # `auto`: as many as a Python model has instances
    python_spare_stub_imports: tuple[str, ...] = ()  # modules those stubs import while waiting
    python_spare_stub_imports_auto: bool = False  # `auto`: what the Python models import
    arena_bytes: int = 0
    # The node cache's byte budget (None: unbounded) and the shared host-memory tier: its
    # byte budget (0: off) and directory (None: /dev/shm/thaw-host-<uid>).
    cache_max_bytes: int | None = None
    host_cache_bytes: int = 0
    host_cache: Path | None = None
    # Internal, set by `thaw up`: run as its warm pool's fork server on this inherited socket.
    fork_server_fd: int | None = None
    log_level: str = "info"
    # The logging extension's start settings (tritonserver's --log-* flags; thawwire.log_settings)
    # and the lowest severity logged at verbose level 0 (`--log-level`).
    log_settings: LogSettings = field(default_factory=LogSettings)
    log_floor: str = "info"
    # The trace extension's operator setting (--trace-config; thawwire.trace_settings).
    trace_defaults: TraceSetting = field(default_factory=TraceSetting)
    exit_timeout_s: float = 30.0
    body_timeout_s: float = 60.0
    # Head deadline, idle keep-alive timeout and open-connection cap of each listener
    # (thawserver.connection_limits; 0 turns one off).
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)
    event_loop: str = "auto"
    # A pure-Python model whose executions have all taken at most this long may run on the
    # event loop instead of its worker thread (runtime.scheduling.inline_policy); 0 turns that off.
    inline_exec_max_us: int = 200
    # Internal, set by `thaw up` (runtime.direct.handoff) and the Helm chart: the Unix socket on
    # which the activator hands over client connections, the front door that answers what this
    # replica cannot (requests on handed-off connections, BLS calls to other models; on
    # Kubernetes, the activators' Service), and how long a handed-off connection lives before
    # its next response closes it.
    handoff_socket: Path | None = None
    front_door: str | None = None
    # The front door's gRPC service (HOST:PORT), where BLS streams to other models go.
    front_door_grpc: str | None = None
    # The deployment's token (`--internal-token-file`) and the body cap of the requests that
    # carry it: this replica's BLS calls and ensemble steps through the front door, and those
    # of other replicas that reach it (thawwire.internal_calls). None: every body is capped at
    # `max_body_bytes`.
    internal_calls: InternalCalls | None = field(default=None, repr=False)
    # The activator's per-connection state file for handed-off connections (one byte a slot).
    handoff_state: Path | None = None
    handoff_max_age_s: float = 10.0
    # -- tritonserver's surfaces and model-repository behaviour (runtime.process.triton_flags) --
    more_repositories: tuple[Path, ...] = ()  # served besides `repository`
    # tritonserver's `--model-namespacing`: each repository a namespace (runtime.models.namespaces)
    model_namespacing: bool = False
    allow_http: bool = True
    allow_grpc: bool = True
    grpc_host: str | None = None  # None: `host`
    grpc_port: int = 8001
    # tritonserver's `--reuse-http-port` / `--reuse-grpc-port`: the HTTP / gRPC listener with
    # SO_REUSEPORT, shared with other servers on the port (thawserver.reuse_port_flags)
    reuse_http_port: bool = False
    reuse_grpc_port: bool = False
    # What listens on the HTTP port (`--front`): "python", the aiohttp application itself, or
    # "native", the native front (native/front; runtime.process.native_front), which answers the
    # hot Python models' infers itself and forwards every other request to the application on a
    # private Unix socket (decision 0032).
    http_front: str = "python"
    grpc_max_message_bytes: int | None = None  # None: `max_body_bytes`
    # tritonserver's `--grpc-infer-response-compression-level` (thawserver.grpc_compression)
    grpc_response_compression_level: str = "none"
    # tritonserver's `--model-config-name`: a model's `configs/NAME.pbtxt` is read instead
    # of its config.pbtxt when it has one (runtime.models.repository.config_file)
    model_config_name: str = ""
    # tritonserver's `--id`: the server metadata's `name` (thawwire.server_info)
    server_id: str = "triton"
    # tritonserver's gRPC keepalive and HTTP/2 ping flags (thawserver.grpc_keepalive)
    grpc_keepalive: GrpcKeepalive = field(default_factory=GrpcKeepalive)
    # tritonserver's `--grpc-use-ssl[-mutual]` and certificate files, read and checked at
    # start (thawserver.grpc_tls); None: plaintext gRPC
    grpc_tls: GrpcTls | None = None
    allow_metrics: bool = True  # False: no metrics at all (neither port serves /metrics)
    # tritonserver's `--allow-vertex-ai` and its port (runtime.http.vertex_ai): the routes are
    # Vertex AI's `AIP_PREDICT_ROUTE` and `AIP_HEALTH_ROUTE` (checked at start, as Triton's);
    # "" for the default model: the repository's one model
    allow_vertex_ai: bool = False
    vertex_ai_host: str | None = None  # None: `host`
    vertex_ai_port: int = 8080
    vertex_ai_default_model: str = ""
    vertex_ai_predict_route: str = ""
    vertex_ai_health_route: str = ""
    # tritonserver's `--allow-sagemaker` and its port (runtime.http.sagemaker): `/invocations`
    # is for `sagemaker_model` (SAGEMAKER_TRITON_DEFAULT_MODEL_NAME), `/ping` asks
    # `sagemaker_ping_mode`; with a safe range, every other port must be in it
    allow_sagemaker: bool = False
    sagemaker_port: int = 8080
    sagemaker_safe_port_range: tuple[int, int] | None = None
    sagemaker_model: str = "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"
    sagemaker_ping_mode: str = "ready"
    metrics_host: str | None = None  # None: `host`
    metrics_port: int = 8002
    # tritonserver's `--metrics-config`: its latency counters and summaries
    metrics_settings: MetricsSettings = field(default_factory=MetricsSettings)
    strict_readiness: bool = True  # ready only when every model to load is READY
    # True: exit 1 when a model fails to load at start; None (not given): serve the others;
    # False (given): also keep serving, neither live nor ready, when the start itself fails
    exit_on_error: bool | None = None
    auto_complete_config: bool = True  # complete configs from model files / model.py
    model_load_threads: int = 4  # models loaded at once
    # tritonserver's `--model-load-retry-count`: a version whose load fails is tried this many
    # more times (runtime.models.version_loader)
    model_load_retries: int = 0
    # tritonserver's `--rate-limit` ("off" | "execution_count") and `--rate-limit-resource`
    # values as (resource, count, device or None for every device)
    # (runtime.scheduling.rate_limit)
    rate_limit: str = "off"
    rate_limit_resources: tuple[tuple[str, int, int | None], ...] = ()
    backend_config: tuple[tuple[str, str, str], ...] = ()  # (backend, setting, value)
    # tritonserver's `--backend-directory`: where Python-based backends are found
    # (`DIR/NAME/model.py`, tritonconfig.python_based); None: none are.
    backend_directory: Path | None = None
    # Request headers (gRPC metadata) whose name matches become string parameters of the
    # infer request ("": none), runtime.header_forward.
    http_header_forward_pattern: str = ""
    grpc_header_forward_pattern: str = ""
    # `--grpc-restricted-protocol` values, `<protocols>:<key>=<value>`
    # (thawserver.restricted_protocols)
    grpc_restricted_protocols: tuple[str, ...] = ()
    http_restricted_apis: tuple[str, ...] = ()  # `--http-restricted-api`, the same form
    # The OpenAI routes' tool-call parser (`--tool-call-parser`, thawwire.openai_api's names;
    # None: chat requests with tools are refused) and the most text, in bytes, it reads of one
    # streamed answer (`--max-tool-call-parse-bytes`).
    tool_call_parser: str | None = None
    max_tool_call_parse_bytes: int = DEFAULT_MAX_TOOL_CALL_PARSE_BYTES
    # `--default-max-tokens`: the most tokens an OpenAI completion or chat generates when it
    # sets no `max_tokens` (thawwire.openai_api).
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    # `--lora-separator`: a request's model `<model><separator><lora>` selects a LoRA adapter
    # (thawwire.openai_lora); None: no LoRA selection.
    lora_separator: str | None = None
    # -- parsed from the settings above when the config is built (__post_init__) --
    # The compiled `*_header_forward_pattern`s (None: "", nothing forwarded).
    http_header_forward: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    grpc_header_forward: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    # The restricted categories of each surface and the header each needs.
    http_restrictions: Mapping[Category, Restriction] = field(init=False, repr=False, compare=False)
    grpc_restrictions: Mapping[Category, Restriction] = field(init=False, repr=False, compare=False)
    # What every answer to a client leaves out: `private_dirs` (thawserver.redaction).
    redactor: Redactor = field(init=False, repr=False, compare=False)

    @property
    def repositories(self) -> tuple[Path, ...]:
        """Every model repository served, `repository` first."""
        return (self.repository, *self.more_repositories)

    @property
    def spares_from_repository(self) -> bool:
        """Whether the spare stubs' count or imports are read from the repositories (`auto`)."""
        return self.python_spare_stubs_auto or self.python_spare_stub_imports_auto

    @property
    def private_dirs(self) -> tuple[Path, ...]:
        """The directories no answer to a client may show (thawserver.redaction): the model
        repositories and the image cache."""
        return (*self.repositories, *((self.cache,) if self.cache is not None else ()))

    @property
    def grpc_max_message(self) -> int:
        """The largest gRPC message accepted, in bytes."""
        return self.grpc_max_message_bytes or self.max_body_bytes

    @property
    def default_max_batch_size(self) -> int:
        """What ONNX auto-complete gives a model that can batch and sets no `max_batch_size`
        (tritonserver's `--backend-config=[onnxruntime,]default-max-batch-size`, else 4)."""
        return default_max_batch_size(self.backend_config, "onnxruntime")

    def backend_setting(self, backend: str, key: str) -> str | None:
        """The last `--backend-config` value of `backend`'s `key`, else None."""
        found = None
        for name, setting, value in self.backend_config:
            if name == backend and setting == key:
                found = value
        return found

    # The response cache's bound over all models (Triton's `--cache-config local,size=N`);
    # 0: no cache, whatever a model's `response_cache` says.
    response_cache_bytes: int = 0
    # Internal, set by `thaw up`: run ensemble steps on the models behind this URL (the front
    # door) instead of loading the composing models into this process.
    ensemble_steps_url: str | None = None
    # GPU (docs/gpu.md): device memory reserved per GPU before ready, as Triton's
    # `--cuda-memory-pool-byte-size <gpu>:<bytes>`; the pinned host staging buffer restores
    # copy through, as Triton's `--pinned-memory-pool-byte-size`; VRAM a restore leaves free.
    cuda_memory_pools: tuple[tuple[int, int], ...] = ()
    pinned_memory_pool_bytes: int = 0
    vram_headroom_bytes: int = 512 << 20
    # tritonserver's `--model-load-gpu-limit <gpu>:<fraction>`: a GPU instance is not created
    # on a GPU whose used memory is over this fraction of its total (runtime.devices.vram_budget).
    model_load_gpu_limits: tuple[tuple[int, float], ...] = ()
    # tritonserver's `--min-supported-compute-capability`: GPUs below it are not used
    min_compute_capability: float = device_flags.MIN_COMPUTE_CAPABILITY

    def __post_init__(self) -> None:
        # A port of a listener turned off is not read (tritonserver ignores it too:
        # `--http-port -47 --allow-http 0` starts, qa/L0_socket).
        if self.allow_http:
            _in_range("port", self.port, 0, 65535)
        _in_range("repository_poll_secs", self.repository_poll_secs, *POLL_SECS_RANGE)
        _in_range("max_body_bytes", self.max_body_bytes, 1024, 1 << 40)
        _in_range("max_json_depth", self.max_json_depth, 2, 10000)
        if self.internal_calls is not None:
            _in_range("max_internal_body_bytes", self.internal_calls.max_body_bytes, 1024, 1 << 40)
        _in_range("arena_bytes", self.arena_bytes, 0, 1 << 44)
        _in_range("python_spare_stubs", self.python_spare_stubs, 0, PYTHON_SPARE_STUBS_MAX)
        if self.cache_max_bytes is not None:
            _in_range("cache_max_bytes", self.cache_max_bytes, 1, 1 << 50)
        _in_range("host_cache_bytes", self.host_cache_bytes, 0, 1 << 44)
        if self.fork_server_fd is not None:
            _in_range("fork_server_fd", self.fork_server_fd, 3, 1 << 20)
        _in_range("exit_timeout_s", self.exit_timeout_s, 0, 3600)
        _in_range("max_tool_call_parse_bytes", self.max_tool_call_parse_bytes, 1, 1 << 30)
        _in_range("default_max_tokens", self.default_max_tokens, 1, MAX_TOKENS_LIMIT)
        if self.tool_call_parser is not None and self.tool_call_parser not in TOOL_CALL_PARSERS:
            raise ConfigError(
                f"`tool_call_parser` = {self.tool_call_parser}, must be one of "
                f"{', '.join(TOOL_CALL_PARSERS)}"
            )
        if self.lora_separator is not None and not self.lora_separator:
            raise ConfigError("`lora_separator` = '', must be unset or at least one character")
        _in_range("body_timeout_s", self.body_timeout_s, 0.1, 3600)
        problem = connection_limits.out_of_range(self.connections)
        if problem is not None:
            raise ConfigError(problem)
        _in_range("inline_exec_max_us", self.inline_exec_max_us, 0, 10_000)
        _in_range("handoff_max_age_s", self.handoff_max_age_s, 0, 86400)
        try:
            self.default_max_batch_size  # noqa: B018 (checked here: refused at start)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.allow_grpc:
            _in_range("grpc_port", self.grpc_port, 0, 65535)
        if self.allow_metrics:
            _in_range("metrics_port", self.metrics_port, 0, 65535)
        _in_range("model_load_threads", self.model_load_threads, 1, 1024)
        _in_range("model_load_retries", self.model_load_retries, 0, 100)
        if self.rate_limit not in ("off", "execution_count"):
            raise ConfigError(
                f"`rate_limit` = {self.rate_limit}, must be one of off, execution_count"
            )
        if self.grpc_response_compression_level not in GRPC_COMPRESSION_LEVELS:
            raise ConfigError(
                f"`grpc_response_compression_level` = {self.grpc_response_compression_level}, "
                f"must be one of {', '.join(GRPC_COMPRESSION_LEVELS)}"
            )
        if self.grpc_max_message_bytes is not None:
            # gRPC's limits are C ints.
            _in_range("grpc_max_message_bytes", self.grpc_max_message_bytes, 1024, (1 << 31) - 1)
        elif self.allow_grpc and self.max_body_bytes > (1 << 31) - 1:
            raise ConfigError(
                f"`max_body_bytes` = {self.max_body_bytes} is over gRPC's 2 GiB message limit: "
                "set `grpc_max_message_bytes`"
            )
        self._parse_texts()
        if self.allow_vertex_ai:
            _in_range("vertex_ai_port", self.vertex_ai_port, 0, 65535)
        if self.allow_sagemaker:
            _in_range("sagemaker_port", self.sagemaker_port, 0, 65535)
            self._check_safe_port_range()
        if not (self.allow_http or self.allow_grpc or self.allow_vertex_ai or self.allow_sagemaker):
            raise ConfigError("`allow_http` and `allow_grpc` are both false: nothing to serve")

        _in_range("response_cache_bytes", self.response_cache_bytes, 0, 1 << 44)
        url = self.ensemble_steps_url
        if url is not None and not url.startswith("http://"):
            raise ConfigError(f"`ensemble_steps_url` = {url!r}, must be an http:// URL")
        _in_range("pinned_memory_pool_bytes", self.pinned_memory_pool_bytes, 0, 1 << 40)
        _in_range("vram_headroom_bytes", self.vram_headroom_bytes, 0, 1 << 40)
        gpus = [gpu for gpu, _ in self.cuda_memory_pools]
        if len(set(gpus)) != len(gpus):
            raise ConfigError(f"`cuda_memory_pools` = {gpus}, each GPU at most once")
        for gpu, nbytes in self.cuda_memory_pools:
            _in_range("cuda_memory_pools gpu", gpu, 0, 1023)
            _in_range("cuda_memory_pools bytes", nbytes, 0, 1 << 44)
        _in_range("min_compute_capability", self.min_compute_capability, 0.0, 100.0)
        for gpu, fraction in self.model_load_gpu_limits:
            _in_range("model_load_gpu_limit gpu", gpu, 0, 1023)
            _in_range("model_load_gpu_limit fraction", fraction, 0.0, 1.0)
        if self.handoff_socket is not None and self.front_door is None:
            raise ConfigError("`handoff_socket` needs `front_door` (where it sends back requests)")
        if self.handoff_state is not None and self.handoff_socket is None:
            raise ConfigError("`handoff_state` needs `handoff_socket`")
        if self.front_door is not None and not self.front_door.startswith("http://"):
            raise ConfigError(f"`front_door` = {self.front_door!r}, must be an http:// URL")
        if self.front_door_grpc is not None:
            if self.front_door is None:
                raise ConfigError("`front_door_grpc` needs `front_door`")
            host, sep, port = self.front_door_grpc.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(
                    f"`front_door_grpc` = {self.front_door_grpc!r}, must be HOST:PORT"
                )
        _one_of("log_level", self.log_level, _LOG_LEVELS)
        _one_of("log_floor", self.log_floor, _LOG_LEVELS)
        _one_of("event_loop", self.event_loop, _EVENT_LOOPS)
        _one_of("http_front", self.http_front, HTTP_FRONTS)
        if self.http_front == "native" and self.handoff_socket is not None:
            # Phase 1 of decision 0032 fronts a `thaw serve` of its own; the connections `thaw
            # up` hands over reach the Python application, so the front would only add a hop.
            raise ConfigError("`http_front` = 'native' is for `thaw serve` alone, not a replica")
        if self.target not in _TARGETS and not _CUDA_ARCH_TARGET.fullmatch(self.target):
            raise ConfigError(
                f"`target` = {self.target!r}, must be one of auto, cpu, cuda, "
                "cuda:sm_NN (a GPU's compute capability: cuda:sm_90 for an H100)"
            )
        for framework in self.preload_frameworks:
            _one_of("preload_frameworks", framework, _FRAMEWORKS)
        if not self.host:
            raise ConfigError("`host` = '', must be a host name or address")

    def _check_safe_port_range(self) -> None:
        """tritonserver's `--sagemaker-safe-port-range`: every other listener's port in it,
        refused in its words ("The server cannot listen to HTTP requests at port 8000, allowed
        port range is [8081, 9000]")."""
        if self.sagemaker_safe_port_range is None:
            return
        low, high = self.sagemaker_safe_port_range
        others = (("HTTP", self.allow_http, self.port), ("GRPC", self.allow_grpc, self.grpc_port),
                  ("metrics", self.allow_metrics, self.metrics_port),
                  ("Vertex AI", self.allow_vertex_ai, self.vertex_ai_port))  # fmt: skip
        for name, on, port in others:
            if on and not low <= port <= high:
                raise ConfigError(f"The server cannot listen to {name} requests at port {port}, "
                                  f"allowed port range is [{low}, {high}]")  # fmt: skip

    def _parse_texts(self) -> None:
        """Parse the settings given as text into their derived fields (the one parse):
        ConfigError for a pattern that does not compile or a restriction not of Triton's
        form. `object.__setattr__`: the dataclass is frozen, and these are part of building it."""
        derived: dict[str, object] = {}
        for surface in ("http", "grpc"):
            setting = f"{surface}_header_forward_pattern"
            text = getattr(self, setting)
            try:
                derived[f"{surface}_header_forward"] = (
                    compile_pattern(text, setting=setting) if text else None
                )
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        try:
            derived["grpc_restrictions"] = parse_restrictions(self.grpc_restricted_protocols)
            derived["http_restrictions"] = parse_http_restrictions(self.http_restricted_apis)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        derived["redactor"] = Redactor(self.private_dirs)
        for name, value in derived.items():
            object.__setattr__(self, name, value)


def parse_cuda_pool(text: str) -> tuple[int, int]:
    """`<gpu>:<bytes>` (Triton's `--cuda-memory-pool-byte-size` form) as (gpu, bytes)."""
    try:
        return device_flags.parse_cuda_pool(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def parse_gpu_limit(text: str) -> tuple[int, float]:
    """`<device_id>:<fraction>` (tritonserver's `--model-load-gpu-limit`) as (gpu, fraction)."""
    try:
        return device_flags.parse_gpu_limit(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _in_range(name: str, value: float, low: float, high: float) -> None:
    """Raise ConfigError in the one shared phrasing (thawserver.ranges) unless
    low <= value <= high."""
    problem = ranges.out_of_range(name, value, low, high)
    if problem is not None:
        raise ConfigError(problem)


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    """Raise ConfigError in the one shared phrasing unless value is one of `allowed`."""
    if value not in allowed:
        raise ConfigError(f"`{name}` = {value!r}, must be one of {', '.join(allowed)}")
