"""The classification labels of a model's outputs: each output's `label_filename`, read at load.

Triton reads the file (relative to the model directory, one label a line) when it loads the
model, fails the load when it cannot, and appends a class's label to its classification string
(`value:index:label`); a class past the last line gets none (observed on 2.51). An ensemble's
output without a label file of its own takes the labels of the step's output that produces it
(core's model_lifecycle completes an ensemble's label provider so).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from runtime.errors import RepositoryError
from runtime.models.repository_file import read_regular_file
from tritonconfig import ensemble_steps
from tritonconfig.schema import mc

__all__ = ["ensemble_output_labels", "read_output_labels"]

# A label file is a short list of names; a bigger one is no label file.
_MAX_LABEL_FILE_BYTES = 64 * 1024 * 1024


def read_output_labels(config: mc.ModelConfig, model_dir: Path) -> Mapping[str, tuple[str, ...]]:
    """Output name -> its labels, for the outputs that name a `label_filename`."""
    labels: dict[str, tuple[str, ...]] = {}
    for output in config.output:
        if output.label_filename:
            labels[output.name] = _read(model_dir / output.label_filename, model_dir)
    return labels


def _read(path: Path, model_dir: Path) -> tuple[str, ...]:
    # Never a path out of the model's directory (`../../etc/passwd`).
    if not path.resolve().is_relative_to(model_dir.resolve()):
        raise RepositoryError(f"label file {path} is outside the model directory")
    try:
        # Regular and bounded (runtime.models.repository_file): a FIFO would hang the load.
        data = read_regular_file(path, _MAX_LABEL_FILE_BYTES)
    except OSError as exc:
        # Triton's words ("failed to open text file for read <path>: No such file or directory").
        raise RepositoryError(
            f"failed to open text file for read {path}: {exc.strerror or exc}"
        ) from exc
    return tuple(data.decode("utf-8", errors="replace").splitlines())


def ensemble_output_labels(
    config: mc.ModelConfig,
    model_dir: Path,
    config_of: Callable[[str], mc.ModelConfig | None],
) -> Mapping[str, tuple[str, ...]]:
    """An ensemble's output labels: its own label files, then for each output without one the
    labels of the step output that writes it (that step model's file, beside the ensemble in
    the repository; `config_of` gives its config, None: unknown here, no labels)."""
    labels = dict(read_output_labels(config, model_dir))
    missing = {output.name for output in config.output} - labels.keys()
    for step in ensemble_steps(config):
        for model_output, tensor in step.output_map.items():
            if tensor not in missing:
                continue
            step_config = config_of(step.model_name)
            step_dir = model_dir.parent / step.model_name
            if step_config is None or not step_dir.is_dir():  # another namespace's: unknown
                continue
            found = read_output_labels(step_config, step_dir)
            if model_output in found:
                labels[tensor] = found[model_output]
                missing.discard(tensor)
    return labels
