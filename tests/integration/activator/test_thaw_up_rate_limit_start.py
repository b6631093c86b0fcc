"""`thaw up --rate-limit=execution_count` judges at its start what tritonserver's start, which
loads every model, would refuse for the rate limiter's resources, though no model is loaded at
start: a `--rate-limit-resource` count below an instance's need, and one resource global in one
model and per device in another (which no replica sees, each holding its own models). Given
`--exit-on-error=true` the start is refused in Triton's words (qa/L0_rate_limiter's refused
starts); without it the model is unavailable, with the reason, and the others are served. A
model loaded (or polled) in later is judged the same way beside the served models."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import make_add_sub
from tests.fixtures.up_process import UpProcess

pytestmark = pytest.mark.integration

_QUIET = ("--warm-pool", "0", "--preload-frameworks", "", "--no-image-build")
_NEED_4 = (
    'Resource count for "resource1" is limited to 1 which will prevent scheduling of one or '
    "more model instances, the minimum required count is 4"
)


def _with_resources(repo: Path, name: str, resources: str) -> None:
    config = make_add_sub(repo, name) / "config.pbtxt"
    text = config.read_text().replace(
        "instance_group [ { count: 1 kind: KIND_CPU } ]",
        "instance_group [ { count: 1 kind: KIND_CPU "
        f"rate_limiter {{ resources [ {resources} ] }} }} ]",
    )
    assert "rate_limiter" in text
    config.write_text(text)


def _up(repo: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "thaw.cli", "up", str(repo), "--port", "0", *_QUIET, *flags]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_a_count_below_an_instances_need(tmp_path: Path) -> None:
    _with_resources(tmp_path, "greedy", '{ name: "resource1" count: 4 }')
    _with_resources(tmp_path, "modest", '{ name: "resource1" count: 1 }')
    flags = ("--rate-limit=execution_count", "--rate-limit-resource=resource1:1")
    refused = _up(tmp_path, *flags, "--exit-on-error=true")
    assert refused.returncode == 1, refused.stderr
    assert f"thaw up: error: failed to load 'greedy': {_NEED_4}" in refused.stderr  # its line
    assert f"thaw up: error: failed to load all models: greedy: {_NEED_4}" in refused.stderr
    assert "modest" not in refused.stderr
    # Enough of resource1: the same repository starts.
    server = UpProcess(tmp_path, *_QUIET, "--rate-limit=execution_count",
                       "--rate-limit-resource=resource1:4", "--exit-on-error=true")  # fmt: skip
    server.stop()
    server = UpProcess(tmp_path, *_QUIET, *flags)
    try:
        assert f"model 'greedy' is unavailable: {_NEED_4}" in server.log()
        with httpclient.InferenceServerClient(server.hostport) as client:
            rows = {row["name"]: row for row in client.get_model_repository_index()}
            assert rows["greedy"]["state"] == "UNAVAILABLE"
            assert rows["greedy"]["reason"] == _NEED_4
            assert not client.is_model_ready("greedy")
            assert client.is_model_ready("modest")
    finally:
        server.stop()


def test_one_resource_global_in_one_model_and_per_device_in_another(tmp_path: Path) -> None:
    _with_resources(tmp_path, "a_global", '{ name: "resource2" global: true count: 2 }')
    _with_resources(tmp_path, "b_per_device", '{ name: "resource2" count: 2 }')
    refused = _up(tmp_path, "--rate-limit=execution_count", "--exit-on-error=true")
    assert refused.returncode == 1, refused.stderr
    assert (
        'failed to load all models: b_per_device: Resource "resource2" is present as both '
        "global and device-specific resource in the model configuration." in refused.stderr
    )
    # The rate limiter off (the default): nothing is judged, both models are served.
    server = UpProcess(tmp_path, *_QUIET, "--exit-on-error=true")
    try:
        with httpclient.InferenceServerClient(server.hostport) as client:
            assert client.is_model_ready("a_global")
            assert client.is_model_ready("b_per_device")
    finally:
        server.stop()


def test_a_model_loaded_later_is_judged_beside_the_served_ones(tmp_path: Path) -> None:
    _with_resources(tmp_path, "a_global", '{ name: "resource2" global: true count: 2 }')
    server = UpProcess(tmp_path, *_QUIET, "--rate-limit=execution_count",
                       "--rate-limit-resource=resource2:2", "--model-control-mode=explicit",
                       "--load-model=a_global")  # fmt: skip
    try:
        with httpclient.InferenceServerClient(server.hostport) as client:
            # Added after the start: per device where the served model has it global.
            _with_resources(tmp_path, "b_per_device", '{ name: "resource2" count: 2 }')
            both = "present as both global and device-specific"
            with pytest.raises(InferenceServerException, match=both):
                client.load_model("b_per_device")
            assert not client.is_model_ready("b_per_device")
            # More of it than --rate-limit-resource gives: refused in Triton's words.
            _with_resources(tmp_path, "c_greedy", '{ name: "resource2" global: true count: 3 }')
            greedy = r'"resource2" is limited to 2 .* count is 3'
            with pytest.raises(InferenceServerException, match=greedy):
                client.load_model("c_greedy")
            # One that fits loads, and the first still serves.
            _with_resources(tmp_path, "d_modest", '{ name: "resource2" global: true count: 1 }')
            client.load_model("d_modest")
            assert client.is_model_ready("d_modest") and client.is_model_ready("a_global")
    finally:
        server.stop()


def test_in_explicit_mode_only_loaded_models_claim_their_resources(tmp_path: Path) -> None:
    _with_resources(tmp_path, "a_global", '{ name: "resource2" global: true count: 2 }')
    _with_resources(tmp_path, "b_per_device", '{ name: "resource2" count: 2 }')
    server = UpProcess(tmp_path, *_QUIET, "--rate-limit=execution_count",
                       "--model-control-mode=explicit")  # fmt: skip
    try:
        with httpclient.InferenceServerClient(server.hostport) as client:
            client.load_model("b_per_device")  # a_global is not loaded: nothing to clash with
            with pytest.raises(InferenceServerException, match="present as both global"):
                client.load_model("a_global")
            client.unload_model("b_per_device")
            client.load_model("a_global")  # b_per_device unloaded: it claims nothing now
            assert client.is_model_ready("a_global")
    finally:
        server.stop()
