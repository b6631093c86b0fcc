"""What the ModelManager serves by reading its models: index, readiness, metadata, config, stats.

ModelViews is the ModelManager's base class: the queries here read the models the manager has
seen (and, to answer a name, note a model not seen before), while the manager itself
(runtime.models.manager) changes them: start, load, unload, stop. Both surfaces reach these
queries through runtime.models.service.ModelService; the native front through the manager.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runtime.config import ServeConfig
from runtime.errors import ModelNotFound, ModelNotLoaded, ServingError
from runtime.models.answer_order import answers_as_they_come
from runtime.models.model_entry import UNLOADED, ModelEntry, ModelState, index_rows
from runtime.models.namespaces import ModelKey, Namespaces
from runtime.models.repository import stored_config, validate_model_name
from runtime.models.repository_sync import RepositorySync, sync_repositories
from runtime.models.version_loader import LoadedVersion
from runtime.observe.stats import StatsBook
from thawwire.metadata import model_metadata
from thawwire.model_control import no_available_versions, not_ready
from thawwire.names import version_not_available
from tritonconfig.schema import mc

if TYPE_CHECKING:
    from runtime.backends.base import Backend

__all__ = ["ModelViews"]

logger = logging.getLogger(__name__)


class ModelViews:
    """The models a manager has seen, as requests read them: which model and version a name
    means, and Triton's index, readiness, metadata, config and statistics of them."""

    def __init__(
        self,
        config: ServeConfig,
        *,
        namespaces: Namespaces,
        book: StatsBook,
        repository_sync: RepositorySync | None,
    ) -> None:
        """`namespaces`: the repositories and which model a name means in them; `book`: every
        loaded version's statistics; `repository_sync`: remote repositories, synced before
        each index (None: local repositories only)."""
        self._config = config
        self._ns = namespaces
        self._repo = namespaces.repositories
        self._book = book
        self._sync = repository_sync
        self._models: dict[ModelKey, ModelEntry] = {}
        self._front_pending: Callable[[], dict[tuple[str, str], int]] | None = None

    # -- model repository extension -------------------------------------------------------

    async def index(self, *, ready_only: bool = False) -> list[dict[str, Any]]:
        """Triton's repository index: every model in the repository, one row per version."""
        try:
            await sync_repositories(self._sync)
        except OSError as exc:  # answered from the copy as last read
            logger.warning("repository index from the last copy: %s", exc)
        try:
            # Rescanned on each call, as Triton does; in a thread, since a repository on a
            # network volume can take its time to list.
            keys = set(await asyncio.to_thread(self._ns.scan))
        except ServingError:
            keys = set()
        # Triton lists the repository's models; Thaw also a model served from elsewhere (a
        # load's `file:` overrides, a directory removed while it serves) for as long as it
        # serves: one no longer in the repository and not served has no row (a poll's removal).
        serving = {key for key, model in self._models.items() if model.live}
        rows: list[dict[str, Any]] = []
        for key in sorted(keys | serving, key=lambda k: (k.name, k.namespace)):
            rows += index_rows(key.name, self._models.get(key))
        if ready_only:
            rows = [row for row in rows if row.get("state") == ModelState.READY]
        return rows

    # -- reads ----------------------------------------------------------------------------

    def model_ready(self, name: str, version: str | None) -> bool:
        model = self._known(name)
        if model.state != ModelState.READY:
            return False
        return not version or version in model.versions

    def instances(self, name: str, version: str | None = None) -> tuple[Backend, ...]:
        """The backends serving `name`'s version (the latest when None), in instance order:
        what diagnostics and the GPU proofs look inside. Refused as a request for it would be."""
        return tuple(self._serving(name, version)[1].instances)

    def serving_versions(self) -> list[tuple[str, LoadedVersion, bool]]:
        """(name, version, whether unversioned requests go to it) of every version serving
        now, in a server without model namespaces (the native front's hot models,
        runtime.process.hot_models)."""
        if self._ns.enabled:
            return []
        return [
            (model.name, loaded, loaded.version == model.latest)
            for model in list(self._models.values())
            if model.state == ModelState.READY
            for loaded in list(model.versions.values())
        ]

    def metadata(self, name: str, version: str | None) -> dict[str, Any]:
        model, loaded = self._serving(name, version)
        asked = loaded.version if version else None  # Triton lists only the one asked for
        return model_metadata(loaded.config, list(model.versions), asked)

    def config(self, name: str, version: str | None) -> dict[str, Any]:
        _, loaded = self._serving(name, version)
        return copy.deepcopy(loaded.config_json)  # callers may edit; ours stays intact

    def answers_as_they_come(self, name: str, version: str | None) -> bool:
        """Whether a stream's answers for this model may leave out of request order
        (runtime.models.answer_order); False for a model not served (it fails in order)."""
        try:
            _, loaded = self._serving(name, version)
        except ServingError:
            return False

        def config_of(model: str) -> mc.ModelConfig | None:
            return loaded.config if model == name else self._config_of(model)

        return answers_as_they_come(name, config_of)

    def _config_of(self, model: str) -> mc.ModelConfig | None:
        """`model`'s config as served here, else (a step served elsewhere: thaw up) as the
        repository stores it; None when neither knows it."""
        try:
            return self._serving(model, None)[1].config
        except ServingError:
            return stored_config(self._repo, model, config_name=self._config.model_config_name)

    # -- statistics -----------------------------------------------------------------------

    @property
    def stats_book(self) -> StatsBook:
        """Every loaded version's statistics (what the native front answered is added in)."""
        return self._book

    def statistics(self, name: str | None, version: str | None) -> dict[str, Any]:
        """Triton's statistics extension: `{"model_stats": [...]}` for loaded versions."""
        if name is None:
            rows = [stats.to_json(m, v) for (m, v), stats in self._book.items()]
            return {"model_stats": rows}
        model = self._known(name, None)
        if version and model.state == ModelState.READY and version not in model.versions:
            # Triton's words for a version that is not ready (gone, or never there) of a
            # model that has one; the status stays this server's "unknown" (404).
            raise ModelNotFound(version_not_available(name))
        model, _ = self._serving(name, version)
        wanted = [version] if version else list(model.versions)
        rows = [s.to_json(m, v) for (m, v), s in self._book.items() if m == name and v in wanted]
        return {"model_stats": rows}

    def pending_counts(self) -> dict[tuple[str, str], int]:
        """Queued requests per (model, version), for `nv_inference_pending_request_count`:
        the schedulers' and those the native front sent its stubs (`count_pending_of`)."""
        counts = {
            (m.name, v.version): v.scheduler.pending()
            for m in list(self._models.values())
            for v in list(m.versions.values())
        }
        if self._front_pending is not None:
            for key, count in self._front_pending().items():
                if key in counts:
                    counts[key] += count
        return counts

    def count_pending_of(self, source: Callable[[], dict[tuple[str, str], int]]) -> None:
        """Add `source`'s queued requests to the pending counts (the native front's)."""
        self._front_pending = source

    # -- which model a request means ------------------------------------------------------

    def _live(self, key: ModelKey) -> bool | None:
        """Whether `key` serves or is to (None: a model this manager has not seen)."""
        model = self._models.get(key)
        return None if model is None else model.live

    def _known(self, name: str, home: str | None = None) -> ModelEntry:
        """The model a request for `name` means (`home`: the asking ensemble's namespace)."""
        if not self._ns.enabled:  # every request asks: one lookup (a ModelKey is its tuple)
            model = self._models.get(("", name))  # type: ignore[call-overload]
            if model is not None:
                return model
        key = self._ns.serving_key(name, self._live, home=home)
        if key is None:
            validate_model_name(name)
            key = self._ns.on_disk_key(name, self._ns.keys_on_disk(name))
        model = self._models.get(key)
        if model is None:
            model = self._models[key] = ModelEntry(name, key)
        return model

    def _serving(
        self, name: str, version: str | None, home: str | None = None
    ) -> tuple[ModelEntry, LoadedVersion]:
        """The model and the version a request for (name, version) goes to."""
        model = self._known(name, home)
        if model.state != ModelState.READY or not model.versions:
            if model.state == ModelState.UNLOADING or model.reason == UNLOADED:
                # Unloaded on request, or going: Triton's words and code (its NOT_FOUND).
                raise ModelNotLoaded(name, no_available_versions(name), 404)
            reason = f": {model.reason}" if model.reason else ""
            raise ModelNotLoaded(name, f"{not_ready(name)}{reason}")
        loaded = model.versions.get(version or model.latest)
        if loaded is None:
            raise ModelNotFound(
                f"Request for unknown model: '{name}' version {version} is not found"
            )
        return model, loaded
