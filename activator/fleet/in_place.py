"""Whether a served model's change is one its replicas take in place (pure): Triton's instance
update and per-version reload, which `thaw serve` carries out (runtime.models.instance_update,
runtime.models.version_reuse).

A repository `load` (or the poll) that finds a model's files changed replaces its replicas,
unless the change is one a replica's own load applies in place: then each replica is sent the
load (with the load's `config` override, if any) and adds or removes instances, and loads the
versions added or changed and unloads the ones dropped, while the rest keep serving, none
initialized again. That is when, as `thaw serve` judges it:

    its files but its config and version       (path, mtime, size: tritonconfig.fingerprint;
    directories unchanged                       config.pbtxt, or a `config` override's mark,
                                                compared by content instead; a version
                                                directory's files may change, be added or go)
    its config the same but instance_group     (and version_policy: tritonconfig.config_change;
                                                the same config rewritten is no change at all,
                                                which the replica keeps as it is)
    no `file:` override, before or after       (a replica serving one reloads whole)

A file of the model's own beside its versions (a module they import) reloads every version on
Triton as on `thaw serve`: the replicas are replaced, which loads each version once too.

Each replica answers the load (`Updates`): all took it (KEPT), all refused it and serve the old
config (REFUSED: the load is refused, as Triton's failed reload), else REPLACE.

A replica may still load the version whole (an ensemble, a sequence batcher holding a live
sequence: runtime.models.instance_update); either way it serves the new config.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tritonconfig.config_change import same_but_instances
from tritonconfig.fingerprint import Fingerprint
from tritonconfig.schema import mc

__all__ = ["UpdateOutcome", "Updates", "updates_in_place"]

_CONFIG = "config.pbtxt"  # compared by content, not by its file


def updates_in_place(
    *,
    before: mc.ModelConfig,
    after: mc.ModelConfig,
    before_files: Fingerprint,
    after_files: Fingerprint,
    files_overridden: bool = False,
) -> bool:
    """Whether a served model's replicas can take the new config (`after`, read from
    `after_files`) in place of the one they run (module docstring). `files_overridden`: the
    model is served, or is to be served, with a load's `file:` overrides."""
    if files_overridden:
        return False
    if _model_files(before_files) != _model_files(after_files):
        return False
    return same_but_instances(before, after)


def _model_files(files: Fingerprint) -> Fingerprint:
    """The rows of a model's own files: neither its config (config.pbtxt, a `config`
    override's mark: activator.fleet.repository's path no file has, for it holds a NUL) nor a
    version directory's (a replica's load reloads only the versions that changed)."""
    return tuple(
        row
        for row in files
        if row[0] != _CONFIG and not row[0].startswith("\0") and not _in_version(row[0])
    )


def _in_version(path: str) -> bool:
    first, sep, _ = path.partition("/")
    return bool(sep) and first.isdigit()


class UpdateOutcome(StrEnum):
    """What the load sent to a model's replicas for an instance update came to."""

    KEPT = "kept"  # every replica took it: they serve the new config
    REFUSED = "refused"  # every replica refused it and serves the old config, as Triton's
    #                      failed reload: the load is refused, the old config kept
    REPLACE = "replace"  # some took it and some did not, or one did not answer: the
    #                      replicas may disagree, so they are replaced (as any other change)


@dataclass(frozen=True)
class Updates:
    """The answers of a model's replicas to the load of an instance update: how many took it,
    the errors of those that refused it (their own words), and of the calls that got no
    answer (timed out, unreachable)."""

    updated: int = 0
    refused: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    @property
    def outcome(self) -> UpdateOutcome:
        if self.failed or (self.refused and self.updated):
            return UpdateOutcome.REPLACE
        return UpdateOutcome.REFUSED if self.refused else UpdateOutcome.KEPT

    @property
    def why(self) -> str:
        """The first error, for a log line or the load's refusal ("" when none)."""
        return next(iter((*self.refused, *self.failed)), "")
