"""Map sha256 content digests to store paths; the only way a manifest value reaches a path."""

from __future__ import annotations

import re
from pathlib import Path

from snapshotter.errors import ManifestError

_DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")


def check_digest(digest: object) -> str:
    """Return `digest` if it is 64 lowercase hex characters (sha256), else raise."""
    if not isinstance(digest, str) or not _DIGEST_RE.match(digest):
        raise ManifestError(f"digest {str(digest)[:80]!r} is not a sha256 hex digest")
    return digest


def chunk_path(root: Path, digest: str) -> Path:
    """`<root>/chunks/<aa>/<digest>` for a validated digest; nothing else can escape `root`."""
    check_digest(digest)
    return root / "chunks" / digest[:2] / digest
