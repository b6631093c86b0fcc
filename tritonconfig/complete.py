"""Complete a parsed config the way Triton does before it serves a model, in Triton's order."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tritonconfig.defaults import fill_defaults
from tritonconfig.ensemble import is_ensemble
from tritonconfig.errors import ModelConfigError
from tritonconfig.onnx_autocomplete import DEFAULT_MAX_BATCH_SIZE, autocomplete_from_onnx
from tritonconfig.platform import default_model_filename, normalize_platform
from tritonconfig.schema import mc
from tritonconfig.validate import validate_config
from tritonconfig.versions import available_versions, select_versions

__all__ = ["complete_config"]


def complete_config(
    config: mc.ModelConfig,
    model_dir: Path,
    source: str,
    *,
    gpu_available: bool,
    require_model_files: bool,
    auto_complete: bool = True,
    gpus: Sequence[int] = (0,),
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> list[int]:
    """Complete `config` (of the model in `model_dir`) in place and check it; return the
    versions its policy serves, ascending. ModelConfigError where Triton would refuse it.

    Order, Triton's: platform/backend (inferred from the newest version's file) → ONNX
    auto-complete (which reads the newest served version's file) → defaults → validation →
    version policy → model files (when `require_model_files`). A config is judged before its
    versions and files are: a config Triton refuses is refused in its words even where the
    model has no version directory. A python model's own `auto_complete_config` is not run
    here: it runs the model's code. `auto_complete=False` (tritonserver's
    `--disable-auto-complete-config`) skips the ONNX auto-complete: the config must then
    declare what the model takes and gives. `default_max_batch_size`: what the ONNX
    auto-complete gives a model that can batch and sets no `max_batch_size` (tritonserver's
    `--backend-config=onnxruntime,default-max-batch-size`, 4 by default).
    """
    available = available_versions(model_dir)
    newest = model_dir / str(available[-1]) if available else None
    normalize_platform(config, newest, source)
    versions: list[int] | None = None
    if auto_complete and config.backend == "onnxruntime":
        versions = select_versions(config.version_policy, available, str(model_dir))
        _check_model_files(config, model_dir, versions, source, required=require_model_files)
        onnx_file = model_dir / str(versions[-1]) / default_model_filename(config)
        autocomplete_from_onnx(
            config, onnx_file, source, default_max_batch_size=default_max_batch_size
        )
    fill_defaults(config, gpu_available=gpu_available, gpus=gpus)
    validate_config(config, source)
    if versions is None:
        versions = select_versions(config.version_policy, available, str(model_dir))
        _check_model_files(config, model_dir, versions, source, required=require_model_files)
    return versions


def _check_model_files(
    config: mc.ModelConfig, model_dir: Path, versions: list[int], source: str, *, required: bool
) -> None:
    """ModelConfigError naming the first served version without its model file."""
    if not required or is_ensemble(config):
        return
    for version in versions:
        model_file = model_dir / str(version) / default_model_filename(config)
        try:
            present = model_file.exists()
        except OSError as exc:  # e.g. a `default_model_filename` too long to be a name
            raise ModelConfigError(
                f"{source}: model file {str(model_file)[:300]} cannot be read: {exc.strerror}"
            ) from None
        if not present:
            raise ModelConfigError(f"{source}: model file {model_file} is missing")
