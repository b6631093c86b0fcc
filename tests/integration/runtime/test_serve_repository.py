"""The model repository extension in explicit mode: index, load (with overrides), unload."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.integration


def _infer_spare(client: httpclient.InferenceServerClient) -> np.ndarray:
    a = httpclient.InferInput("INPUT0", [4], "FP32")
    b = httpclient.InferInput("INPUT1", [4], "FP32")
    a.set_data_from_numpy(np.full(4, 3, dtype=np.float32))
    b.set_data_from_numpy(np.ones(4, dtype=np.float32))
    return client.infer("add_sub_spare", [a, b]).as_numpy("OUTPUT0")


def test_index_lists_every_model_with_its_state(client: httpclient.InferenceServerClient) -> None:
    rows = {row["name"]: row for row in client.get_model_repository_index()}
    assert rows["add_sub"]["state"] == "READY"
    assert rows["add_sub"]["version"] == "1"
    assert rows["add_sub_spare"].get("state", "UNAVAILABLE") != "READY"


def test_load_then_unload_a_model(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException):
        _infer_spare(client)
    client.load_model("add_sub_spare")
    assert client.is_model_ready("add_sub_spare")
    np.testing.assert_array_equal(_infer_spare(client), np.full(4, 4, dtype=np.float32))
    client.unload_model("add_sub_spare", unload_dependents=True)
    assert not client.is_model_ready("add_sub_spare")
    with pytest.raises(InferenceServerException) as info:
        _infer_spare(client)
    assert info.value.status() in ("503", "404")


def test_load_with_a_config_override(client: httpclient.InferenceServerClient) -> None:
    config = client.get_model_config("add_sub")
    config["name"] = "add_sub_spare"
    config["max_batch_size"] = 0
    client.load_model("add_sub_spare", config=json.dumps(config))
    try:
        assert client.is_model_ready("add_sub_spare")
        assert client.get_model_config("add_sub_spare")["name"] == "add_sub_spare"
    finally:
        client.unload_model("add_sub_spare")


def test_loading_unknown_or_invalid_models_fails_cleanly(
    client: httpclient.InferenceServerClient,
) -> None:
    for name in ("no_such_model", "..", "a b"):
        with pytest.raises(InferenceServerException) as info:
            client.load_model(name)
        assert info.value.status() in ("400", "404")
        assert name in (info.value.message() or "")
        # One typo in a load call must not take the replica out of readiness.
        assert client.is_server_ready()
    assert "no_such_model" not in {row["name"] for row in client.get_model_repository_index()}
    with pytest.raises(InferenceServerException) as info:
        client.load_model("add_sub_spare", config="{not json")
    assert info.value.status() == "400"
    assert client.is_model_ready("add_sub")
    assert client.get_model_repository_index()
