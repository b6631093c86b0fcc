"""The snapshotter's bounded settings are refused in the one phrasing of thawserver.ranges."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from snapshotter import cli
from snapshotter.errors import SnapshotStoreError
from snapshotter.stores.s3_store import S3Config


@pytest.mark.parametrize("value", [0, 257])
def test_s3_parallelism_out_of_its_range(value: int) -> None:
    with pytest.raises(SnapshotStoreError) as info:
        S3Config(max_parallel=value)
    assert str(info.value) == f"`max_parallel` = {value}, must be in [1, 256]"


def test_build_chunk_size_out_of_its_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "model" / "1").mkdir(parents=True)
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(
        ["snapshot", "build", str(tmp_path / "model"), "--store", str(tmp_path / "store"),
         "--chunk-mib", "0"]
    )  # fmt: skip
    assert args.func(args) == 2  # a usage error, as the epilog's exit statuses say
    assert "`--chunk-mib` = 0, must be in [1, 4096]" in capsys.readouterr().err


@pytest.mark.parametrize("action", ["build", "pull"])
def test_host_cache_without_its_budget_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str
) -> None:
    """It was refused only once the whole image was built or pulled (exit 1, the image kept)."""
    (tmp_path / "model" / "1").mkdir(parents=True)
    cache = tmp_path / "cache"
    where = (
        [str(tmp_path / "model"), "--store", str(cache)]
        if action == "build"
        else ["model", "--store", str(tmp_path / "store"), "--cache", str(cache)]
    )
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["snapshot", action, *where, "--host-cache", str(tmp_path / "host")])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert err == f"thaw snapshot {action}: error: `--host-cache` needs `--host-cache-bytes` > 0\n"
    assert not cache.exists()


@pytest.mark.parametrize("target", ["tpu", "cuda:foo", "cuda:sm_9", "CPU"])
@pytest.mark.parametrize("action", ["build", "pull", "push", "verify"])
def test_a_target_of_no_known_form_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str, target: str
) -> None:
    """Refused by argparse (exit 2, usage), not after the work began (exit 1)."""
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    where = str(tmp_path / "model") if action == "build" else "m:1"
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["snapshot", action, where, "--store", str(tmp_path), "--target", target])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --target: {target!r} is not a target: cpu, cuda" in err


@pytest.mark.parametrize("target", ["cpu", "cuda", "cuda:sm_90", "cuda:sm_100"])
def test_each_target_form_is_taken(tmp_path: Path, target: str) -> None:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["snapshot", "pull", "m", "--store", "s", "--cache", "c",
                              "--target", target])  # fmt: skip
    assert args.target == target


def test_listing_a_directory_store_that_is_not_there_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No images, as in a new store (exit 0: `thaw up` lists its stores so), and a note on
    stderr, since a mistyped path reads the same."""
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    missing = tmp_path / "not-there"
    args = parser.parse_args(["snapshot", "ls", "--store", str(missing), "--json"])
    assert args.func(args) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "[]"
    assert f"store {missing} is not a directory: no images there" in err
    (tmp_path / "there").mkdir()
    args = parser.parse_args(["snapshot", "ls", "--store", str(tmp_path / "there")])
    assert args.func(args) == 0
    assert capsys.readouterr().err == ""
