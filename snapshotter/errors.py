"""The snapshotter's one error tree; third-party exceptions are translated into it at adapters.

SnapshotError                      anything the snapshotter refuses or fails to do
├── ManifestError                  a manifest is malformed, lies, or names a path
├── ImageRefError                  an image reference or store URI is malformed
├── BuildError                     a model directory cannot be turned into an image
│   └── NothingToImage             the model has no weights to image (e.g. a Python model)
├── ImageNotFound                  no image for this model / version / target
├── ArtifactError                  an artifact archive is malformed or names a path outside its root
├── IntegrityError                 bytes do not match their digest or size (names the chunk)
├── SnapshotStoreError             a store (S3, directory) failed: network, permissions, disk
│   └── StoreTimeout               a store stopped answering within its timeout
├── DeviceMemoryError              not enough free device memory (VRAM) for a restore
├── DeviceCopyError                a host-to-device copy failed (a CUDA error during the restore)
└── RestoreCancelled               a restore was cancelled before it finished
"""

from __future__ import annotations


class SnapshotError(Exception):
    """Base of every error the snapshotter raises."""


class ManifestError(SnapshotError):
    """A manifest is malformed, inconsistent, or tries to reach outside its store."""


class ImageRefError(SnapshotError):
    """An image reference (`MODEL[:VERSION]`) or a store URI is malformed."""


class BuildError(SnapshotError):
    """A model version directory cannot be turned into an image."""


class NothingToImage(BuildError):
    """The model has no weight files to image (a Python-backend model, say): not a failure."""


class ImageNotFound(SnapshotError):
    """No image exists for the requested model, version and target."""


class ArtifactError(SnapshotError):
    """An artifact archive (compile cache, engine cache) is malformed or tries to reach outside
    the directory it is unpacked into."""


class IntegrityError(SnapshotError):
    """Stored bytes do not match their manifest's size or digest."""

    def __init__(self, message: str, *, digest: str | None = None) -> None:
        super().__init__(message)
        self.digest = digest


class SnapshotStoreError(SnapshotError):
    """A store failed (network, permissions, disk full, throttled past the retry budget)."""


class StoreTimeout(SnapshotStoreError):
    """A store stopped answering within its connect or read timeout."""


class DeviceMemoryError(SnapshotError):
    """Not enough free device memory for a restore: the budget check refused it, or the
    device's allocator ran out (CUDA out of memory). Fails that load, never the server."""


class DeviceCopyError(SnapshotError):
    """A host-to-device copy of a restore failed (the CUDA error is chained)."""


class RestoreCancelled(SnapshotError):
    """A restore was cancelled; every copy it had started has finished before this is raised."""
