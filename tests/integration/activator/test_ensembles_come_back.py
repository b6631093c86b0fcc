"""In explicit mode, the ensembles an unload of a step takes down come back when it is loaded
again, and `unload_dependents` leaves what was loaded by name, on `thaw serve` and through
`thaw up`: the load states of each step below are those real Triton 2.51 showed for the same
calls (docs/triton-http-parity.md, "A twelfth side by side"). Repository: python models `pre`,
`post`, `other`; ensembles `ens` (pre, post), `ens_two` (pre), `nested` (ens_two, other)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.either_server import TARGETS, start_either
from tests.fixtures.models import make_ensemble, make_python_identity

pytestmark = pytest.mark.integration

_IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
_MODELS = ("ens", "ens_two", "nested", "other", "post", "pre")


def _ensemble(repo: Path, name: str, steps: list[str]) -> None:
    rows = []
    for i, step in enumerate(steps):
        source = "INPUT0" if i == 0 else f"t{i}"
        target = "OUTPUT0" if i == len(steps) - 1 else f"t{i + 1}"
        rows.append(
            f'{{ model_name: "{step}" model_version: -1 '
            f'input_map {{ key: "INPUT0" value: "{source}" }} '
            f'output_map {{ key: "OUTPUT0" value: "{target}" }} }}'
        )
    config = f'name: "{name}"\nplatform: "ensemble"\n{_IO}'
    make_ensemble(repo, name, config + f"ensemble_scheduling {{ step [ {', '.join(rows)} ] }}\n")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for name in ("pre", "post", "other"):
        make_python_identity(repo, name)
    _ensemble(repo, "ens", ["pre", "post"])
    _ensemble(repo, "ens_two", ["pre"])
    _ensemble(repo, "nested", ["ens_two", "other"])
    return repo


def _post(url: str, path: str, body: dict[str, Any]) -> int:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _ready(url: str) -> str:
    """The models READY, as one string in name order ("ens ens_two ...")."""
    request = urllib.request.Request(url + "/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=60) as resp:
        rows = json.loads(resp.read())
    return " ".join(sorted(r["name"] for r in rows if r.get("state") == "READY"))


def _story(url: str, steps: list[tuple[str, str, bool, str]]) -> None:
    for call, model, dependents, expected in steps:
        body = {"parameters": {"unload_dependents": True}} if dependents else {}
        assert _post(url, f"/v2/repository/models/{model}/{call}", body) == 200
        assert _ready(url) == expected, (call, model)


# (call, model, unload_dependents, the models READY after it: Triton 2.51's answers)
_EVERY_MODEL_AT_START = [
    ("unload", "pre", False, "other post"),
    ("load", "pre", False, "ens ens_two nested other post pre"),  # all three back
    ("unload", "ens", False, "ens_two nested other post pre"),
    ("unload", "pre", False, "other post"),
    ("load", "pre", False, "ens_two nested other post pre"),  # ens, unloaded by name: not
    ("unload", "other", False, "ens_two post pre"),
    ("unload", "pre", False, "post"),
    ("load", "pre", False, "ens_two post pre"),  # nested waits for other
    ("load", "other", False, "ens_two nested other post pre"),
    ("load", "ens", False, "ens ens_two nested other post pre"),
    # every model was loaded by name (`*`): unload_dependents takes none of them
    ("unload", "nested", True, "ens ens_two other post pre"),
    ("unload", "ens", False, "ens_two other post pre"),
    ("unload", "pre", False, "other post"),
    ("load", "ens", False, "ens ens_two other post pre"),  # pre loaded as a step: ens_two back
]

_ENSEMBLES_AT_START = [
    # pre, post, other loaded as the ensembles' steps, not by name
    ("unload", "ens", True, "ens_two nested other pre"),  # post: ran by ens alone
    ("unload", "ens_two", True, "other"),  # nested down with it; pre: nothing else runs it
    ("load", "pre", False, "other pre"),
    ("load", "ens_two", False, "ens_two nested other pre"),  # nested back with ens_two
    ("unload", "ens_two", True, "other pre"),  # pre now loaded by name: kept
    ("unload", "nested", True, "pre"),  # other went with nested
    ("load", "ens", False, "ens post pre"),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "loads, story",
    [(["*"], _EVERY_MODEL_AT_START), (["ens", "ens_two", "nested"], _ENSEMBLES_AT_START)],
    ids=["every-model", "ensembles"],
)
def test_ensembles_come_back_with_their_steps_as_in_triton(
    target: str, repo: Path, loads: list[str], story: list[tuple[str, str, bool, str]]
) -> None:
    args = ["--model-control-mode", "explicit", *[a for m in loads for a in ("--load-model", m)]]
    server = start_either(target, repo, *args)
    try:
        assert _ready(server.url) == " ".join(sorted(_MODELS))
        _story(server.url, story)
    finally:
        server.stop()
