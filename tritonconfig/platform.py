"""The `platform`/`backend` pair and the model file name, filled in and checked Triton's way."""

from __future__ import annotations

from pathlib import Path

from tritonconfig.ensemble import ENSEMBLE_PLATFORM
from tritonconfig.errors import ModelConfigError
from tritonconfig.schema import mc

__all__ = ["PLATFORM_BACKENDS", "default_model_filename", "known_backends", "normalize_platform"]

# platform -> backend name, both spellings Triton accepts.
PLATFORM_BACKENDS: dict[str, str] = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "pytorch_torch_export": "pytorch",
    "tensorrt_plan": "tensorrt",
}
_BACKEND_PLATFORMS: dict[str, str] = {
    "onnxruntime": "onnxruntime_onnx",
    "pytorch": "pytorch_libtorch",
    "tensorrt": "tensorrt_plan",
}
_DEFAULT_FILES: dict[str, str] = {
    "onnxruntime": "model.onnx",
    "pytorch": "model.pt",
    "tensorrt": "model.plan",
    "python": "model.py",
}
# A version directory's model file -> the backend that serves it (config names neither).
_FILE_BACKENDS: tuple[tuple[str, str], ...] = (
    ("model.onnx", "onnxruntime"),
    ("model.pt", "pytorch"),
    ("model.pt2", "pytorch"),
    ("model.plan", "tensorrt"),
    ("model.py", "python"),
)


def known_backends() -> frozenset[str]:
    """The backends Thaw serves itself (a config naming another is unsupported, or a
    Python-based backend: tritonconfig.python_based)."""
    return frozenset(_DEFAULT_FILES)


def normalize_platform(config: mc.ModelConfig, version_dir: Path | None, source: str) -> None:
    """Fill the `platform`/`backend` pair Triton's way; infer it from the model file in
    `version_dir` (the newest version) when the config names neither. An ensemble has a
    platform and no backend: it runs other models, not a file."""
    if config.platform == ENSEMBLE_PLATFORM:
        if config.backend:
            raise ModelConfigError(
                f"{source}: Ensemble model '{config.name}' must have platform type "
                f"'{ENSEMBLE_PLATFORM}' and empty backend type"
            )
        return
    if not config.platform and not config.backend and version_dir is not None:
        _infer_from_files(config, version_dir)
    if config.platform and not config.backend:
        if config.platform not in PLATFORM_BACKENDS:
            raise ModelConfigError(
                f"{source}: unexpected platform type '{config.platform}' for {config.name}"
            )
        config.backend = PLATFORM_BACKENDS[config.platform]
    elif config.backend and not config.platform and config.backend in _BACKEND_PLATFORMS:
        export = config.backend == "pytorch" and _has_pt2(config, version_dir)
        config.platform = "pytorch_torch_export" if export else _BACKEND_PLATFORMS[config.backend]
    elif config.platform and config.backend:
        expected = PLATFORM_BACKENDS.get(config.platform)
        if expected is not None and expected != config.backend:
            raise ModelConfigError(
                f"{source}: platform '{config.platform}' does not match backend '{config.backend}'"
            )
    if not config.backend:
        raise ModelConfigError(
            f"{source}: Invalid model name: Could not determine backend for model "
            f"'{config.name}' with no backend in model configuration. Expected model name of "
            "the form 'model.<backend_name>'."
        )
    _check_runtime(config, source)
    if config.backend not in _DEFAULT_FILES:
        raise ModelConfigError(f"{source}: unsupported backend '{config.backend}'")


def _check_runtime(config: mc.ModelConfig, source: str) -> None:
    """Triton's `runtime` (the backend library to load): Thaw's backends are built in, so only
    their own library names (`libtriton_<backend>.so`) and a Python-based backend's `model.py`
    name one; a name that leaves the backend directory is refused first, as Triton does."""
    runtime = config.runtime
    if not runtime:
        return
    if Path(runtime).is_absolute() or ".." in Path(runtime).parts:
        raise ModelConfigError(
            f"{source}: backend library name '{runtime}' escapes backend directory"
        )
    if runtime not in ("model.py", f"libtriton_{config.backend}.so"):
        raise ModelConfigError(
            f"{source}: unable to find backend library '{runtime}' for model '{config.name}'"
        )


def _infer_from_files(config: mc.ModelConfig, version_dir: Path) -> None:
    for filename, backend in _FILE_BACKENDS:
        if (version_dir / filename).is_file():
            config.backend = backend
            if filename == "model.pt2":
                config.platform = "pytorch_torch_export"
            return


def _has_pt2(config: mc.ModelConfig, version_dir: Path | None) -> bool:
    if config.default_model_filename:
        return config.default_model_filename.endswith(".pt2")
    return version_dir is not None and (version_dir / "model.pt2").is_file()


def default_model_filename(config: mc.ModelConfig) -> str:
    """The model file inside a version directory: `default_model_filename` or the platform's."""
    if config.default_model_filename:
        return config.default_model_filename
    if config.platform == "pytorch_torch_export":
        return "model.pt2"
    return _DEFAULT_FILES.get(config.backend, "model")
