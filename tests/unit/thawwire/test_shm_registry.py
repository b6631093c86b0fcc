"""The shared-memory registry: Triton's texts, bounds, hostile keys, in-use regions, objects a
client truncates, the region cap; and the tensor parameters that name regions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from thawserver.shm_registry import SystemSharedMemory
from thawwire.errors import ErrorKind, SharedMemoryError
from thawwire.grpc_service import pb
from thawwire.shm_params import (
    ShmRef,
    check_input_size,
    check_json_input,
    check_json_output,
    grpc_ref,
    json_ref,
    names_shared_memory,
)


def _object(tmp_path: Path, name: str, size: int) -> str:
    (tmp_path / name).write_bytes(bytes(range(256))[:size].ljust(size, b"\0"))
    return "/" + name


@pytest.fixture
def registry(tmp_path: Path) -> SystemSharedMemory:
    return SystemSharedMemory(shm_dir=tmp_path, max_regions=3)


def test_register_status_read_write_unregister(
    registry: SystemSharedMemory, tmp_path: Path
) -> None:
    key = _object(tmp_path, "obj", 64)
    registry.register("r", key, 16, 32)
    assert registry.status() == [{"name": "r", "key": key, "offset": 16, "byte_size": 32}]
    lease = registry.lease(ShmRef("r", 4, 8))
    assert lease.read() == bytes(range(20, 28))  # region offset 16 + reference offset 4
    lease.write(b"\xff" * 8, output="O")
    assert (tmp_path / "obj").read_bytes()[20:28] == b"\xff" * 8
    assert (tmp_path / "obj").read_bytes()[19] == 19 and (tmp_path / "obj").read_bytes()[28] == 28
    lease.release()
    registry.unregister("r")
    registry.unregister("r")  # nothing to do: not an error (Triton's rule)
    assert registry.status() == []


@pytest.mark.parametrize(("offset", "size"), [(0, 65), (1, 64), (64, 1), (65, 0), (2**63, 1)])
def test_a_registration_outside_the_object_is_invalid(
    registry: SystemSharedMemory, tmp_path: Path, offset: int, size: int
) -> None:
    key = _object(tmp_path, "obj", 64)
    with pytest.raises(
        SharedMemoryError, match="failed to register shared memory region 'x': invalid args"
    ) as info:
        registry.register("x", key, offset, size)
    assert info.value.kind is ErrorKind.INVALID_ARG
    assert len(registry) == 0


@pytest.mark.parametrize(("offset", "size"), [(0, 0), (64, 0)])
def test_a_registration_of_no_bytes_is_refused_in_tritons_words(
    registry: SystemSharedMemory, tmp_path: Path, offset: int, size: int
) -> None:
    # Triton 2.51 maps the region and mmap refuses no bytes: its text, as observed
    key = _object(tmp_path, "obj", 64)
    with pytest.raises(SharedMemoryError) as info:
        registry.register("x", key, offset, size)
    assert info.value.message == (
        "failed to register shared memory region 'x': unable to process address spaceInvalid "
        "argument"
    )
    assert info.value.kind is ErrorKind.INVALID_ARG
    assert len(registry) == 0


@pytest.mark.parametrize(
    "key", ["/../etc/passwd", "/a/b", "..", "/", "", "/.", "a\0b", "/" + "n" * 300]
)
def test_keys_name_one_object_in_the_directory(registry: SystemSharedMemory, key: str) -> None:
    with pytest.raises(SharedMemoryError, match="Unable to open shared memory region"):
        registry.register("x", key, 0, 1)


def test_links_directories_and_missing_objects_are_refused(
    registry: SystemSharedMemory, tmp_path: Path
) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_bytes(b"secret!!")
    (tmp_path / "link").symlink_to(outside)
    (tmp_path / "dir").mkdir()
    for key in ("/link", "/dir", "/missing"):
        with pytest.raises(
            SharedMemoryError, match=f"Unable to open shared memory region: '{key}'"
        ):
            registry.register("x", key, 0, 1)
    assert len(registry) == 0


def test_duplicates_and_the_cap(registry: SystemSharedMemory, tmp_path: Path) -> None:
    key = _object(tmp_path, "obj", 8)
    registry.register("a", key, 0, 8)
    with pytest.raises(
        SharedMemoryError, match="shared memory region 'a' already in manager"
    ) as info:
        registry.register("a", key, 0, 8)
    assert info.value.kind is ErrorKind.ALREADY_EXISTS
    registry.register("b", key, 0, 8)
    registry.register("c", key, 0, 8)
    with pytest.raises(SharedMemoryError, match="3 regions are registered already"):
        registry.register("d", key, 0, 8)
    with pytest.raises(SharedMemoryError, match="invalid shared memory region name"):
        registry.register("", key, 0, 8)


def test_references_are_bounds_checked_in_triton_words(
    registry: SystemSharedMemory, tmp_path: Path
) -> None:
    registry.register("r", _object(tmp_path, "obj", 64), 0, 64)
    with pytest.raises(SharedMemoryError, match="Unable to find shared memory region: 'nope'"):
        registry.lease(ShmRef("nope", 0, 1))
    with pytest.raises(SharedMemoryError, match="Invalid offset for shared memory region: 'r'"):
        registry.lease(ShmRef("r", 2**64 - 32, 16))
    with pytest.raises(
        SharedMemoryError, match=r"Invalid offset \+ byte size for shared memory region: 'r'"
    ):
        registry.lease(ShmRef("r", 60, 64))
    lease = registry.lease(ShmRef("r", 56, 8))
    with pytest.raises(
        SharedMemoryError, match=r"for output 'O' \(8 bytes\) should be at least 9 bytes"
    ):
        lease.write(b"x" * 9, output="O")
    lease.release()


def test_a_region_in_use_is_not_unregistered(registry: SystemSharedMemory, tmp_path: Path) -> None:
    key = _object(tmp_path, "obj", 8)
    for name in ("b", "a", "c"):
        registry.register(name, key, 0, 8)
    held = [registry.lease(ShmRef("a", 0, 8)), registry.lease(ShmRef("c", 0, 8))]
    with pytest.raises(
        SharedMemoryError,
        match=r"Cannot unregister shared memory region 'a', it is currently in use\.",
    ):
        registry.unregister("a")
    with pytest.raises(
        SharedMemoryError,
        match="Failed to unregister the following system shared memory regions: a ,c ,",
    ):
        registry.unregister_all()
    assert [row["name"] for row in registry.status()] == ["a", "c"]  # b was free: gone
    for lease in held:
        lease.release()
        lease.release()  # once counts
    registry.unregister_all()
    assert registry.status() == []


def test_an_object_truncated_after_registering_is_a_refusal(
    registry: SystemSharedMemory, tmp_path: Path
) -> None:
    registry.register("r", _object(tmp_path, "obj", 64), 0, 64)
    lease = registry.lease(ShmRef("r", 32, 32))
    os.truncate(tmp_path / "obj", 40)
    with pytest.raises(SharedMemoryError, match="was truncated"):
        lease.read()
    with pytest.raises(SharedMemoryError, match="was truncated"):
        lease.write(b"x", output="O")
    lease.release()


def test_unregister_and_close_close_the_descriptors(
    registry: SystemSharedMemory, tmp_path: Path
) -> None:
    before = len(os.listdir("/proc/self/fd"))
    key = _object(tmp_path, "obj", 8)
    registry.register("a", key, 0, 8)
    registry.register("b", key, 0, 8)
    assert len(os.listdir("/proc/self/fd")) == before + 2
    registry.unregister("a")
    registry.close()
    assert len(os.listdir("/proc/self/fd")) == before


def test_json_parameters() -> None:
    ref = json_ref({"shared_memory_region": "r", "shared_memory_byte_size": 8}, "I")
    assert ref == ShmRef("r", 0, 8)
    assert json_ref({"binary_data_size": 3}, "I") is None
    far = {"shared_memory_region": "r", "shared_memory_byte_size": 8}
    far["shared_memory_offset"] = 2**64 - 32
    assert json_ref(far, "I") == ShmRef("r", 2**64 - 32, 8)
    region = {"shared_memory_region": "r"}
    bad = [
        ({"shared_memory_region": 3, "shared_memory_byte_size": 8}, "parse 'shared_memory_region'"),
        (region | {"shared_memory_byte_size": -1}, "Unable to parse 'shared_memory_byte_size'"),
        (far | {"shared_memory_offset": 1.5}, "Unable to parse 'shared_memory_offset'"),
        (region, "'shared_memory_byte_size' must be specified along with"),
        ({"shared_memory_byte_size": 8}, "can not be specified without 'shared_memory_region'"),
    ]
    for params, text in bad:
        with pytest.raises(SharedMemoryError, match=text):
            json_ref(params, "I")
    with pytest.raises(SharedMemoryError, match="But set 'data' 'shared_memory_region'"):
        check_json_input({"data": [1]}, {}, "I")
    with pytest.raises(SharedMemoryError, match="'classification'"):
        check_json_output({"classification": 2})
    with pytest.raises(SharedMemoryError, match="'binary_data'"):
        check_json_output({"binary_data": True})
    with pytest.raises(SharedMemoryError, match="Expected 64, got 128"):
        check_input_size(ShmRef("r", 0, 128), "INPUT1", "INT32", [1, 16], "simple")
    check_input_size(ShmRef("r", 0, 3), "S", "BYTES", [1], "m")  # BYTES: any size


def test_grpc_parameters() -> None:
    tensor = pb.ModelInferRequest().inputs.add(name="I")
    assert grpc_ref(tensor.parameters, "I") is None
    tensor.parameters["shared_memory_region"].string_param = "r"
    with pytest.raises(SharedMemoryError, match="must be specified along with"):
        grpc_ref(tensor.parameters, "I")
    tensor.parameters["shared_memory_byte_size"].string_param = "8"
    with pytest.raises(SharedMemoryError, match="expected int64_param"):
        grpc_ref(tensor.parameters, "I")
    tensor.parameters["shared_memory_byte_size"].int64_param = 8
    tensor.parameters["shared_memory_offset"].int64_param = 4
    assert grpc_ref(tensor.parameters, "I") == ShmRef("r", 4, 8)
    tensor.parameters["shared_memory_offset"].int64_param = -1
    with pytest.raises(SharedMemoryError, match="'shared_memory_offset' parameter for tensor 'I'"):
        grpc_ref(tensor.parameters, "I")
    tensor.parameters["shared_memory_offset"].int64_param = 0
    tensor.parameters["shared_memory_region"].int64_param = 1
    with pytest.raises(SharedMemoryError, match="expected string_param"):
        grpc_ref(tensor.parameters, "I")


def test_the_byte_search_looks_at_the_header_only() -> None:
    body = b'{"inputs":[]}' + b"shared_memory_region"
    assert names_shared_memory(body)
    assert not names_shared_memory(body, 13)
    assert not names_shared_memory(b'{"inputs":[{"data":[1]}]}')
