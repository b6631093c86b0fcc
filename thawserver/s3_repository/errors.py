"""The one error of a model repository source (S3) that cannot be read: an `OSError`, since
to its users it is a repository that cannot be read, as a directory that cannot be."""

from __future__ import annotations

__all__ = ["RepositorySourceError"]


class RepositorySourceError(OSError):
    """A repository URL, object key, credential file or S3 answer that cannot be used; the
    message says which and why (never a secret)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message
