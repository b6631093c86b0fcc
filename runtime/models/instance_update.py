"""Triton's instance update, carried out: a reload that changes only a model's instance groups
adds and removes instances of the versions up, in place, instead of loading them again.

    updatable_versions(model, spec)    which versions qualify (else the reload loads whole)
      ─▶ prepare_update (a thread)     the added instances load; nothing serves them yet
      ─▶ apply_updates (the loop)      the scheduler takes them and retires the removed ones
      ─▶ finish_update (a thread)      the removed ones answer what they run, then finalize

Which instances stay is runtime.models.instance_identity's rule; which versions may be kept at
all is runtime.models.version_reuse's.
"""

from __future__ import annotations

import logging

from runtime.backends.base import Backend
from runtime.errors import RepositoryError
from runtime.model_config import config_to_json
from runtime.models.model_entry import ModelEntry
from runtime.models.repository import ModelSpec
from runtime.models.version_loader import InstanceChange, LoadedVersion, VersionLoader
from runtime.models.version_reuse import reusable_versions, same_but_instances, same_but_versions
from runtime.scheduling.instance_worker import Instance
from runtime.scheduling.scheduler import Scheduler
from runtime.scheduling.sequence_scheduler import SequenceScheduler
from tritonconfig.schema import mc

__all__ = ["StaleUpdate", "apply_updates", "finish_update", "prepare_update", "updatable_versions"]

logger = logging.getLogger(__name__)

# How long an update waits for a removed instance's last requests before finalizing it anyway.
_RETIRE_TIMEOUT_S = 30.0


def updatable_versions(model: ModelEntry, spec: ModelSpec) -> list[LoadedVersion]:
    """The versions up whose instances a reload updates in place: the same versions, their
    files unchanged, the config changed in its instance groups only, each run by a Scheduler,
    or a SequenceScheduler with no live sequence (an ensemble, a sequence batcher holding
    sequences, or a model with a passive instance group before or after, reloads whole).
    Else none."""
    if not model.versions or model.override_dir is not None:
        return []
    before = model.served_config
    if same_but_versions(before, spec.config) or not same_but_instances(before, spec.config):
        return []
    if _has_passive(before) or _has_passive(spec.config):
        return []  # the schedulers hold the active instances only: a whole load places them
    reuse = reusable_versions(
        before=model.served_fingerprint, after=spec.fingerprint, loaded=model.versions,
        selected=spec.versions, same_config=True,
    )  # fmt: skip
    if set(reuse) != set(model.versions) or {str(v) for v in spec.versions} != set(reuse):
        return []
    ups = [model.versions[version] for version in sorted(reuse, key=int)]
    for up in ups:
        scheduler = up.scheduler
        if not isinstance(scheduler, Scheduler | SequenceScheduler) or not up.instance_keys:
            return []
        if not scheduler.can_update_instances():
            return []
    return ups


def _has_passive(config: mc.ModelConfig | None) -> bool:
    return config is not None and any(g.passive for g in config.instance_group)


def prepare_update(
    loader: VersionLoader, spec: ModelSpec, updating: list[LoadedVersion]
) -> list[InstanceChange]:
    """Load the instances the update adds, for each version (blocking); all or none."""
    changes: list[InstanceChange] = []
    try:
        for up in updating:
            changes.append(loader.update_instances(spec, up))
    except BaseException:
        for change in changes:
            loader.discard(spec.name, change.add)
        raise
    return changes


def apply_updates(changes: list[InstanceChange]) -> list[tuple[list[Instance], list[Backend]]]:
    """On the loop: each version's scheduler takes its new instances and retires the dropped
    ones; returns what `finish_update` finalizes. StaleUpdate, carrying the instances of the
    changes not applied, when a sequence began on a version since `updatable_versions` chose it
    (the load may be tried again)."""
    retired = []
    for index, change in enumerate(changes):
        scheduler = change.version.scheduler
        if not isinstance(scheduler, Scheduler | SequenceScheduler) or (
            not scheduler.can_update_instances()
        ):
            raise StaleUpdate([b for unapplied in changes[index:] for b in unapplied.add])
        retired.append(_apply(change, scheduler))
    return retired


class StaleUpdate(RepositoryError):
    """An instance update overtaken by a sequence that began meanwhile; `unused` are the
    instances it loaded, never served, to finalize (off the loop)."""

    def __init__(self, unused: list[Backend]) -> None:
        super().__init__("a sequence started while the model's instances were updated")
        self.unused = unused


def _apply(
    change: InstanceChange, scheduler: Scheduler | SequenceScheduler
) -> tuple[list[Instance], list[Backend]]:
    """The scheduler takes the new instances; the version now reads as its new config."""
    up = change.version
    drivers: list[Instance]
    if isinstance(scheduler, Scheduler):
        drivers = scheduler.update_instances(change.add, change.remove, needs=change.add_needs)
    else:  # the sequence batcher holds no rate-limiter resources
        drivers = list(scheduler.update_instances(change.add, change.remove))
    gone = {id(backend) for backend in change.remove}
    up.instances = [b for b in up.instances if id(b) not in gone] + change.add
    up.instance_keys = change.keys
    up.config, up.config_json = change.config, config_to_json(change.config)
    return drivers, change.remove


def finish_update(
    loader: VersionLoader, name: str, drivers: list[Instance], backends: list[Backend]
) -> None:
    """Wait for the retired instances' last requests (blocking), then finalize them."""
    for driver in drivers:
        if not driver.join(_RETIRE_TIMEOUT_S):
            logger.warning("model=%s instance %s did not stop in time", name, driver.name)
    loader.discard(name, backends)
