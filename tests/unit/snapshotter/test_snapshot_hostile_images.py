"""Hostile image files on disk: a manifest or chunk that is a FIFO, a device or a huge claim.

Each is refused with a SnapshotError (the runtime then loads the model's files) within a
deadline, never a hang, an unbounded read or a MemoryError. Cases that hung or filled memory
before the fix run in a child process with a timeout and an address-space limit, so a
regression fails the test instead of hanging the suite or the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from snapshotter import ImageLoader, SnapshotError, build_image
from snapshotter.image_ref import ImageRef
from snapshotter.stores.dir_store import DirStore
from tests.fixtures.safetensors_files import write_safetensors

REF = ImageRef("m", "1", "cpu")
CHILD_TIMEOUT_S = 60
TB = 1 << 40

# Restores REF from the directory store argv[1] (cache argv[2]) with its address space limited
# to 2 GiB, and prints what `find` and `restore` gave.
_CHILD = """
import resource, sys
from snapshotter import ImageLoader, SnapshotError
loader = ImageLoader(sys.argv[1], sys.argv[2], "cpu")
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
ref = loader.find("m", "1", None)
if ref is None:
    print("find: none")
else:
    try:
        loader.restore(ref)
        print("restore: ok")
    except SnapshotError as exc:
        print("restore:", type(exc).__name__, exc)
hwm = [ln for ln in open("/proc/self/status") if ln.startswith("VmHWM")][0].split()[1]
print("peak_kib", hwm)
"""


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A directory store holding one real image, `m` version 1 (two chunks)."""
    version = tmp_path / "repo" / "m" / "1"
    version.mkdir(parents=True)
    rng = np.random.default_rng(0)
    arrays = {"w": rng.standard_normal((300, 64)).astype(np.float32), "b": np.ones(64, np.float32)}
    write_safetensors(
        version / "model.safetensors",
        {n: ("F32", a.shape, a.tobytes()) for n, a in arrays.items()},
    )
    build_image(version, DirStore(tmp_path / "store"), max_chunk_bytes=64 << 10)
    return tmp_path / "store"


def _manifest_path(store: Path) -> Path:
    return store / REF.key / "manifest.json"


def _restore_in_child(store: Path, cache: Path) -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(store), str(cache)],
        capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
        cwd=Path(__file__).resolve().parents[3],
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return dict(line.split(" ", 1) for line in out.stdout.splitlines())


def test_the_good_image_restores_in_the_child(store: Path, tmp_path: Path) -> None:
    """The baseline of the cases below: the same child restores the untouched image."""
    assert _restore_in_child(store, tmp_path / "cache")["restore:"] == "ok"


def test_a_manifest_that_is_a_fifo_is_refused_not_waited_on(store: Path, tmp_path: Path) -> None:
    path = _manifest_path(store)
    path.unlink()
    os.mkfifo(path)
    assert _restore_in_child(store, tmp_path / "cache")["find:"] == "none"


def test_a_manifest_linked_to_dev_zero_is_refused_without_reading_it(
    store: Path, tmp_path: Path
) -> None:
    path = _manifest_path(store)
    path.unlink()
    path.symlink_to("/dev/zero")
    assert _restore_in_child(store, tmp_path / "cache")["find:"] == "none"


def test_a_huge_manifest_file_is_refused_by_its_size(store: Path) -> None:
    path = _manifest_path(store)
    with path.open("r+b") as f:
        f.truncate(1 << 40)  # sparse: 1 TB that reading whole would need in memory
    with pytest.raises(SnapshotError, match="over"):
        DirStore(store).read_manifest(REF)
    assert ImageLoader(str(store), None, "cpu").find("m", "1", None) is None


def test_a_chunk_that_is_a_fifo_fails_the_restore_not_hangs_it(store: Path, tmp_path: Path) -> None:
    doc = json.loads(_manifest_path(store).read_bytes())
    chunk = store / "chunks" / doc["chunks"][0]["digest"][:2] / doc["chunks"][0]["digest"]
    chunk.unlink()
    os.mkfifo(chunk)
    got = _restore_in_child(store, tmp_path / "cache")
    assert got["restore:"].startswith("IntegrityError") and "not a regular file" in got["restore:"]


@pytest.mark.parametrize("field", ["artifacts", "files"])
def test_a_blob_claiming_a_terabyte_is_a_snapshot_error(
    store: Path, tmp_path: Path, field: str
) -> None:
    """Before: `bytearray(1 TB)` raised MemoryError, which the runtime takes for a bug and
    fails the load instead of loading the model's files."""
    _claim_blob(store, field, TB)
    loader = ImageLoader(str(store), tmp_path / "cache", "cpu")
    ref = loader.find("m", "1", None)
    assert ref is not None
    with pytest.raises(SnapshotError, match="cannot allocate"):
        loader.restore(ref)


def test_a_blob_claiming_a_gigabyte_touches_no_memory_for_it(store: Path, tmp_path: Path) -> None:
    """A claim is only a claim until the store's bytes match it: memory is not filled for it
    (before: 1 GiB zeroed before the missing blob was even looked for)."""
    _claim_blob(store, "artifacts", 1 << 30)
    got = _restore_in_child(store, tmp_path / "cache")
    assert got["restore:"].startswith("IntegrityError")
    assert int(got["peak_kib"]) < 512 << 10, got  # the child itself is ~100 MiB


def _claim_blob(store: Path, field: str, size: int) -> None:
    path = _manifest_path(store)
    doc = json.loads(path.read_bytes())
    claim = {"digest": "e" * 64, "size": size}
    if field == "files":
        doc.update(format_version=3, shards=[], files={"tokenizer.json": claim})
    else:
        doc["artifacts"] = {"engine": claim}
    path.write_bytes(json.dumps(doc).encode())


RACE_S = 5.0


def test_a_chunk_replaced_while_restores_read_it_is_never_served_unchecked(
    store: Path, tmp_path: Path
) -> None:
    """A thread keeps replacing a cached chunk file by one of other bytes and back (rename
    over it) while restores read it. Every restore gives the image's bytes or an error.
    Before: the marker was checked on the path before the read (and written for the path
    after the hash), so a file put there in between was served as verified: 73 and 77 of
    ~2 000 restores in two 20 s runs returned wrong weights."""
    cache = store  # the image's directory as a node cache (no store: a chunk found corrupt
    loader = ImageLoader(None, cache, "cpu")  # is deleted and the restore fails)
    expected = {n: a.copy() for n, a in loader.restore(REF).tensors.items()}
    doc = json.loads(_manifest_path(store).read_bytes())
    digest = max(doc["chunks"], key=lambda c: c["size"])["digest"]
    chunk = cache / "chunks" / digest[:2] / digest
    good = chunk.read_bytes()
    bad = bytes(b ^ 0xFF for b in good)
    stop = threading.Event()

    def replace() -> None:
        tmp = chunk.with_name(".swap")
        while not stop.is_set():
            for data in (bad, good):
                with contextlib.suppress(OSError):
                    tmp.write_bytes(data)
                    os.replace(tmp, chunk)
            time.sleep(0.002)

    swapper = threading.Thread(target=replace, daemon=True)
    swapper.start()
    served = wrong = 0
    deadline = time.monotonic() + RACE_S
    try:
        while time.monotonic() < deadline:
            try:
                image = loader.restore(REF)
            except SnapshotError:
                continue  # the chunk was found corrupt (deleted) or missing: refused, fine
            served += 1
            wrong += any(not np.array_equal(image.tensors[n], a) for n, a in expected.items())
    finally:
        stop.set()
        swapper.join(10)
    assert served > 0
    assert wrong == 0, f"{wrong} of {served} restores served the replacing file's bytes"
