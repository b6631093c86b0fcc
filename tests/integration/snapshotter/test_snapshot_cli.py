"""`thaw snapshot ...` as a user runs it: real subprocesses, a real S3 endpoint, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from snapshot_s3_fakes import BUCKET

pytestmark = pytest.mark.integration


def thaw(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "thaw.cli", "snapshot", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_build_push_ls_pull_verify_gc_through_s3(
    model_repo: Path, tmp_path: Path, s3_env: dict[str, str]
) -> None:
    local, s3, cache = tmp_path / "store", f"s3://{BUCKET}/cli", tmp_path / "cache"
    built = thaw("build", str(model_repo / "mlp_torchscript"), "--store", str(local))
    assert built.returncode == 0, built.stderr
    assert "built mlp_torchscript:1 (cpu)" in built.stdout

    pushed = thaw("push", "mlp_torchscript", "--from", str(local), "--store", s3, env=s3_env)
    assert pushed.returncode == 0, pushed.stderr
    listed = thaw("ls", "--store", s3, env=s3_env)
    assert listed.returncode == 0 and "mlp_torchscript" in listed.stdout
    assert "torchscript" in listed.stdout

    pulled = thaw("pull", "mlp_torchscript:1", "--store", s3, "--cache", str(cache), env=s3_env)
    assert pulled.returncode == 0, pulled.stderr
    ok = thaw("verify", "mlp_torchscript", "--cache", str(cache))
    assert ok.returncode == 0 and ok.stdout.startswith("ok mlp_torchscript:1")

    chunk = next(p for p in (cache / "chunks").glob("*/*") if not p.name.endswith(".ok"))
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 0x01
    chunk.write_bytes(bytes(data))
    bad = thaw("verify", "mlp_torchscript:1", "--cache", str(cache))
    assert bad.returncode == 1
    assert chunk.name in bad.stderr and "Traceback" not in bad.stderr

    orphan = local / "chunks" / "ab" / ("ab" * 32)
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"nobody references me")
    dry = thaw("gc", "--store", str(local), "--dry-run", "--grace-s", "0")
    assert dry.returncode == 0 and "would delete " + "ab" * 32 in dry.stdout
    assert orphan.exists()
    gc = thaw("gc", "--store", str(local), "--grace-s", "0")
    assert gc.returncode == 0 and not orphan.exists()
    assert thaw("verify", "mlp_torchscript", "--store", str(local)).returncode == 0


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["verify", "nosuchmodel", "--store", "{tmp}"], 1, "no image of 'nosuchmodel'"),
        (["verify", "../etc:1", "--store", "{tmp}"], 1, "model name '../etc' is invalid"),
        (["ls", "--store", "ftp://host/x"], 1, "use s3://bucket/prefix or a directory"),
        (["build", "{tmp}/missing", "--store", "{tmp}"], 1, "is not a directory"),
        (["build", "{tmp}", "--store", "{tmp}"], 1, "no numeric version directories"),
        (["build", "{tmp}/repo", "--store", "{tmp}"], 1, "e.g. {tmp}/repo/m)"),  # a repository
        (["pull", "m:1", "--store", "{tmp}"], 2, "--cache"),
        (["verify", "m:x", "--store", "{tmp}"], 1, "version 'x' is invalid"),
    ],
)
def test_user_errors_are_one_line_and_non_zero(
    args: list[str], code: int, message: str, tmp_path: Path
) -> None:
    (tmp_path / "repo" / "m").mkdir(parents=True)
    (tmp_path / "repo" / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    result = thaw(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.returncode == code
    assert message.replace("{tmp}", str(tmp_path)) in result.stderr
    assert "Traceback" not in result.stderr


def test_s3_without_credentials_is_a_clear_error(tmp_path: Path, fault_proxy: object) -> None:
    env = {
        "AWS_ENDPOINT_URL_S3": getattr(fault_proxy, "url", ""),
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    result = thaw("ls", "--store", f"s3://{BUCKET}/x", env=env)
    assert result.returncode == 1
    assert "credentials" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""  # no table header above an error


def test_pull_of_an_image_built_from_other_files_exits_4_saying_so(
    model_repo: Path, tmp_path: Path
) -> None:
    store, cache = tmp_path / "store", tmp_path / "cache"
    assert thaw("build", str(model_repo / "mlp_torchscript"), "--store", str(store)).returncode == 0
    other = tmp_path / "other" / "mlp_torchscript"
    (other / "1").mkdir(parents=True)
    (other / "1" / "model.pt").write_bytes(b"not the weights the image was built from")
    args = ["pull", "mlp_torchscript", "--store", str(store), "--cache", str(cache)]
    result = thaw(*args, "--source", str(other))
    assert result.returncode == 4
    assert result.stderr.startswith("thaw snapshot pull: error: mlp_torchscript:1")
    assert f"was built from other files than {other / '1'}" in result.stderr


def test_a_model_without_weight_files_exits_3_with_nothing_to_image(tmp_path: Path) -> None:
    version = tmp_path / "repo" / "tokenizer" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    result = thaw("build", str(version.parent), "--store", str(tmp_path / "store"))
    assert result.returncode == 3
    assert "nothing to image" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "store" / "images").exists()


def test_a_sharded_checkpoint_builds_pushes_and_restores_from_s3_with_its_tokenizer(
    tmp_path: Path, s3_env: dict[str, str]
) -> None:
    import numpy as np
    from s3_images import s3_store

    from snapshotter import ImageLoader
    from snapshotter.image_ref import ImageRef
    from tests.fixtures.sharded_checkpoint import make_sharded_checkpoint

    version = tmp_path / "repo" / "llm" / "1"
    tensors = make_sharded_checkpoint(version, shards=12)
    local, s3 = tmp_path / "store", f"s3://{BUCKET}/sharded"
    built = thaw("build", str(version.parent), "--store", str(local), "--chunk-mib", "1")
    assert built.returncode == 0, built.stderr
    assert f"built llm:1 (cpu): {len(tensors)} tensors" in built.stdout
    assert "from 12 shards + 5 files ->" in built.stdout
    listed = thaw("ls", "--store", str(local), "--json")
    (row,) = json.loads(listed.stdout)
    assert row["shards"] == 12 and "tokenizer.json" in row["files"]
    pushed = thaw("push", "llm", "--from", str(local), "--store", s3, env=s3_env)
    assert pushed.returncode == 0, pushed.stderr

    loader = ImageLoader(None, tmp_path / "cache", "cpu", store=s3_store("sharded"))
    image = loader.restore(ImageRef("llm", "1", "cpu"))
    assert image.source == "store"
    for name, array in tensors.items():
        assert np.array_equal(image.tensors[name], array), name
    assert image.files_dir is not None
    for name in ("tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json"):
        assert (image.files_dir / name).read_bytes() == (version / name).read_bytes()
    ok = thaw("verify", "llm", "--cache", str(tmp_path / "cache"))
    assert ok.returncode == 0 and ok.stdout.startswith("ok llm:1"), ok.stderr


def test_a_checkpoint_with_a_symlink_out_of_its_directory_is_one_line_exit_1(
    tmp_path: Path,
) -> None:
    from tests.fixtures.sharded_checkpoint import make_sharded_checkpoint

    version = tmp_path / "repo" / "llm" / "1"
    make_sharded_checkpoint(version, shards=2)
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    (version / "tokenizer.json").unlink()
    (version / "tokenizer.json").symlink_to(secret)
    result = thaw("build", str(version.parent), "--store", str(tmp_path / "store"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"is a symlink to {secret}, outside the model directory" in result.stderr
    assert not (tmp_path / "store" / "images").exists()
