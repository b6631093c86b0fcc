"""The repository read again after the start: an explicit `load`, and the poll.

    load(name, override)          the repository load call (HTTP, gRPC)
      re-read its directory ── compare with what is served (activator.fleet.rescan)
        (with a `config` override: its config is that; with `file:` overrides too: its
        directory is those files, written under `thaw up`'s own (activator.fleet.
        override_files); its replicas get the same override in their load call. Without
        one, a model serving a `config` override keeps it while its files are unchanged)
        ADDED      a new model: its endpoint, at zero (a bad config: unavailable, refused)
        CHANGED    its new entry, its replicas drained and replaced (a bad config: refused,
                   the old version keeps serving, as a failed reload does on Triton); but
                   its instance groups alone changed (activator.fleet.in_place): each
                   replica up is sent the load (with a `config` override, if any) and
                   updates its instances in place (all refusing it: refused, the old config
                   kept; some, or no answer: replaced)
        REMOVED    dropped (drained), then refused as no such model
        UNCHANGED  nothing
      then warm it: the call returns once a replica of the new files is ready (an
      override no replica can load is refused, and what served before serves again)
        (`--model-namespacing=true`: an ensemble's steps are re-read first, as Triton's load
        cascades to them; a name several namespaces hold is AMBIGUOUS: no endpoint, refused
        by name, and its load warms nothing)

    unload(name)                  scale it to zero now; a later plain load reads the
                                  repository's files again (an override is forgotten)

    poll()                        `--model-control-mode poll`, each `--repository-poll-secs`
      fingerprint every model ── the same, for every model that changed, without warming;
      a refused change is logged once per set of files

    With namespacing an ensemble's replica loads its steps itself (activator.fleet.repository):
    when a step's name changes (added, removed, held by one more or one fewer namespace), the
    replicas of the ensembles that step on it are replaced, so they resolve it again.

A repository on S3 (`thaw up s3://...`, thawserver.s3_repository) is read from the local copy
its replicas read too, synced with the bucket before each load's and poll's re-read: a load
that cannot read the bucket is refused ("failed to load '<name>', failed to poll from model
repository: <why>"), a poll that cannot is skipped (logged; nothing is dropped).

A model's re-reads and the replacement of its replicas happen one at a time (a lock per
model); the fleet's requests go on meanwhile: a request that arrives while the old replicas
drain is held and wakes a replica of the new files.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Protocol

from activator.endpoint.model_endpoint import ModelEndpoint
from activator.errors import (
    ActivationFailed,
    BadRequest,
    ConfigError,
    NotSupported,
    UnknownModel,
)
from activator.fleet.in_place import UpdateOutcome, Updates, updates_in_place
from activator.fleet.override_files import OverrideFiles
from activator.fleet.repository import ModelEntry, Repository, Reread, ambiguous_steps
from activator.fleet.rescan import Change, PollSchedule, compare, compare_one
from thawwire.load_overrides import LoadOverride, refused
from thawwire.model_control import ambiguous, load_failed, not_in_repository
from tritonconfig.fingerprint import Fingerprint

__all__ = ["Reloader", "RepositorySync", "ServedModels"]

logger = logging.getLogger(__name__)


class ServedModels(Protocol):
    """What the reloader changes: the fleet's models (activator.fleet.fleet.Fleet)."""

    @property
    def repository(self) -> Repository: ...

    def endpoint(self, name: str) -> ModelEndpoint: ...

    def served(self, name: str) -> bool: ...

    def add_model(self, entry: ModelEntry, files: Fingerprint) -> ModelEndpoint: ...

    def renew_model(self, entry: ModelEntry, files: Fingerprint) -> ModelEndpoint: ...

    async def drop_model(self, name: str, *, wait: bool = True) -> None:
        """Drop a model whose directory is gone; `wait`: until its replicas are stopped."""
        ...

    async def update_replicas(
        self, name: str, parameters: Mapping[str, str] | None = None
    ) -> Updates:
        """Send `name`'s load (with a load override's `parameters`) to each replica up, for
        an instance update in place; their answers."""
        ...

    def load_parameters(self, name: str, parameters: Mapping[str, str] | None) -> None:
        """The `parameters` of the load call that brings up each replica of `name` from now
        on (a load's override; None: a plain load)."""
        ...

    def rate_limit_problem(self, entry: ModelEntry) -> str | None:
        """Triton's refusal of loading `entry` beside the other served models for its
        rate-limiter resources (`--rate-limit=execution_count`), None when it may load."""
        ...


class RepositorySync(Protocol):
    """Local copies of remote repositories (thawserver.s3_repository.localize)."""

    def sync(self) -> None:
        """Bring the copies in line with their sources (blocking); OSError when one cannot be
        read, the message naming it."""


@dataclass(frozen=True)
class _Before:
    """What served a model before a load's override: its entry (None: not served), its
    files' fingerprint and its own override (None: its repository's files)."""

    entry: ModelEntry | None
    files: Fingerprint | None
    served: _Served | None
    warm: bool = False  # it had a replica up: it gets one again


@dataclass(frozen=True)
class _Served:
    """The override a model is served with: it, where its `file:` overrides were written
    (None: its repository's files), and its repository's files when it was loaded (None:
    no such directory), which a later plain load compares."""

    override: LoadOverride
    directory: Path | None
    repository_files: Fingerprint | None


class Reloader:
    """Re-reads models of the repository and brings the fleet in line (module docstring)."""

    def __init__(
        self,
        models: ServedModels,
        *,
        rereads: bool = True,
        clock: Callable[[], float] = time.monotonic,
        override_files: OverrideFiles | None = None,
        repository_sync: RepositorySync | None = None,
    ) -> None:
        """`repository_sync`: the local copies of remote (S3) repositories, synced before
        each re-read (None: local repositories only)."""
        self._models = models
        self._sync = repository_sync
        # False (`--scaler kubernetes`): a load only warms the model, the repository as read
        # at start: active-active activators must agree on one index, and each reads its own
        # copy (docs/scale-to-zero.md).
        self._rereads = rereads
        self._clock = clock
        self._locks: dict[str, asyncio.Lock] = {}
        # Changed files of a served model that were refused, by model: a poll does not try
        # them again (an explicit load does, and says why again).
        self._refused: dict[str, Fingerprint] = {}
        self._files = override_files if override_files is not None else OverrideFiles()
        # Models served with a load's override, by name (module docstring).
        self._overrides: dict[str, _Served] = {}

    async def load(
        self, name: str, override: LoadOverride | None = None, *, wait: bool = True
    ) -> None:
        """The repository load call: re-read `name` (with the load's `override`, if any), act
        on its change, then warm it. Without `wait` the replicas it replaces are out of
        rotation at once but stop in the background (their drains are not waited for): a
        call that came through a replica (a handed-off connection) cannot wait for that
        replica's stop, which waits for the call. Triton's load, too, returns once the new
        version is ready, the old one unloading once its requests are done."""
        if not self._rereads:
            if override is not None:
                raise NotSupported(
                    f"failed to load '{name}', load overrides ('config', 'file:') are not "
                    "supported with --scaler kubernetes: each activator reads its own copy of "
                    "the repository and the pods load theirs from the image store, so they "
                    "would disagree; change the repository and roll the activators"
                )
            await self._models.endpoint(name).warm()
            return
        await self._synced_for(name)
        repository = self._models.repository
        changed = []
        if repository.namespacing:  # its steps first: the ensemble is judged on them
            # Each under its own lock, none held with another's: two ensembles loaded at once
            # that name each other (a cycle, refused) must not wait on each other's lock.
            first = await asyncio.to_thread(repository.reread, name)
            for step in await asyncio.to_thread(_steps_of, first, repository.config_name):
                if step != name and await self._reread_step(step, wait=wait):
                    changed.append(step)
        async with self._lock(name):
            if override is not None:
                # Warmed under the lock: a failed wake rolls back to what served before.
                await self._load_override(name, override, wait=wait)
                endpoint = None
            elif await asyncio.to_thread(self._keeps_override, name):
                endpoint = self._models.endpoint(name)
            else:
                reread = await asyncio.to_thread(repository.reread, name)
                endpoint = await self._apply(reread, by_name=True, wait=wait)
                await self._forget_override(name)
        await self._renew_dependents(changed, besides=(), wait=wait)
        if endpoint is not None:
            await endpoint.warm()

    async def _synced_for(self, name: str) -> None:
        """The remote repositories synced before a load re-reads `name` (module docstring)."""
        if self._sync is None:
            return
        try:
            await asyncio.to_thread(self._sync.sync)
        except OSError as exc:
            raise BadRequest(refused(name, str(exc))) from exc

    async def _reread_step(self, name: str, *, wait: bool) -> bool:
        """Re-read an ensemble's step `name` and act on it (never warmed: its ensemble's
        replica runs it); whether it changed. Its refusal is the ensemble's to tell."""
        repository = self._models.repository
        async with self._lock(name):
            reread = await asyncio.to_thread(repository.reread, name)
            if compare_one(repository.fingerprint_of(name), reread.fingerprint) is Change.UNCHANGED:
                return False
            try:
                await self._apply(reread, wait=wait)
            except (UnknownModel, ConfigError) as exc:
                logger.warning("model=%s not reloaded: %s", name, exc)
            return True

    async def unload(self, name: str, refusal: Exception | None = None) -> None:
        """The repository unload call: scale `name` to zero now (its requests still held
        answered with `refusal`, activator.endpoint.model_endpoint.unload); its next plain
        load reads its repository's files again, as after Triton's unload."""
        endpoint = self._models.endpoint(name)
        async with self._lock(name):
            served = self._overrides.get(name)
            if served is not None:
                # The files stay where the entry reads them until the next load replaces it.
                self._overrides[name] = _Served(served.override, served.directory, None)
        await endpoint.unload(refusal)

    @property
    def override_root(self) -> Path | None:
        """Where loads' `file:` overrides are written (None before the first)."""
        return self._files.root

    def close(self) -> None:
        """Remove every override's written files (blocking: `thaw up` stops)."""
        self._files.close()

    async def _load_override(self, name: str, override: LoadOverride, *, wait: bool) -> None:
        """Serve `name` with a load's override and warm it: its files written out (if any),
        read as its changed files; refused (400), nothing kept, when they cannot be served.
        A wake that fails (a replica refuses the override) is refused too, and what served
        before serves again: as Triton's failed load, which leaves the old version."""
        models, repository = self._models, self._models.repository
        served = models.served(name)
        before = _Before(
            repository.get(name) if served else None,
            repository.fingerprint_of(name),
            self._overrides.get(name),
            warm=served and models.endpoint(name).ready_count > 0,
        )
        directory = None
        if override.files:
            directory = await asyncio.to_thread(self._files.write, name, override.files)
        try:
            reread = await asyncio.to_thread(
                repository.reread_override, name, override.config_json, directory
            )
            if reread.fingerprint is None:  # a config alone for a model no repository has
                raise UnknownModel(not_in_repository(name))
            files_now = await asyncio.to_thread(repository.files_now, name)
            endpoint = await self._apply(reread, parameters=override.parameters(), wait=wait)
            if endpoint is None:  # several namespaces hold the name: no one model to serve
                raise ConfigError(load_failed(name, ambiguous(name, len(reread.ambiguous))))
            self._overrides[name] = _Served(override, directory, files_now)
            try:
                await endpoint.warm()
            except ActivationFailed as exc:
                await self._roll_back(name, before, endpoint, wait=wait)
                raise ConfigError(load_failed(name, exc.message)) from exc
        except BaseException:
            if directory is not None:
                await asyncio.to_thread(self._files.discard, directory)
            raise
        old = before.served
        if old is not None and old.directory is not None and old.directory != directory:
            await asyncio.to_thread(self._files.discard, old.directory)
        logger.info("model=%s loaded with its load's override (%s)", name,
                    "config and files" if directory is not None else "config")  # fmt: skip

    async def _roll_back(
        self, name: str, before: _Before, endpoint: ModelEndpoint, *, wait: bool
    ) -> None:
        """Serve `before` again after an override whose wake failed (a model that was not
        served before is dropped: its next plain load reads its repository)."""
        models = self._models
        self._overrides.pop(name, None)
        if before.entry is None or before.files is None:
            await models.drop_model(name, wait=wait)
            return
        if before.served is not None:
            self._overrides[name] = before.served
        previous = before.served.override.parameters() if before.served is not None else None
        models.load_parameters(name, previous)
        models.renew_model(before.entry, before.files)
        await endpoint.replace_replicas(wait=wait)
        logger.warning("model=%s override refused by its replica; what served before serves "
                       "again", name)  # fmt: skip
        if before.warm:
            try:
                await endpoint.warm()
            except ActivationFailed as exc:  # the model's own trouble: its next request says
                logger.warning("model=%s could not be warmed again: %s", name, exc.message)

    def _keeps_override(self, name: str) -> bool:
        """Triton's load without a `config` of a model serving one (`config` alone): while
        the model's repository files are unchanged since, the override holds (blocking)."""
        served = self._overrides.get(name)
        if served is None or served.directory is not None or served.repository_files is None:
            return False
        return self._models.repository.files_now(name) == served.repository_files

    async def _forget_override(self, name: str) -> None:
        """The model is no longer served with the override it had: its files go."""
        served = self._overrides.pop(name, None)
        if served is not None and served.directory is not None:
            await asyncio.to_thread(self._files.discard, served.directory)

    async def poll(self) -> None:
        """Re-read every model whose files changed since the last read (poll mode): removed
        ones first, then models, then ensembles (whose steps may have just been added)."""
        if self._sync is not None:  # OSError: this poll is skipped (poll_forever logs it)
            await asyncio.to_thread(self._sync.sync)
        repository = self._models.repository
        now = await asyncio.to_thread(repository.read_fingerprints)
        rereads: list[Reread] = []
        for change in compare(repository.fingerprints(), now):
            if change.change is Change.UNCHANGED:
                continue
            refused = self._refused.get(change.name)
            if refused is not None and refused == now.get(change.name):
                continue  # refused already, and said so
            rereads.append(await asyncio.to_thread(repository.reread, change.name))
        # Each stage's models at once (a drain takes up to the drain timeout), stage by stage.
        for stage in (0, 1, 2):
            group = [r for r in rereads if _poll_stage(r) == stage]
            await asyncio.gather(*(self._poll_one(reread) for reread in group))
        names = [r.name for r in rereads]
        await self._renew_dependents(names, besides=names)

    async def _renew_dependents(
        self, names: Collection[str], *, besides: Collection[str], wait: bool = True
    ) -> None:
        """With namespacing: replace the replicas of the ensembles (but `besides`) that step
        on a model of `names`, whose name changed (module docstring); `wait` as `load`'s."""
        repository = self._models.repository
        if not repository.namespacing or not names:
            return
        ensembles = {e for n in names for e in repository.stepping_on(n)} - set(besides)
        for ensemble in sorted(ensembles):
            logger.info("model=%s a step changed: its replicas are replaced", ensemble)
        await asyncio.gather(
            *(self._models.endpoint(e).replace_replicas(wait=wait) for e in sorted(ensembles))
        )

    async def _poll_one(self, reread: Reread) -> None:
        async with self._lock(reread.name):
            try:
                await self._apply(reread)
            except UnknownModel:
                pass  # removed: dropped (and logged by the fleet)
            except ConfigError as exc:
                logger.warning("model=%s not reloaded: %s", reread.name, exc)

    async def poll_forever(self, interval_s: float) -> None:
        """`poll` every `interval_s` seconds, counted from the end of the last one."""
        schedule = PollSchedule(interval_s, now=self._clock())
        while True:
            await asyncio.sleep(schedule.wait_s(self._clock()))
            try:
                await self.poll()
            except (OSError, ConfigError) as exc:  # a repository that cannot be read now
                logger.warning("repository poll failed: %s", exc)
            schedule.done(self._clock())

    def _refuse(self, reread: Reread, reason: str) -> NoReturn:
        """Refuse the model's new files: a model not served is unavailable with `reason`; a
        served one keeps its old files serving."""
        models, name = self._models, reread.name
        if reread.fingerprint is not None:
            models.repository.refuse(name, reason, reread.fingerprint)
            if models.served(name):
                self._refused[name] = reread.fingerprint
                logger.warning("model=%s new files refused, the old ones keep serving: %s",
                               name, reason)  # fmt: skip
        raise ConfigError(load_failed(name, reason))

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    async def _apply(
        self,
        reread: Reread,
        *,
        parameters: Mapping[str, str] | None = None,
        by_name: bool = False,
        wait: bool = True,
    ) -> ModelEndpoint | None:
        """Act on one model's re-read (module docstring); its endpoint (None: ambiguous), or
        the refusal. `parameters`: its replicas' load call's (a load's override), set once it
        is served. `by_name`: a load call named it; a served model whose files did not change
        has its replicas replaced all the same, as Triton's explicit load of an unchanged
        model loads it again (its `initialize` runs again; an ensemble runs no code of its
        own: kept). `wait`: whether the replicas it replaces are waited for (`load`)."""
        models, name = self._models, reread.name
        change = compare_one(models.repository.fingerprint_of(name), reread.fingerprint)
        if change is Change.REMOVED or reread.fingerprint is None:
            if change is Change.REMOVED:
                await models.drop_model(name, wait=wait)
            raise UnknownModel(not_in_repository(name))
        if reread.ambiguous:
            if models.served(name):  # held by one more namespace now: no longer by name
                await models.drop_model(name, wait=wait)
            models.repository.hold_ambiguous(name, reread.ambiguous, reread.fingerprint)
            return None
        if reread.error is not None:
            if change is Change.UNCHANGED and models.served(name):
                return models.endpoint(name)  # a served model's files did not change
            return self._refuse(reread, reread.error)
        entry = reread.entry
        if entry is None:  # a Reread holds an entry or an error: never here
            raise ConfigError(load_failed(name, "its model directory could not be read"))
        problem = models.repository.ensemble_problem(entry) or models.rate_limit_problem(entry)
        if problem is not None:
            return self._refuse(reread, problem)
        self._refused.pop(name, None)
        # Before any replica of the new entry can start.
        models.load_parameters(name, parameters)
        if not models.served(name):
            return models.add_model(entry, reread.fingerprint)
        if change is Change.UNCHANGED:
            endpoint = models.endpoint(name)
            if by_name and not entry.ensemble:
                await endpoint.replace_replicas(wait=wait)
            return endpoint
        before = models.repository.get(name)
        before_files = models.repository.fingerprint_of(name) or ()
        served = self._overrides.get(name)
        in_place = updates_in_place(
            before=before.config, after=entry.config, before_files=before_files,
            after_files=reread.fingerprint,
            files_overridden=any(k.startswith("file:") for k in parameters or {})
            or (served is not None and served.directory is not None),
        )  # fmt: skip
        if in_place and await self._update_in_place(reread, parameters, before, before_files):
            # The new entry once the replicas serve it: the index and metadata do not show a
            # version before it answers (as Triton's reload). A replica whose start began
            # during the update reads the repository's files, new already (with an image, the
            # old entry's: it serves the old versions until the model's next change or start).
            return models.renew_model(entry, reread.fingerprint)
        endpoint = models.renew_model(entry, reread.fingerprint)
        # Replace the replicas of the old files: each drains (its requests in flight finish);
        # a request meanwhile is held and wakes a replica of the new files.
        await endpoint.replace_replicas(wait=wait)
        return endpoint

    async def _update_in_place(
        self,
        reread: Reread,
        parameters: Mapping[str, str] | None,
        before: ModelEntry,
        before_files: Fingerprint,
    ) -> bool:
        """Send a model whose change its replicas take in place (its instance groups, its
        versions: activator.fleet.in_place) its load (with `parameters`, its override's) on
        each replica up, for each to update in place; whether they did (False: replace them).
        Every replica refusing it keeps the old config, as Triton's failed reload: the old
        entry, and the load parameters it was served with, are served again and the load
        refused."""
        models, name = self._models, reread.name
        updates = await models.update_replicas(name, parameters)
        outcome = updates.outcome
        if outcome is UpdateOutcome.KEPT:
            logger.info("model=%s updated in place (replicas up: %d)", name,
                        updates.updated)  # fmt: skip
            return True
        if outcome is UpdateOutcome.REPLACE:
            logger.warning("model=%s update in place not taken by every replica (%s): its "
                           "replicas are replaced", name, updates.why)  # fmt: skip
            return False
        served = self._overrides.get(name)
        models.load_parameters(name, served.override.parameters() if served else None)
        return self._refuse(reread, updates.why.removeprefix(load_failed(name, "")))


def _steps_of(reread: Reread, config_name: str) -> tuple[str, ...]:
    """The step models of a re-read ensemble: its own (entry) or, for an ambiguous name, each
    namespace's (read here, as the replicas will read them: blocking, in a thread)."""
    if reread.entry is not None:
        return reread.entry.steps
    return ambiguous_steps(reread.ambiguous, config_name)


def _poll_stage(reread: Reread) -> int:
    """Removed models first (0), then models (1), then ensembles (2)."""
    if reread.fingerprint is None:
        return 0
    return 2 if reread.entry is not None and reread.entry.ensemble else 1
