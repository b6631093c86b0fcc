"""The generated example repository serves unchanged under `thaw serve`, through tritonclient."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("examples") / "repo"
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "generate_repository.py"), str(out), "--small"],
        check=True,
        timeout=300,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="module")
def client(repo: Path) -> Iterator[httpclient.InferenceServerClient]:
    server = ServeProcess(repo)
    try:
        server.wait_ready()
        with httpclient.InferenceServerClient(server.hostport, network_timeout=60) as triton:
            yield triton
    finally:
        server.stop()


def test_every_model_loads_ready(client: httpclient.InferenceServerClient) -> None:
    index = client.get_model_repository_index()
    assert {m["name"]: m["state"] for m in index} == {
        "bert": "READY",
        "bert_ensemble": "READY",
        "bert_tokenizer": "READY",
        "resnet50": "READY",
    }
    config = client.get_model_config("resnet50")
    assert config["parameters"]["thaw.scale_to_zero_grace_s"]["string_value"] == "60"


def test_resnet50_answers_like_onnxruntime(
    client: httpclient.InferenceServerClient, repo: Path
) -> None:
    import onnxruntime as ort

    images = np.random.default_rng(5).standard_normal((2, 3, 224, 224)).astype(np.float32)
    inp = httpclient.InferInput("input", list(images.shape), "FP32")
    inp.set_data_from_numpy(images, binary_data=True)
    result = client.infer("resnet50", [inp])
    logits = result.as_numpy("output")
    session = ort.InferenceSession(str(repo / "resnet50" / "1" / "model.onnx"))
    [expected] = session.run(None, {"input": images})
    assert logits.shape == (2, 1000)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)


def test_text_through_tokenizer_then_bert(client: httpclient.InferenceServerClient) -> None:
    text = np.array([[b"Scale to zero, then thaw!"], [b""]], dtype=np.object_)
    inp = httpclient.InferInput("TEXT", [2, 1], "BYTES")
    inp.set_data_from_numpy(text)
    tokens = client.infer("bert_tokenizer", [inp])
    ids, mask = tokens.as_numpy("input_ids"), tokens.as_numpy("attention_mask")
    assert ids.dtype == np.int64 and ids.shape == mask.shape
    assert mask[1].tolist()[:2] == [1, 1] and mask[1, 2:].sum() == 0  # "" -> [CLS] [SEP]
    feeds = []
    for name, array in (("input_ids", ids), ("attention_mask", mask)):
        tensor = httpclient.InferInput(name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(array)
        feeds.append(tensor)
    encoded = client.infer("bert", feeds)
    hidden, pooled = encoded.as_numpy("last_hidden_state"), encoded.as_numpy("pooler_output")
    assert hidden.shape[:2] == ids.shape and pooled.shape[0] == 2
    assert np.isfinite(hidden).all() and not np.allclose(pooled[0], pooled[1])


def test_bert_ensemble_is_the_tokenizer_then_bert_in_one_request(
    client: httpclient.InferenceServerClient,
) -> None:
    text = np.array([[b"Scale to zero, then thaw!"]], dtype=np.object_)
    inp = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    inp.set_data_from_numpy(text)
    together = client.infer("bert_ensemble", [inp])
    tokens = client.infer("bert_tokenizer", [inp])
    feeds = []
    for name in ("input_ids", "attention_mask"):
        array = tokens.as_numpy(name)
        tensor = httpclient.InferInput(name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(array)
        feeds.append(tensor)
    apart = client.infer("bert", feeds)
    for name in ("last_hidden_state", "pooler_output"):
        np.testing.assert_allclose(together.as_numpy(name), apart.as_numpy(name), rtol=1e-5)


def test_tokenizer_rejects_wrong_input_and_keeps_serving(
    client: httpclient.InferenceServerClient,
) -> None:
    wrong = httpclient.InferInput("TEXT", [1, 1], "FP32")
    wrong.set_data_from_numpy(np.zeros((1, 1), dtype=np.float32))
    with pytest.raises(httpclient.InferenceServerException):
        client.infer("bert_tokenizer", [wrong])
    ok = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    ok.set_data_from_numpy(np.array([[b"still here"]], dtype=np.object_))
    assert client.infer("bert_tokenizer", [ok]).as_numpy("input_ids").shape[0] == 1
