"""The example repository generator writes valid Triton configs and models that really run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

ROOT = Path(__file__).resolve().parents[3]
GENERATOR = ROOT / "examples" / "generate_repository.py"
MODELS = ("bert", "bert_ensemble", "bert_tokenizer", "resnet50")
# The initialized TritonPythonModel and the pb_utils module it was imported with.
Tokenizer = tuple[Any, ModuleType]

THAW_KEYS = {
    "thaw.min_replicas",
    "thaw.max_replicas",
    "thaw.target_concurrency",
    "thaw.scale_to_zero_grace_s",
}


def _generate(out: Path, *flags: str) -> str:
    result = subprocess.run(
        [sys.executable, str(GENERATOR), str(out), *flags],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("examples") / "repo"
    _generate(out, "--small")
    return out


def _config(repo: Path, name: str) -> model_config_pb2.ModelConfig:
    text = (repo / name / "config.pbtxt").read_text()
    return text_format.Parse(text, model_config_pb2.ModelConfig())


@pytest.fixture(scope="module")
def tokenizer(repo: Path) -> Iterator[Tokenizer]:
    """The generated model.py, imported with a stand-in pb_utils and initialized as Triton would."""
    standin = importlib.util.spec_from_file_location(
        "triton_python_backend_utils", Path(__file__).with_name("pb_utils_standin.py")
    )
    assert standin is not None and standin.loader is not None
    pb_utils = importlib.util.module_from_spec(standin)
    standin.loader.exec_module(pb_utils)
    sys.modules["triton_python_backend_utils"] = pb_utils
    try:
        spec = importlib.util.spec_from_file_location(
            "bert_tokenizer_model", repo / "bert_tokenizer" / "1" / "model.py"
        )
        assert spec is not None and spec.loader is not None
        module: ModuleType = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model = module.TritonPythonModel()
        config = json_format.MessageToDict(
            _config(repo, "bert_tokenizer"), preserving_proto_field_name=True
        )
        model.initialize({
            "model_config": json.dumps(config), "model_repository": str(repo / "bert_tokenizer"),
            "model_version": "1", "model_name": "bert_tokenizer",
            "model_instance_kind": "CPU", "model_instance_device_id": "0",
        })  # fmt: skip
        yield model, pb_utils
        model.finalize()
    finally:
        sys.modules.pop("triton_python_backend_utils", None)


def _tokenize(tokenizer: Tokenizer, texts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    model, pb_utils = tokenizer
    array = np.array(texts, dtype=np.object_).reshape(-1, 1)
    request = pb_utils.InferenceRequest([pb_utils.Tensor("TEXT", array)])
    [response] = model.execute([request])
    assert not response.has_error(), response.error().message()
    out = response.output_tensors
    return out["input_ids"].as_numpy(), out["attention_mask"].as_numpy()


def test_every_config_is_valid_triton_and_carries_thaw_scale_settings(repo: Path) -> None:
    assert sorted(p.name for p in repo.iterdir() if p.is_dir()) == list(MODELS)
    for name in MODELS:
        config = _config(repo, name)
        assert config.name == name
        assert set(config.parameters) >= THAW_KEYS
        for key in THAW_KEYS:
            assert int(config.parameters[key].string_value) >= 0
        assert int(config.parameters["thaw.scale_to_zero_grace_s"].string_value) == 60
    assert _config(repo, "resnet50").platform == "onnxruntime_onnx"
    assert _config(repo, "bert").platform == "onnxruntime_onnx"
    assert _config(repo, "bert_tokenizer").backend == "python"
    ensemble = _config(repo, "bert_ensemble")
    assert ensemble.platform == "ensemble"
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == ["bert_tokenizer", "bert"]


def test_resnet50_onnx_matches_its_config_and_classifies_a_batch(repo: Path) -> None:
    import onnxruntime as ort

    session = ort.InferenceSession(str(repo / "resnet50" / "1" / "model.onnx"))
    [inp], [out] = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.shape[1:], inp.type) == ("input", [3, 224, 224], "tensor(float)")
    assert (out.name, out.shape[1:]) == ("output", [1000])
    batch = np.random.default_rng(0).standard_normal((2, 3, 224, 224)).astype(np.float32)
    [logits] = session.run(None, {"input": batch})
    assert logits.shape == (2, 1000) and np.isfinite(logits).all()
    assert not np.allclose(logits[0], logits[1])  # different images, different logits


def test_resnet50_graph_has_fifty_weighted_layers(repo: Path) -> None:
    import onnx

    graph = onnx.load(str(repo / "resnet50" / "1" / "model.onnx")).graph
    ops = [node.op_type for node in graph.node]
    # 49 convolutions on the main path + 4 shortcut projections, and the final classifier.
    assert ops.count("Conv") == 53
    assert ops.count("Gemm") + ops.count("MatMul") == 1


def test_tokenizer_output_feeds_bert_and_padding_does_not_change_results(
    repo: Path, tokenizer: Tokenizer
) -> None:
    import onnxruntime as ort

    ids, mask = _tokenize(tokenizer, [b"Hello, world!", b"the model serving is cold"])
    assert ids.dtype == np.int64 and ids.shape == mask.shape and ids.shape[0] == 2
    assert mask[0].sum() == 6  # [CLS] hello , world ! [SEP]
    vocab = (repo / "bert_tokenizer" / "1" / "vocab.txt").read_text().splitlines()
    assert [vocab[i] for i in ids[0][: mask[0].sum()]] == [
        "[CLS]", "hello", ",", "world", "!", "[SEP]",
    ]  # fmt: skip
    bert = ort.InferenceSession(str(repo / "bert" / "1" / "model.onnx"))
    hidden, pooled = bert.run(None, {"input_ids": ids, "attention_mask": mask})
    assert hidden.shape[:2] == ids.shape and pooled.shape[0] == 2
    n = int(mask[0].sum())
    alone, _ = bert.run(None, {"input_ids": ids[:1, :n], "attention_mask": mask[:1, :n]})
    np.testing.assert_allclose(hidden[0, :n], alone[0], atol=1e-4)


def test_tokenizer_survives_hostile_text(tokenizer: Tokenizer) -> None:
    texts = [b"", b"\xff\xfe not utf-8 \xc3", b"x" * 10_000, b"word " * 1_000, "Caf\u00e9".encode()]
    ids, mask = _tokenize(tokenizer, texts)
    assert ids.shape == (5, 128)  # truncated to max_sequence_length
    assert mask[0].sum() == 2  # empty text is just [CLS] [SEP]
    assert ids[2, 1] == 1  # a 10,000-character word is [UNK]
    assert mask[3].sum() == 128
    cafe = ids[4, : mask[4].sum()]
    assert 1 not in cafe  # accents are stripped, so no [UNK]


def test_generation_is_idempotent_and_deterministic(repo: Path, tmp_path: Path) -> None:
    model_file = repo / "resnet50" / "1" / "model.onnx"
    before = model_file.stat().st_mtime_ns
    assert "up to date" in _generate(repo, "--small")
    assert model_file.stat().st_mtime_ns == before
    other = tmp_path / "again"
    _generate(other, "--small")
    for name in MODELS:
        for path in sorted((repo / name).rglob("*")):
            if path.is_file():
                twin = other / path.relative_to(repo)
                assert twin.read_bytes() == path.read_bytes(), path


def test_interrupted_repository_is_regenerated(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "broken"
    _generate(out, "--small")
    (out / "bert" / "config.pbtxt").unlink()
    assert "ready" in _generate(out, "--small")
    assert _config(out, "bert").name == "bert"


@pytest.mark.slow
def test_full_resnet50_is_the_real_size(tmp_path: Path) -> None:
    import onnx

    _generate(tmp_path / "full")
    model = tmp_path / "full" / "resnet50" / "1" / "model.onnx"
    weights = onnx.load(str(model)).graph.initializer
    params = sum(int(np.prod(t.dims)) for t in weights)
    assert 25_000_000 < params < 26_000_000  # ResNet-50 has 25.6 M parameters
    assert 95e6 < model.stat().st_size < 110e6
