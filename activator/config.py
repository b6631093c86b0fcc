"""Activator configuration: the frozen `ActivatorConfig` and per-model `ScaleSettings`.

Per-model settings come from `config.pbtxt` `parameters` (string values, keys `thaw.<field>`),
with the `thaw up` flags of the same names (`--<field-with-dashes>`) as defaults. Every
invalid value is refused at start-up in one form:
``"`thaw.stable_window_s` = 3 (model bert), must be in [6, 3600]"``. The scaler
backend's own settings are its config, `ActivatorConfig.scaler` (activator.scaler.local_config).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from activator.errors import ConfigError
from activator.scaler.kube_config import KubernetesConfig, is_class_name
from activator.scaler.local_config import LocalConfig
from thawwire.connection_limits import ConnectionLimits

__all__ = [
    "BOOL_SETTINGS",
    "NAME_SETTINGS",
    "SETTING_RANGES",
    "ActivatorConfig",
    "ScaleSettings",
    "validated",
]

PARAMETER_PREFIX = "thaw."


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
    activation_timeout_s: float = 60.0  # a cold start that takes longer fails held requests
    max_held_requests: int = 1000
    max_held_bytes: int = 256 * 1024 * 1024  # sum of held requests' declared Content-Length
    container_concurrency: int = 0  # per-replica in-flight limit; 0 = unlimited (Knative's default)
    # Hand a warm model's new client connections straight to a replica (activator.front_door):
    # the activator leaves the data path, so its per-request limits and 502s do not apply there.
    direct_connections: bool = True
    # Keep the model's image in every node's cache (Kubernetes: the prefetch DaemonSet pulls
    # hot models' images onto each node, so a cold start there reads local disk, not S3).
    hot: bool = False
    # Kubernetes: which warm pool the model's pods come from (`thaw up --pool-class
    # NAME=DEPLOYMENT`; `default` is `--pool-deployment`), e.g. a GPU class and a CPU one.
    placement_class: str = "default"


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
    "max_held_requests": (1, 1_000_000),
    "max_held_bytes": (0, 1 << 40),
    "container_concurrency": (0, 100_000),
}

# Settings that are names (a DNS label each): set in config.pbtxt or the model-settings file.
NAME_SETTINGS = frozenset({"placement_class"})
_INT_FIELDS = frozenset(f.name for f in dataclasses.fields(ScaleSettings) if f.type == "int")
# Settings that are switches: "true"/"false" in config.pbtxt, on/off as `thaw up` flags.
BOOL_SETTINGS = frozenset(f.name for f in dataclasses.fields(ScaleSettings) if f.type == "bool")
_BOOL_WORDS = {"true": True, "false": False, "on": True, "off": False}


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _parse_bool(raw: object, label: str, suffix: str, words: str) -> bool:
    if isinstance(raw, bool):
        return raw
    value = _BOOL_WORDS.get(str(raw).strip().lower())
    if value is None:
        raise ConfigError(f"{label} = {raw!r}{suffix}, must be {words}")
    return value


def _parse_name(raw: object, label: str, suffix: str) -> str:
    text = str(raw).strip()
    if not is_class_name(text):
        raise ConfigError(f"{label} = {raw!r}{suffix}, must be a DNS label (a-z, 0-9, '-')")
    return text


def _parse_one(name: str, raw: object, label: str, suffix: str) -> float | int:
    """Convert and range-check one setting; `label` and `suffix` name its origin."""
    low, high = SETTING_RANGES[name]
    range_text = f"[{_fmt(low)}, {_fmt(high)}]"
    is_int = name in _INT_FIELDS
    try:
        text = str(raw).strip()
        value: float | int = int(text) if is_int else float(text)
    except ValueError:
        kind = "an integer" if is_int else "a number"
        raise ConfigError(f"{label} = {raw!r}{suffix}, must be {kind} in {range_text}") from None
    if not math.isfinite(value) or not low <= value <= high:
        raise ConfigError(f"{label} = {_fmt(value)}{suffix}, must be in {range_text}")
    return value


def validated(
    settings: ScaleSettings,
    overrides: Mapping[str, object],
    *,
    model: str | None = None,
) -> ScaleSettings:
    """Return `settings` with `overrides` applied and checked.

    Keys are `thaw.<field>` when `model` is given (config.pbtxt parameters; other keys are
    ignored, unknown `thaw.` keys refused) and bare field names otherwise (flags).
    """
    changes: dict[str, float | int | bool | str] = {}
    for key, raw in overrides.items():
        if model is not None:
            if not key.startswith(PARAMETER_PREFIX):
                continue
            name, label, suffix = key[len(PARAMETER_PREFIX) :], f"`{key}`", f" (model {model})"
            words = "true or false"
            if name not in SETTING_RANGES.keys() | BOOL_SETTINGS | NAME_SETTINGS:
                raise ConfigError(f"unknown setting `{key}`{suffix}")
        else:
            name, label, suffix = key, f"`--{key.replace('_', '-')}`", ""
            words = "on or off"
            if name not in SETTING_RANGES.keys() | BOOL_SETTINGS | NAME_SETTINGS:
                raise ConfigError(f"unknown setting `{key}`")
        if name in BOOL_SETTINGS:
            changes[name] = _parse_bool(raw, label, suffix, words)
        elif name in NAME_SETTINGS:
            changes[name] = _parse_name(raw, label, suffix)
        else:
            changes[name] = _parse_one(name, raw, label, suffix)
    result = dataclasses.replace(settings, **changes)  # type: ignore[arg-type]
    _check_relations(result, model)
    return result


def _check_relations(s: ScaleSettings, model: str | None) -> None:
    suffix = f" (model {model})" if model else ""
    prefix = PARAMETER_PREFIX if model else ""
    if s.min_replicas > s.max_replicas:
        raise ConfigError(
            f"`{prefix}min_replicas` = {s.min_replicas}{suffix}, "
            f"must be in [0, {s.max_replicas}] (max_replicas)"
        )
    if s.panic_window_s > s.stable_window_s:
        raise ConfigError(
            f"`{prefix}panic_window_s` = {_fmt(s.panic_window_s)}{suffix}, "
            f"must be in [1, {_fmt(s.stable_window_s)}] (stable_window_s)"
        )


@dataclass(frozen=True)
class ActivatorConfig:
    """Everything `thaw up` was started with; built once in cli.py.

    `scaler` is the chosen scaler backend's own config (`--scaler`): its type says which
    backend runs the replicas (`LocalConfig`: local processes; `KubernetesConfig`: pods).
    """

    repository: Path
    host: str = "127.0.0.1"
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
    max_body_bytes: int = 64 * 1024 * 1024  # declared request bodies above this get 413
    request_timeout_s: float = 300.0  # a forwarded request with no response by then gets 504
    body_timeout_s: float = 60.0  # a request body not fully received by then gets 408
    # Head deadline, idle keep-alive timeout and connection cap of each listener
    # (thawwire.connection_limits; 0 turns one off).
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)
    # `--model-control-mode explicit`: the repository load/unload API (warm a model now,
    # scale it to zero now) is served; off by default, as Triton's `none` mode.
    model_control: bool = False
    drain_timeout_s: float = 30.0  # scale-down waits this long for in-flight requests
    tick_s: float = 0.5  # autoscaler evaluation period
    scaler: LocalConfig | KubernetesConfig = field(default_factory=LocalConfig)
    # The gRPC front door (activator.grpc_surface) and Triton's metrics port; None: not served.
    grpc_port: int | None = 8001
    metrics_port: int | None = 8002
    # The status page and cost view (activator.history, activator.cost): a sample of every
    # model per interval, the last `history_samples` kept; money = GPU-seconds x this price.
    history_interval_s: float = 1.0
    history_samples: int = 1800
    gpu_hour_price: float | None = None
    # Triton's `--http-restricted-api` / `--grpc-restricted-protocol` values, as `thaw serve`
    # takes them (thawwire.restricted_protocols), applied at the front doors (HTTP, gRPC).
    http_restricted_apis: tuple[str, ...] = ()
    grpc_restricted_protocols: tuple[str, ...] = ()
