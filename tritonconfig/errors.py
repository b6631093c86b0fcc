"""The one error this package raises: a model configuration Triton would refuse.

    ModelConfigError    config text, JSON, ONNX graph, platform, versions or a field is wrong;
                        the message names the source (file or override), line and field

Callers translate it into their own error tree once, keeping the message: the runtime into
`RepositoryError` (400), the activator into `ConfigError` (the model is unavailable).
"""

from __future__ import annotations

__all__ = ["ModelConfigError"]


class ModelConfigError(Exception):
    """A model configuration that cannot be used; `message` says where and why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
