"""Which loaded versions a reload keeps, as Triton's reload does: a version whose files and the
model's own files are unchanged, and whose config is the same but for its version policy, stays
up (not loaded again); a changed or new version loads, one the policy drops unloads. A config
that changes only its instance groups keeps the versions and updates their instances in place
(`same_but_instances`, tritonconfig.config_change; runtime.models.instance_identity says which
instances stay).

    reusable_versions(before=..., after=..., loaded={"1", "2"}, selected=[1, 2, 3],
                      same_config=True)  -> frozenset({"1"})   (2/model.py touched)

The fingerprints are runtime.models.repository.fingerprint's (relative path, mtime_ns, size)
rows. `__pycache__` rows are left out: a Python model's first import writes them into its own
version directory, which is no change of the model (test.sh runs tritonserver with
PYTHONDONTWRITEBYTECODE for the same reason).
"""

from __future__ import annotations

from collections.abc import Iterable

from tritonconfig.config_change import same_but_instances, same_but_versions

__all__ = ["Fingerprint", "reusable_versions", "same_but_instances", "same_but_versions"]

Fingerprint = tuple[tuple[str, int, int], ...]
_CONFIG = "config.pbtxt"  # compared by content (same_but_versions), not by its file


def _by_owner(rows: Fingerprint) -> dict[str, set[tuple[str, int, int]]]:
    """Rows under each version directory ("1", "2", ...), and the model's own under ""."""
    owners: dict[str, set[tuple[str, int, int]]] = {}
    for row in rows:
        parts = row[0].split("/")
        if "__pycache__" in parts or row[0] == _CONFIG:
            continue
        owner = parts[0] if len(parts) > 1 and parts[0].isdigit() else ""
        owners.setdefault(owner, set()).add(row)
    return owners


def reusable_versions(
    *,
    before: Fingerprint,
    after: Fingerprint,
    loaded: Iterable[str],
    selected: Iterable[int],
    same_config: bool,
) -> frozenset[str]:
    """The loaded versions the policy still selects that a reload need not load again."""
    if not same_config:
        return frozenset()
    old, new = _by_owner(before), _by_owner(after)
    if old.get("", set()) != new.get("", set()):  # a file of the model's own changed
        return frozenset()
    wanted = {str(v) for v in selected}
    return frozenset(
        v for v in loaded if v in wanted and old.get(v, set()) == new.get(v, set()) and v in old
    )
