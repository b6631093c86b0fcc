"""A config's `model_repository_agents`: Triton's checksum agent built in, its words for each
failure (triton-inference-server/checksum_repository_agent's src/checksum.cc), every other
agent refused as tritonserver refuses one whose library is missing."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from tritonconfig import ModelConfigError, parse_config, run_repository_agents
from tritonconfig.repository_agents import verify_checksums


def _md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


@pytest.fixture()
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.onnx").write_bytes(b"weights" * 1000)
    (tmp_path / "data_file").write_bytes(b"")
    return tmp_path


def _agents(text: str) -> str:
    return f'name: "m"\nmodel_repository_agents {{ agents [ {text} ] }}\n'


def test_matching_digests_pass_and_a_mismatch_is_refused_in_the_agents_words(
    model_dir: Path,
) -> None:
    good = _md5(b"weights" * 1000)
    verify_checksums({"MD5:1/model.onnx": good, "md5:data_file": _md5(b"")}, model_dir)
    with pytest.raises(ModelConfigError) as caught:
        verify_checksums({"MD5:1/model.onnx": "invalid_checksum"}, model_dir)
    assert caught.value.message == (
        f"Mismatched MD5 hash for file 1/model.onnx, expect: invalid_checksum, got: {good}"
    )
    with pytest.raises(ModelConfigError, match="expect: " + good.upper()):
        verify_checksums({"MD5:1/model.onnx": good.upper()}, model_dir)  # compared as written


def test_a_file_larger_than_one_read_is_hashed_whole(tmp_path: Path) -> None:
    data = os.urandom((1 << 20) * 2 + 17)
    (tmp_path / "big").write_bytes(data)
    verify_checksums({"MD5:big": _md5(data)}, tmp_path)
    with pytest.raises(ModelConfigError, match="Mismatched"):
        verify_checksums({"MD5:big": _md5(data[:-1])}, tmp_path)


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("1/model.onnx", "failed to parse key: 1/model.onnx"),
        ("SHA256:1/model.onnx", "Unsupported checksum algorithm: SHA256"),
        (":1/model.onnx", "Unsupported checksum algorithm: "),
        ("MD5:missing", "failed to open text file for read missing: No such file or directory"),
        ("MD5:1", "failed to open text file for read 1: not a regular file"),
        (
            "MD5:../m/1/model.onnx",
            "failed to open text file for read ../m/1/model.onnx: the path leaves the model "
            "directory",
        ),
    ],
)
def test_each_refusal_in_the_agents_words(model_dir: Path, key: str, words: str) -> None:
    with pytest.raises(ModelConfigError) as caught:
        verify_checksums({key: "x"}, model_dir)
    assert caught.value.message == words


def test_a_leading_slash_stays_in_the_model_directory(model_dir: Path) -> None:
    """Triton reads `<model dir>/<path>`: `/data_file` is the model's own file."""
    verify_checksums({"MD5:/data_file": _md5(b"")}, model_dir)
    with pytest.raises(ModelConfigError, match="read /etc/hostname: No such file"):
        verify_checksums({"MD5:/etc/hostname": "x"}, model_dir)


def test_a_fifo_is_refused_without_blocking(model_dir: Path) -> None:
    os.mkfifo(model_dir / "pipe")
    outcome: list[str] = []

    def check() -> None:
        try:
            verify_checksums({"MD5:pipe": "x"}, model_dir)
        except ModelConfigError as exc:
            outcome.append(exc.message)

    thread = threading.Thread(target=check, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert outcome == ["failed to open text file for read pipe: not a regular file"]


def test_the_agents_of_a_parsed_config_run_in_its_order(model_dir: Path) -> None:
    ok = _md5(b"weights" * 1000)
    run_repository_agents(parse_config('name: "m"\n', "c"), model_dir)  # none named
    checksum = (
        f'{{ name: "checksum", parameters [ {{ key: "MD5:1/model.onnx", value: "{ok}" }} ] }}'
    )
    run_repository_agents(parse_config(_agents(checksum), "c"), model_dir)
    both = parse_config(_agents(checksum + ', { name: "decrypt" }'), "c")
    with pytest.raises(ModelConfigError) as caught:
        run_repository_agents(both, model_dir)
    assert caught.value.message == (
        "unable to find 'libtritonrepoagent_decrypt.so' for repo agent 'decrypt', searched: "
        "thaw's built-in repository agents (checksum)"
    )
    bad_first = parse_config(
        _agents('{ name: "checksum", parameters [ { key: "MD5:data_file", value: "no" } ] }, '
                '{ name: "decrypt" }'),
        "c",
    )  # fmt: skip
    with pytest.raises(ModelConfigError, match="Mismatched MD5 hash for file data_file"):
        run_repository_agents(bad_first, model_dir)


def test_a_long_key_is_cut_in_the_message(model_dir: Path) -> None:
    with pytest.raises(ModelConfigError) as caught:
        verify_checksums({"x" * 10_000: "v"}, model_dir)
    assert caught.value.message == "failed to parse key: " + "x" * 200 + "..."
