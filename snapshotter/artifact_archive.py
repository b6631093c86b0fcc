"""Directory trees as image artifacts: a deterministic tar to store, a checked unpack to use.

Compile caches (inductor's generated kernels, TensorRT engines and timing caches) are
directories of files. The builder packs one into an uncompressed tar with sorted names and
zeroed owners and times, so the same files always give the same bytes and digest. An archive
read back from an image is untrusted even after its digest matched (the image may have been
built hostile): `unpack_archive` accepts only regular files and directories with relative
names inside the destination, within count and size limits, extracts them into a temporary
sibling and renames that into place, so a reader never sees half a tree and nothing is written
outside `root`.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path, PurePosixPath

from snapshotter.content_address import check_digest
from snapshotter.errors import ArtifactError, ManifestError
from snapshotter.published_dir import publish_dir

UNPACKED_DIR = "unpacked"  # under a node cache: <cache>/unpacked/<archive sha256>/
MAX_MEMBERS = 100_000
MAX_UNPACKED_BYTES = 64 << 30
MAX_MEMBER_NAME = 1024


def pack_dir(root: Path, *, skip: frozenset[str] = frozenset()) -> bytes:
    """The regular files and directories under `root` as a deterministic tar (symlinks and
    special files are left out; top-level entries named in `skip` too)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if rel.parts[0] in skip or path.is_symlink():
                continue
            if not (path.is_file() or path.is_dir()):
                continue
            info = tar.gettarinfo(str(path), arcname=rel.as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            info.mode = 0o755 if path.is_dir() or info.mode & 0o100 else 0o644
            if path.is_file():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def check_member_name(name: str) -> PurePosixPath:
    """`name` as a relative path that stays inside the directory it is extracted into."""
    path = PurePosixPath(name)
    bad = (
        not name
        or len(name) > MAX_MEMBER_NAME
        or "\x00" in name
        or "\\" in name
        or path.is_absolute()
        or any(part in ("", "..") for part in path.parts)
    )
    if bad:
        raise ArtifactError(f"archive member {name!r} is not a relative path inside its root")
    return path


def _checked_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    members: list[tarfile.TarInfo] = []
    total = 0
    for info in tar:
        if len(members) >= MAX_MEMBERS:
            raise ArtifactError(f"archive has more than {MAX_MEMBERS} members")
        check_member_name(info.name)
        if not (info.isfile() or info.isdir()):
            raise ArtifactError(f"archive member {info.name!r} is not a file or a directory")
        total += info.size
        if total > MAX_UNPACKED_BYTES:
            raise ArtifactError(f"archive unpacks to more than {MAX_UNPACKED_BYTES} bytes")
        members.append(info)
    return members


def unpack_archive(data: bytes, root: Path, digest: str) -> Path:
    """Unpack the archive `data` (whose sha256 is `digest`) into `root/<digest>` and return that
    directory; an existing one (unpacked before, by any process) is returned as it is."""
    try:
        name = check_digest(digest)
    except ManifestError as exc:
        raise ArtifactError(str(exc)) from exc

    def fill(tmp: Path) -> None:
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
                members = _checked_members(tar)
                # filter="data" refuses the same things again, inside tarfile itself.
                tar.extractall(tmp, members=members, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ArtifactError(f"archive {name} cannot be unpacked: {exc}") from exc

    return publish_dir(root, name, fill, what="archive")
