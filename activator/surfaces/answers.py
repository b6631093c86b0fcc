"""What the activator answers itself about its models, for either protocol (REST or gRPC).

Readiness, the repository index and statistics never wake a model: they come from the
repository, the endpoints' state and the statistics ledger. Config and metadata neither,
except for a python model whose own `auto_complete_config` completes its config: the first
asks a replica (activator.fleet.replica_config), later ones are answered from what it said. Both
surfaces (activator.surfaces.app, activator.surfaces.grpc_surface) encode these same answers, so
they cannot disagree.
"""

from __future__ import annotations

import asyncio
from typing import Any

from activator.endpoint.replica_stats import rows_for_versions
from activator.errors import ModelUnavailable, UnknownModel
from activator.fleet.fleet import Fleet
from activator.fleet.load_state import LoadState
from thawwire.names import version_not_available

__all__ = [
    "check_ready",
    "index_rows",
    "model_config",
    "model_metadata",
    "server_live",
    "server_ready",
    "stats_rows",
]


async def model_config(fleet: Fleet, name: str, version: str | None) -> dict[str, Any]:
    """The model's config JSON, a replica's (`GET /v2/models/{m}[/versions/{v}]/config`)."""
    entry = await fleet.serving_now(name, version)
    config = await fleet.replica_configs.completed(entry, fleet.endpoint(name), version)
    return entry.config_json(config)


async def model_metadata(fleet: Fleet, name: str, version: str | None) -> dict[str, Any]:
    """The model's KServe v2 metadata JSON, rendered from the config a replica serves."""
    entry = await fleet.serving_now(name, version)
    config = await fleet.replica_configs.completed(entry, fleet.endpoint(name), version)
    return entry.metadata(version, config=config)


def server_ready(fleet: Fleet) -> bool:
    """Triton's server readiness through `thaw up`, on both protocols. `--strict-readiness`
    (the default): the start is done, i.e. the warm pool primed (Fleet.ready) and every
    `--load-model` woken; a model at zero counts as ready, it wakes on demand. Without it:
    ready as soon as the server answers, as tritonserver's."""
    if not server_live(fleet):
        return False  # regardless of --strict-readiness, as tritonserver
    if not fleet.config.strict_readiness:
        return True
    return fleet.ready() and not fleet.loading_at_start


def server_live(fleet: Fleet) -> bool:
    """Triton's server liveness: false when a repository could not be read and
    `--exit-on-error=false` kept `thaw up` answering (a server that failed to initialize)."""
    return fleet.repository.start_error is None


async def check_ready(fleet: Fleet, name: str, version: str | None) -> None:
    """Ready = servable: at zero replicas too, unless the last wake-up failed (then
    ModelUnavailable with the reason); UnknownModel for a model not served. A version of a
    served model that is not served is not ready (ModelUnavailable), as `thaw serve` and
    Triton answer: ready=false, not NOT_FOUND; so is a model not loaded (explicit mode: the
    fleet's load state learned afresh first, Fleet.refresh_load_state)."""
    entry = fleet.repository.get(name)
    await fleet.refresh_load_state(name)
    if not fleet.load_states.loaded(name):
        raise ModelUnavailable(f"model '{name}' is not ready: {fleet.load_states.state(name)}")
    if version is not None and version not in entry.versions:
        raise ModelUnavailable(f"model '{name}' is not ready")
    endpoint = fleet.endpoint(name)
    if endpoint.ready_count == 0 and endpoint.last_error is not None:
        raise ModelUnavailable(f"model '{name}' is not ready: {endpoint.last_error}")


async def index_rows(fleet: Fleet, *, ready_only: bool) -> list[dict[str, Any]]:
    """Triton's index: a row per served version; `reason` only when there is one (without
    the server's directories, as every error a client reads). In
    explicit mode a model never loaded is its name alone, an unloaded one UNAVAILABLE with
    reason `unloaded` (as `thaw serve`'s, runtime.models.model_entry), and so is a version a
    later load left out; a model not loaded whose directory has gone has no row (Triton lists
    the repository's directories); rows in name and version order. The fleet's load state
    is learned afresh first when a model is not loaded here (Fleet.refresh_load_state)."""
    await fleet.refresh_load_state(*fleet.repository.names())
    idle = [name for name in fleet.repository.names() if not fleet.load_states.loaded(name)]
    gone = await asyncio.to_thread(fleet.repository.without_directory, idle) if idle else set()
    rows: list[dict[str, Any]] = []
    for name in fleet.repository.names():
        if name in gone:
            continue
        state = fleet.load_states.state(name)
        if state is LoadState.NOT_LOADED:
            rows.append({"name": name})
            continue
        endpoint = fleet.endpoint(name)
        failed = endpoint.ready_count == 0 and endpoint.last_error is not None
        versions = fleet.repository.get(name).versions
        for version in versions:
            row = {"name": name, "version": version, "state": "READY"}
            if state is LoadState.UNLOADED:
                row.update(state="UNAVAILABLE", reason=str(state))
            elif failed:
                row.update(state="UNAVAILABLE", reason=endpoint.last_error or "")
            rows.append(row)
        for version in fleet.repository.retired_versions.get(name, ()):
            if version not in versions:  # left out by a later load: Triton keeps its row
                unloaded = str(LoadState.UNLOADED)
                rows.append(
                    {"name": name, "version": version, "state": "UNAVAILABLE", "reason": unloaded}
                )
    for name, reason in fleet.repository.unavailable.items():
        rows.append({"name": name, "state": "UNAVAILABLE", "reason": reason})
    for name, directories in fleet.repository.ambiguous.items():
        # With namespacing, a name several namespaces hold: one row each, as Triton lists
        # them, with no state (no endpoint: it runs as its namespace's ensemble step).
        rows += [{"name": name} for _ in directories]
    if ready_only:
        rows = [r for r in rows if r.get("state") == "READY"]
    # A reason is a load's error: without the server's directories (thawserver.redaction).
    rows = fleet.config.redactor.index(rows)
    return sorted(rows, key=lambda r: (r["name"], int(r.get("version") or -1)))


async def stats_rows(fleet: Fleet, name: str | None, version: str | None) -> list[dict[str, Any]]:
    """The statistics of one model (every model when `name` is None) for the life of
    `thaw up` (live and retired replicas); a model never served reads as zeros. A model not
    loaded (explicit mode) has none: refused by name, left out of all models' (the fleet's
    load state learned afresh first, Fleet.refresh_load_state)."""
    await fleet.refresh_load_state(*(fleet.repository.names() if name is None else [name]))
    if name is None:
        names = [n for n in fleet.repository.names() if fleet.load_states.loaded(n)]
        per_model = await asyncio.gather(*(_rows(fleet, n, None) for n in names))
        return [row for rows in per_model for row in rows]
    if version is not None and version not in fleet.serving(name).versions:
        # Triton's words for a version the served model does not have (as thaw serve's).
        raise UnknownModel(version_not_available(name))
    return await _rows(fleet, name, version)


async def _rows(fleet: Fleet, name: str, version: str | None) -> list[dict[str, Any]]:
    entry = fleet.serving(name, version)
    merged = await fleet.endpoint(name).statistics()
    return rows_for_versions(name, [version] if version else entry.versions, merged)
