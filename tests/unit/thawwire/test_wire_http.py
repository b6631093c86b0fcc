"""thawwire's small HTTP facts: hop-by-hop headers, the JSON answer to unparsable HTTP, the
server metadata and extensions, and v2 model metadata from a config."""

from __future__ import annotations

import json

from google.protobuf import text_format

from thawwire.bad_http import MAX_REASON_CHARS, error_body, error_reason
from thawwire.datatype_names import config_to_v2, v2_to_config
from thawwire.extensions import EXTENSIONS
from thawwire.hop_by_hop import HOP_BY_HOP, connection_tokens
from thawwire.metadata import model_metadata
from thawwire.server_info import SERVER_NAME, server_metadata, server_version
from tritonconfig.schema import mc

CONFIG = """
name: "m"
backend: "python"
max_batch_size: 4
input [ { name: "A" data_type: TYPE_FP32 dims: [ -1, 3 ] },
        { name: "S" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]
"""


def _config(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def test_hop_by_hop_headers_and_the_ones_connection_names() -> None:
    assert {"connection", "keep-alive", "transfer-encoding", "upgrade", "te"} <= HOP_BY_HOP
    assert "content-type" not in HOP_BY_HOP and "host" not in HOP_BY_HOP
    assert connection_tokens(["Keep-Alive, X-Private ", "close,,", " "]) == {
        "keep-alive",
        "x-private",
        "close",
    }
    assert connection_tokens([]) == frozenset()


def test_an_unparsable_request_gets_one_line_of_json() -> None:
    body = json.loads(error_body(400, "Bad status line 'x'\n\n  more\ttext"))
    assert body == {"error": "Bad status line 'x' more text"}
    assert error_reason(400, None) == "Bad Request" and error_reason(413, "") == (
        "Request Entity Too Large"
    )
    assert len(error_reason(400, "x" * 10_000)) == MAX_REASON_CHARS
    assert error_reason(999, None) == "Bad Request"  # not a status: still a reason
    assert json.loads(error_body(400, '"}\x00{')) == {"error": '"}\x00{'}  # stays JSON


def test_server_metadata_is_one_answer() -> None:
    meta = server_metadata()
    assert meta == {
        "name": SERVER_NAME,
        "version": server_version(),
        "extensions": list(EXTENSIONS),
    }
    assert meta["name"] == "triton" and meta["version"].count(".") == 2
    assert "binary_tensor_data" in EXTENSIONS and "model_repository" in EXTENSIONS


def test_metadata_shows_batch_dim_as_minus_one() -> None:
    meta = model_metadata(_config(CONFIG), ["1"])
    assert meta["inputs"][0] == {"name": "A", "datatype": "FP32", "shape": [-1, -1, 3]}
    assert meta["inputs"][1] == {"name": "S", "datatype": "BYTES", "shape": [-1, 1]}
    assert meta["outputs"][0]["shape"] == [-1, -1, 3]
    assert meta["versions"] == ["1"] and meta["platform"] == "python"
    assert meta["name"] == "m"


def test_metadata_without_batching_keeps_the_dims_and_prefers_the_platform() -> None:
    config = _config(
        'name: "n" platform: "onnxruntime_onnx" backend: "onnxruntime"\n'
        'input [ { name: "X" data_type: TYPE_INT64 dims: [ 2, 2 ] } ]'
    )
    meta = model_metadata(config, ("1", "3"))
    assert meta["versions"] == ["1", "3"] and meta["platform"] == "onnxruntime_onnx"
    assert model_metadata(config, ("1", "3"), "3")["versions"] == ["3"]  # Triton 2.51 does
    assert meta["inputs"] == [{"name": "X", "datatype": "INT64", "shape": [2, 2]}]
    assert meta["outputs"] == []


def test_datatype_names_round_trip() -> None:
    for name in ("FP32", "INT8", "BOOL", "BF16", "BYTES"):
        assert config_to_v2(v2_to_config(name)) == name
    assert v2_to_config("BYTES") == "TYPE_STRING" and config_to_v2("TYPE_STRING") == "BYTES"
