"""Per-model overrides of the `thaw.*` parameters from a file (`thaw up --model-settings FILE`).

On Kubernetes the Helm chart renders its `models` values into a ConfigMap holding this file, so
an operator sets a model's scaling without editing its config.pbtxt (which stays valid for
Triton). The file is JSON:

    {"models": {"resnet50": {"thaw.max_replicas": "4", "thaw.hot": "true"}, ...}}

Values are what a config.pbtxt `string_value` would hold (numbers and booleans are accepted
as such too); each model's are applied over its config.pbtxt parameters and checked by
`config.validated`, so a bad value is refused at start-up in the same words, prefixed by the
file. A model the repository does not have is reported back (a warning), not an error.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

from activator.config import validated
from activator.errors import ConfigError
from activator.fleet.repository import Repository, is_model_name

__all__ = ["apply_model_settings", "read_model_settings"]

_MAX_FILE_BYTES = 4 << 20


def read_model_settings(path: Path) -> dict[str, dict[str, object]]:
    """model -> {`thaw.<setting>`: value}; ConfigError naming the file and what is wrong."""
    try:
        if path.stat().st_size > _MAX_FILE_BYTES:
            raise ConfigError(f"{path}: larger than {_MAX_FILE_BYTES} bytes")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read model settings: {exc}") from exc
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise ConfigError(f'{path}: must be a JSON object {{"models": {{name: {{...}}}}}}')
    result: dict[str, dict[str, object]] = {}
    for name, params in models.items():
        if not is_model_name(name):
            raise ConfigError(f"{path}: {name[:200]!r} is not a model name")
        if not isinstance(params, dict) or not all(
            isinstance(v, str | int | float | bool) for v in params.values()
        ):
            raise ConfigError(f"{path}: model {name}: settings must map `thaw.*` to values")
        stray = sorted(k for k in params if not str(k).startswith("thaw."))
        if stray:
            raise ConfigError(f"{path}: model {name}: {stray[0]!r} is not a `thaw.*` setting")
        result[name] = dict(params)
    return result


def apply_model_settings(
    repository: Repository, overrides: Mapping[str, Mapping[str, object]], *, source: Path
) -> tuple[Repository, list[str]]:
    """`repository` with each model's overrides applied and validated; and the names of the
    models the overrides name but the repository does not serve."""
    entries = {}
    for name in repository.names():
        entry = repository.get(name)
        params = overrides.get(name)
        if params is not None:
            try:
                settings = validated(entry.settings, params, model=name)
            except ConfigError as exc:
                raise ConfigError(f"{source}: {exc.message}") from exc
            entry = dataclasses.replace(entry, settings=settings)
        entries[name] = entry
    unknown = sorted(set(overrides) - set(entries) - set(repository.unavailable))
    kept = Repository(
        repository.roots, entries, repository.unavailable, start_error=repository.start_error,
        ambiguous=repository.ambiguous,
    )  # fmt: skip
    return kept, unknown
