"""Image references (`MODEL[:VERSION]`) and the validated names that key an image in a store."""

from __future__ import annotations

import re
from dataclasses import dataclass

from snapshotter.errors import ImageRefError

_MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_VERSION_RE = re.compile(r"^[1-9][0-9]{0,17}$")
_TARGET_RE = re.compile(r"^(cpu|cuda:sm_[0-9]{2,3})$")


def check_model_name(name: str) -> str:
    """Return `name` if it is a safe model name (never a path, never `..`), else raise."""
    if not isinstance(name, str) or not _MODEL_RE.match(name) or ".." in name:
        raise ImageRefError(f"model name {name!r} is invalid: letters, digits, `_.-`, <= 128")
    return name


def check_version(version: str) -> str:
    """Return `version` if it is a positive decimal integer string, else raise."""
    if not isinstance(version, str) or not _VERSION_RE.match(version):
        raise ImageRefError(f"version {version!r} is invalid: a positive integer")
    return version


def check_target(target: str) -> str:
    """Return `target` if it is `cpu` or `cuda:sm_NN`, else raise."""
    if not isinstance(target, str) or not _TARGET_RE.match(target):
        raise ImageRefError(f"target {target!r} is invalid: `cpu` or `cuda:sm_NN`")
    return target


@dataclass(frozen=True)
class ImageRef:
    """One image: a model version built for one target."""

    model: str
    version: str
    target: str

    def __post_init__(self) -> None:
        check_model_name(self.model)
        check_version(self.version)
        check_target(self.target)

    def __str__(self) -> str:
        return f"{self.model}:{self.version} ({self.target})"

    @property
    def key(self) -> str:
        """The store-relative directory of this image: `images/<model>/<version>/<target>`."""
        return f"images/{self.model}/{self.version}/{self.target}"


def parse_ref(text: str) -> tuple[str, str | None]:
    """Split `MODEL[:VERSION]` into a validated (model, version or None)."""
    model, sep, version = text.partition(":")
    check_model_name(model)
    if sep:
        check_version(version)
        return model, version
    return model, None


def resolve_target(text: str) -> str:
    """`cpu`, `cuda:sm_NN`, or `cuda` (this machine's GPU 0: its compute capability from NVML,
    else torch) as a checked target."""
    if text != "cuda":
        return check_target(text)
    from snapshotter.gpu_probe import cuda_target, local_gpus

    scan = local_gpus()
    if scan.count == 0:
        import torch

        if not torch.cuda.is_available():
            raise ImageRefError(f"target `cuda`: {scan.reason}; pass --target cuda:sm_NN")
    return check_target(cuda_target(0, scan))
