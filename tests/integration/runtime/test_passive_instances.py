"""Triton's passive instance groups (qa/L0_passive_instance), on `thaw serve`: a passive
group's instances are loaded and initialized but the scheduler never gives them a request
(checked on Triton 2.51: 20 of 20 requests to the active instance); a reload that makes
another group passive moves the requests; a model whose every group is passive is refused at
load (Triton 2.51 loads it and crashes at its first request)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.models import write_config
from tests.fixtures.serve_process import ServeProcess

pytestmark = pytest.mark.integration

_WHO_PY = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        pb_utils.Logger.log_info(f"initialized {self.name}")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()),
                pb_utils.Tensor("WHO", np.array(
                    [[self.name.encode()]] * len(r.inputs()[0].as_numpy()), dtype=np.object_)),
            ])
            for r in requests
        ]
"""


def _config(name: str, groups: str, batching: str = "") -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }},
         {{ name: "WHO" data_type: TYPE_STRING dims: [ 1 ] }} ]
instance_group [ {groups} ]
{batching}
"""


_GROUPS = (
    '{ name: "active" kind: KIND_CPU count: 1 }, '
    '{ name: "standby" kind: KIND_CPU count: 2 passive: true }'
)


def _model(repo: Path, name: str, groups: str, batching: str = "") -> None:
    write_config(repo / name, _config(name, groups, batching))
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    (repo / name / "1" / "model.py").write_text(_WHO_PY)


def _who(module: object, url: str, model: str, n: int) -> Counter[str]:
    seen: Counter[str] = Counter()
    with module.InferenceServerClient(url) as client:  # type: ignore[attr-defined]
        for _ in range(n):
            tensor = module.InferInput("IN", [1, 1], "FP32")  # type: ignore[attr-defined]
            tensor.set_data_from_numpy(np.ones((1, 1), np.float32))
            seen[client.infer(model, [tensor]).as_numpy("WHO")[0][0].decode()] += 1
    return seen


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    _model(root, "one_active", _GROUPS)
    _model(root, "batched", _GROUPS, "dynamic_batching { max_queue_delay_microseconds: 100 }")
    _model(root, "all_passive", '{ name: "standby" kind: KIND_CPU count: 1 passive: true }')
    return root


def test_passive_instances_load_but_take_no_request(
    start_serve: Callable[..., ServeProcess], repo: Path
) -> None:
    server = start_serve(repo, "--model-control-mode=explicit")
    with httpclient.InferenceServerClient(server.hostport) as client:
        for model in ("one_active", "batched"):
            client.load_model(model)
            assert _who(httpclient, server.hostport, model, 12) == {"active_0": 12}
            assert _who(grpcclient, server.grpc_address, model, 8) == {"active_0": 8}
        log = server.log_path.read_text()
        for instance in ("active_0", "standby_0", "standby_1"):
            assert f"initialized {instance}" in log
        # A reload that swaps which group is passive moves the requests to the other group.
        swapped = client.get_model_config("one_active")
        for group in swapped["instance_group"]:
            group["passive"] = group["name"] == "active"
        client.load_model("one_active", config=json.dumps(swapped))
        assert set(_who(httpclient, server.hostport, "one_active", 20)) <= {
            "standby_0",
            "standby_1",
        }
        with pytest.raises(InferenceServerException) as refused:
            client.load_model("all_passive")
        assert "every instance group is passive (`passive: true`): no instance would take its " \
            "requests" in str(refused.value)  # fmt: skip
        assert client.is_server_live()
        assert _who(httpclient, server.hostport, "batched", 2) == {"active_0": 2}
