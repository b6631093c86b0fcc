"""Drift detector: at zero replicas the activator answers model metadata and config itself,
completing configs with `tritonconfig` and rendering metadata with `thawwire.metadata` (the
code a replica runs too) on its own path (its repository scan, completion flags, error
mapping), which is what can still drift. For every model of the test fixture
repositories, some configs that lean on completion, and the example repository, those answers
must be a `thaw serve` replica's, byte for byte, and a model a replica refuses must be one the
activator refuses too. A python model with its own `auto_complete_config` is the exception that
asks a replica once (activator.fleet.replica_config): its answers must be that replica's too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from tritonclient.grpc import model_config_pb2 as mc

from activator.config import ActivatorConfig
from activator.surfaces.app import build_app
from tests.fakes.scaler_backend import FakeScalerBackend
from tests.fixtures import models, onnx_models, torch_models
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]

HOOKED = "python_hook"  # completed by its own code: asks a replica once
_AUTO_COMPLETE_HOOK = """
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input(
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]})
        auto_complete_model_config.add_output(
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]})
        return auto_complete_model_config
"""


def _config(model_dir: Path, text: str) -> Path:
    (model_dir / "config.pbtxt").write_text(textwrap.dedent(text).lstrip())
    return model_dir


def _io(dims: str = "-1", extra: str = "") -> str:
    return (
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {dims} ] {extra} }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n'
    )


def _fixture_models(repo: Path) -> None:
    """Every builder of tests/fixtures, as the test suites call them."""
    models.make_add_sub(repo)
    models.make_add_sub(repo, "add_sub_batched", max_batch_size=8, instance_count=2)
    models.make_python_identity(repo)
    models.make_python_identity(repo, "identity_bytes", data_type="TYPE_STRING", dims=(1,))
    models.make_execute_error(repo)
    models.make_slow_init(repo, delay_s=0.0)
    models.make_slow_execute(repo)
    onnx_models.make_onnx_identity(repo)
    onnx_models.make_identity_fp32(repo)
    onnx_models.make_onnx_add(repo)
    torch_models.make_torchscript_add(repo)
    torch_models.make_torchscript_linear(repo)
    # One torch.export model: `thaw serve` loading two at once can fail in torch's
    # deserializer (`_CURRENT_DESERIALIZER is already set`, seen once), a runtime matter.
    torch_models.make_torch_export_add(repo)
    models.make_slow_request(repo)
    models.make_always_raises(repo)
    onnx_models.make_onnx_a_plus_b(repo)
    torch_models.make_torchscript_scale(repo)


def _completion_cases(repo: Path) -> None:
    """Configs whose answers come mostly from completion, and configs a replica refuses."""
    # No config.pbtxt at all: ONNX auto-complete (batchable -> max_batch_size 4, batcher).
    onnx_models.make_onnx_identity(repo, "onnx_no_config", with_config=False)
    # Backend only, no tensors; a platform with max_batch_size and no tensors.
    _config(onnx_models.make_onnx_identity(repo, "onnx_backend_only"), 'backend: "onnxruntime"\n')
    _config(
        onnx_models.make_onnx_identity(repo, "onnx_batch_no_io"),
        'platform: "onnxruntime_onnx"\nmax_batch_size: 16\n',
    )
    # Neither platform nor backend: from the file; batcher without preferred sizes; KIND_AUTO.
    _config(
        onnx_models.make_onnx_identity(repo, "onnx_from_file"),
        "max_batch_size: 8\n" + _io() + "dynamic_batching { }\ninstance_group [ { count: 2 } ]\n",
    )
    # Several versions: latest 2 of 3; specific 1 and 3 of 3.
    latest = onnx_models.make_onnx_identity(repo, "onnx_latest_two")
    for version in ("2", "3"):
        shutil.copytree(latest / "1", latest / version)
    with (latest / "config.pbtxt").open("a") as f:
        f.write("version_policy: { latest { num_versions: 2 } }\n")
    specific = models.make_python_identity(repo, "python_specific", max_batch_size=4)
    for version in ("2", "3"):
        shutil.copytree(specific / "1", specific / version)
    with (specific / "config.pbtxt").open("a") as f:
        f.write("version_policy: { specific { versions: [ 1, 3 ] } }\n")
    # Reshape, sequence batcher, named group, thaw.* parameters.
    _config(
        models.make_python_identity(repo, "python_reshape"),
        'backend: "python"\n'
        + _io("4", "reshape: { shape: [ 2, 2 ] }")
        + 'parameters { key: "thaw.max_replicas" value { string_value: "3" } }\n',
    )
    _config(
        models.make_python_identity(repo, "python_sequence"),
        'backend: "python"\nmax_batch_size: 2\n'
        + _io()
        + "sequence_batching { max_sequence_idle_microseconds: 5000000 }\n"
        + 'instance_group [ { kind: KIND_CPU count: 1 name: "group" } ]\n',
    )
    # A python model's own auto_complete_config(): asked of a replica (the last test).
    hooked = models.make_python_identity(repo, HOOKED)
    source = (hooked / "1" / "model.py").read_text()
    hook = textwrap.indent(textwrap.dedent(_AUTO_COMPLETE_HOOK), "    ")
    (hooked / "1" / "model.py").write_text(
        source.replace("class TritonPythonModel:\n", "class TritonPythonModel:\n" + hook)
    )
    _config(hooked, 'backend: "python"\n')
    # Refused by a replica, so unavailable at the activator too.
    _config(models.make_python_identity(repo, "refused_dims"), 'backend: "python"\n' + _io("0"))
    _config(
        onnx_models.make_onnx_identity(repo, "refused_mismatch"),
        'platform: "onnxruntime_onnx"\nbackend: "pytorch"\n' + _io("-1, -1"),
    )
    _config(models.make_python_identity(repo, "refused_backend"), 'backend: "tensorflow"\n' + _io())
    _config(
        models.make_python_identity(repo, "refused_versions"),
        'backend: "python"\n' + _io() + "version_policy: { specific { versions: [ 7 ] } }\n",
    )
    _config(
        models.make_python_identity(repo, "refused_duplicate"),
        'backend: "python"\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] },'
        ' { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n',
    )


@contextmanager
def _serve(repo: Path, *args: str) -> Iterator[ServeProcess]:
    server = ServeProcess(repo, *args)
    try:
        server.wait_listening()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # every model loaded or refused
            if all(m.get("state") in ("READY", "UNAVAILABLE") for m in _index(server)):
                break
            time.sleep(0.1)
        yield server
    finally:
        server.stop()


def _map_fields(desc: Any, found: set[str]) -> set[str]:
    """Names of the ModelConfig's map fields (protobuf leaves their order unspecified)."""
    for field in desc.fields:
        sub = field.message_type
        if sub is not None and sub.GetOptions().map_entry:
            found.add(field.name)
        elif sub is not None and sub is not desc and sub.full_name.startswith("inference."):
            _map_fields(sub, found)
    return found


MAP_FIELDS = _map_fields(mc.ModelConfig.DESCRIPTOR, set())


def _ordered(value: Any, key: str = "") -> Any:
    """JSON as an order-sensitive structure, except inside map fields."""
    if isinstance(value, dict):
        items = [(k, _ordered(v, k)) for k, v in value.items()]
        return ("map", sorted(items)) if key in MAP_FIELDS else ("obj", items)
    if isinstance(value, list):
        return [_ordered(v) for v in value]
    return value


def _same(want: bytes, got: bytes) -> bool:
    """Byte for byte, but for the order of map entries, which is arbitrary in every process."""
    if want == got:
        return True
    try:
        return bool(_ordered(json.loads(want)) == _ordered(json.loads(got)))
    except ValueError:
        return False


def _model_names(repo: Path) -> list[str]:
    return sorted(p.name for p in repo.iterdir() if p.is_dir() and not p.name.startswith("."))


async def _get(s: aiohttp.ClientSession, url: str) -> tuple[int, bytes]:
    async with s.get(url) as r:
        return r.status, await r.read()


async def _compare(
    repo: Path,
    names: list[str],
    replica: ServeProcess,
    backend: FakeScalerBackend | None = None,
    *,
    default_max_batch_size: int = 4,
) -> list[str]:
    """Every metadata and config answer of both, per model and per served version. Without
    `backend`, answered at zero replicas: any start fails the test."""
    config = ActivatorConfig(
        repository=repo, build_images=False, default_max_batch_size=default_max_batch_size
    )
    never_starts = FakeScalerBackend(open_gate=True, fail_with="the parity test must not wake")
    app = build_app(config, backend=backend or never_starts)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    diffs: list[str] = []
    try:
        up = str(server.make_url("")).rstrip("/")
        async with aiohttp.ClientSession() as s:
            for name in names:
                _, meta = await _get(s, f"{replica.url}/v2/models/{name}")
                versions = json.loads(meta).get("versions", [])
                paths = [f"/v2/models/{name}", f"/v2/models/{name}/config"]
                for version in versions:
                    paths += [f"/v2/models/{name}/versions/{version}"]
                    paths += [f"/v2/models/{name}/versions/{version}/config"]
                for path in paths:
                    want_status, want = await _get(s, replica.url + path)
                    status, got = await _get(s, up + path)
                    if want_status == 200 and not (status == 200 and _same(want, got)):
                        diffs.append(f"{path}: replica {want!r}\n  activator {status} {got!r}")
                    elif want_status != 200 and status == 200:
                        diffs.append(f"{path}: replica refuses ({want!r}), activator serves it")
    finally:
        await server.close()
    return diffs


def _index(replica: ServeProcess) -> list[dict[str, Any]]:
    request = urllib.request.Request(replica.url + "/v2/repository/index", data=b"{}")
    with urllib.request.urlopen(request, timeout=10) as resp:
        index: list[dict[str, Any]] = json.load(resp)
        return index


@pytest.fixture(scope="module")
def fixture_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("parity_repo")
    _fixture_models(repo)
    _completion_cases(repo)
    return repo


@pytest.fixture(scope="module")
def fixture_replica(fixture_repo: Path) -> Iterator[ServeProcess]:
    with _serve(fixture_repo) as replica:
        yield replica


async def test_fixture_models_answer_as_a_replica_does(
    fixture_repo: Path, fixture_replica: ServeProcess
) -> None:
    names = [n for n in _model_names(fixture_repo) if n != HOOKED]
    diffs = await _compare(fixture_repo, names, fixture_replica)
    assert not diffs, "\n".join(diffs)


def test_each_compared_model_really_was_served_or_refused(
    fixture_repo: Path, fixture_replica: ServeProcess
) -> None:
    """The comparison is only as good as what the replica loaded: none may fail by accident."""
    refused = {m["name"] for m in _index(fixture_replica) if m["state"] != "READY"}
    assert refused == {n for n in _model_names(fixture_repo) if n.startswith("refused_")}


async def test_python_auto_complete_config_is_a_replicas(
    fixture_repo: Path, fixture_replica: ServeProcess
) -> None:
    """Its config runs its code: the activator wakes it once (a replica that is the running
    `thaw serve`) and answers every later config and metadata from what that replica said."""
    wakes_to_replica = FakeScalerBackend(url=fixture_replica.url, open_gate=True)
    diffs = await _compare(fixture_repo, [HOOKED], fixture_replica, wakes_to_replica)
    assert not diffs, "\n".join(diffs)
    assert wakes_to_replica.starts == 1


async def test_default_max_batch_size_completes_configs_as_the_replica_does(
    tmp_path: Path,
) -> None:
    """`thaw up --backend-config=onnxruntime,default-max-batch-size=N` gives its replicas the
    flag and completes its own answers with N: at zero they must be the replica's."""
    onnx_models.make_onnx_identity(tmp_path, "auto", with_config=False)
    _config(onnx_models.make_onnx_identity(tmp_path, "given"), "max_batch_size: 3\n")
    for n in (7, 1):
        with _serve(tmp_path, f"--backend-config=onnxruntime,default-max-batch-size={n}") as r:
            config = json.loads(await _replica_config(r, "auto"))
            assert config["max_batch_size"] == n
            assert ("dynamic_batching" in config) is (n > 1)
            diffs = await _compare(tmp_path, ["auto", "given"], r, default_max_batch_size=n)
            assert not diffs, "\n".join(diffs)


async def _replica_config(replica: ServeProcess, name: str) -> bytes:
    async with aiohttp.ClientSession() as s:
        return (await _get(s, f"{replica.url}/v2/models/{name}/config"))[1]


@pytest.fixture(scope="module")
def example_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("examples") / "repo"
    script = ROOT / "examples" / "generate_repository.py"
    subprocess.run(
        [sys.executable, str(script), str(out), "--small"],
        check=True,
        timeout=300,
        capture_output=True,
    )
    return out


@pytest.mark.slow
async def test_example_models_answer_as_a_replica_does(example_repo: Path) -> None:
    with _serve(example_repo) as replica:
        diffs = await _compare(example_repo, _model_names(example_repo), replica)
        assert not diffs, "\n".join(diffs)
