"""`--load-model` names tritonserver refuses at start, and the words it refuses them in."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.config import ModelControlMode
from runtime.process.startup_models import startup_models_refusal

EXPLICIT, NONE = ModelControlMode.EXPLICIT, ModelControlMode.NONE


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "mock_llm").mkdir()
    (tmp_path / "identity_py").mkdir()
    return tmp_path


@pytest.mark.parametrize("names", [(), ("mock_llm",), ("mock_llm", "identity_py"), ("*",)], ids=str)
def test_names_the_repository_has_start(repo: Path, names: tuple[str, ...]) -> None:
    assert startup_models_refusal(EXPLICIT, names, [repo]) is None


def test_no_startup_models_start_in_any_mode(repo: Path) -> None:
    assert startup_models_refusal(NONE, (), [repo]) is None


@pytest.mark.parametrize(
    ("mode", "names", "words"),
    [
        (
            NONE,
            ("mock_llm",),
            "Error: Use of '--load-model' requires setting '--model-control-mode=explicit' "
            "as well.",
        ),
        (
            EXPLICIT,
            ("*", "mock_llm"),
            "Wildcard model name '*' must be the ONLY startup model if specified at all.",
        ),
        (EXPLICIT, ("",), "Invalid model name"),
        (
            EXPLICIT,
            ("mock_llm", "nope"),
            "failed to poll model 'nope': model not found in any model repository",
        ),
        # A path is not a name: never looked up outside the repository.
        (EXPLICIT, ("..",), "failed to poll model '..': model not found in any model repository"),
        (
            EXPLICIT,
            ("mock_llm/..",),
            "failed to poll model 'mock_llm/..': model not found in any model repository",
        ),
    ],
)
def test_refused_in_tritonservers_words(
    repo: Path, mode: ModelControlMode, names: tuple[str, ...], words: str
) -> None:
    assert startup_models_refusal(mode, names, [repo]) == words


def test_a_name_in_a_second_repository_is_found(
    repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    other = tmp_path_factory.mktemp("other")
    (other / "extra").mkdir()
    assert startup_models_refusal(EXPLICIT, ("extra",), [repo, other]) is None
    assert startup_models_refusal(EXPLICIT, ("extra",), [repo]) is not None
