"""A TorchScript model takes BYTES as `List[str]` and returns `List[str]` as BYTES, as in
Triton's libtorch backend; what cannot travel that way gets a clear error, at load or per
request (backends/torch_strings.py through the torch backend and the model manager)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from runtime.backends.torch_strings import check_string_io
from runtime.config import ServeConfig
from runtime.errors import InvalidInput, RepositoryError, ServingError
from runtime.inference import InferRequest, InferTensor
from runtime.model_config import parse_config
from runtime.models.manager import ModelManager
from runtime.observe.metrics import Metrics
from tests.fixtures.torch_string_models import (
    make_torch_string_batched,
    make_torch_string_ints,
    make_torch_string_shout,
    make_torch_string_tensor_out,
)

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("strings")
    make_torch_string_shout(root)
    make_torch_string_batched(root)
    make_torch_string_ints(root)
    make_torch_string_tensor_out(root)
    return root


@pytest.fixture
async def manager(repo: Path) -> AsyncIterator[ModelManager]:
    mgr = ModelManager(ServeConfig(repository=repo), metrics=Metrics())
    await mgr.start()
    yield mgr
    await mgr.stop()


def _strings(name: str, *items: bytes, shape: tuple[int, ...] | None = None) -> InferTensor:
    data = np.empty(len(items), dtype=np.object_)
    data[:] = list(items)
    shape = shape or (len(items),)
    return InferTensor(name, "BYTES", shape, data.reshape(shape))


async def test_strings_go_in_as_a_list_and_come_back_as_bytes(manager: ModelManager) -> None:
    text = _strings("INPUT__0", "café".encode(), b"", b"x y")
    response = await manager.infer(InferRequest("torch_string_shout", "", [text]))
    shouted, lengths = response.outputs
    assert shouted.datatype == "BYTES"
    assert shouted.shape == (3,)
    # UTF-8 both ways (TorchScript's `upper` changes ASCII letters only).
    assert shouted.data.tolist() == ["CAFé".encode(), b"", b"X Y"]
    assert lengths.datatype == "INT64"
    assert lengths.data.tolist() == [5, 0, 3]  # TorchScript's `len`: UTF-8 bytes


async def test_an_empty_string_tensor_is_an_empty_list(manager: ModelManager) -> None:
    response = await manager.infer(InferRequest("torch_string_shout", "", [_strings("INPUT__0")]))
    assert response.outputs[0].shape == (0,)
    assert response.outputs[0].datatype == "BYTES"


async def test_bytes_that_are_not_utf8_are_refused_with_a_400(manager: ModelManager) -> None:
    text = _strings("INPUT__0", b"ok", b"\xff\xfe")
    with pytest.raises(InvalidInput, match=r"input 'INPUT__0' element 1 is not UTF-8 text"):
        await manager.infer(InferRequest("torch_string_shout", "", [text]))
    # The model serves on.
    alright = _strings("INPUT__0", b"a")
    response = await manager.infer(InferRequest("torch_string_shout", "", [alright]))
    assert response.outputs[0].data.tolist() == [b"A"]


async def test_a_list_of_anything_but_strings_is_the_models_error(manager: ModelManager) -> None:
    text = _strings("INPUT__0", b"abc")
    with pytest.raises(ServingError) as caught:
        await manager.infer(InferRequest("torch_string_ints", "", [text]))
    assert "output 'OUTPUT__0' must be of type Tensor or List[str], received a list of int" in str(
        caught.value
    )
    assert caught.value.status == 500


async def test_a_tensor_for_a_string_output_is_the_models_error(manager: ModelManager) -> None:
    text = _strings("INPUT__0", b"abc")
    with pytest.raises(ServingError, match=r"configuration expects datatype TYPE_BYTES for "
                       r"output 'OUTPUT__0', model provides TYPE_INT64"):  # fmt: skip
        await manager.infer(InferRequest("torch_string_tensor_out", "", [text]))


def test_a_dynamic_batch_of_strings_is_one_list_cut_back_per_request(repo: Path) -> None:
    from runtime.backends.base import LoadContext
    from runtime.backends.torch_backend import TorchBackend
    from runtime.model_config import complete_config

    model_dir = repo / "torch_string_batched"
    config = parse_config((model_dir / "config.pbtxt").read_text(), "torch_string_batched")
    complete_config(config, model_dir, config.name, gpu_available=False, require_model_files=True)
    backend = TorchBackend()
    backend.load(LoadContext(config.name, "1", model_dir / "1", model_dir, config, "KIND_CPU", 0))
    module = backend._module
    lists: list[list[str]] = []

    def recording(text: list[str]) -> object:
        lists.append(text)
        return module(text)

    backend._module = recording
    # The signature's reshape ([1] -> []) has run: each request is a [batch] string tensor.
    requests = [
        InferRequest(config.name, "1", [_strings("INPUT__0", *items)], id=str(i))
        for i, items in enumerate([(b"a",), (b"b", b"c"), (b"d",)])
    ]
    results = backend.execute(requests)
    assert lists == [["a", "b", "c", "d"]]  # one forward over the whole batch
    answers = [r.outputs[0].data.tolist() for r in results]  # type: ignore[union-attr]
    assert answers == [[b"a!"], [b"b!", b"c!"], [b"d!"]]


@pytest.mark.parametrize(
    ("max_batch_size", "io", "refused"),
    [
        (0, "dims: [ -1 ]", False),
        (0, "dims: [ 2, 2 ]", True),
        (8, "dims: [ 1 ]", True),  # [batch, 1]: two dimensions
        (8, "dims: [ 1 ] reshape: { shape: [ ] }", False),  # [batch]
        (0, "dims: [ 4 ] reshape: { shape: [ 2, 2 ] }", True),
    ],
)
def test_only_one_dimensional_string_inputs_load(
    max_batch_size: int, io: str, refused: bool
) -> None:
    config = parse_config(
        f"""
        name: "m"
        max_batch_size: {max_batch_size}
        input [ {{ name: "TEXT" data_type: TYPE_STRING {io} }} ]
        """,
        "m",
    )
    if not refused:
        check_string_io(config)
        return
    with pytest.raises(RepositoryError) as caught:
        check_string_io(config)
    assert str(caught.value) == (
        "Triton only supports 1 dimensional List of String as input for 'TEXT' for model 'm'"
    )


def test_a_two_dimensional_string_state_does_not_load() -> None:
    config = parse_config(
        """
        name: "m"
        input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
        sequence_batching { state [ { input_name: "S_IN" output_name: "S_OUT"
                                      data_type: TYPE_STRING dims: [ 2, 2 ] } ] }
        """,
        "m",
    )
    with pytest.raises(RepositoryError, match="List of String as input for 'S_IN'"):
        check_string_io(config)


async def test_a_model_with_a_two_dimensional_string_input_is_refused_at_load(
    tmp_path: Path,
) -> None:
    model_dir = make_torch_string_shout(tmp_path, "flat_only")
    config = (model_dir / "config.pbtxt").read_text()
    (model_dir / "config.pbtxt").write_text(
        config.replace("TYPE_STRING dims: [ -1 ] } ]\n", "TYPE_STRING dims: [ 2, -1 ] } ]\n", 1)
    )
    mgr = ModelManager(ServeConfig(repository=tmp_path), metrics=Metrics())
    await mgr.start()
    try:
        (row,) = await mgr.index()
        assert row["state"] == "UNAVAILABLE"
        assert "1 dimensional List of String as input for 'INPUT__0'" in row["reason"]
    finally:
        await mgr.stop()
