"""Which models' stream answers may leave out of request order: decoupled ones, and ensembles
with a decoupled step at any depth; an unknown step keeps request order."""

from __future__ import annotations

from runtime.models.answer_order import answers_as_they_come
from tritonconfig import parse_config
from tritonconfig.schema import mc

_CONFIGS = {
    "repeat": 'name: "repeat" backend: "python" model_transaction_policy { decoupled: true }',
    "plain": 'name: "plain" backend: "python"',
    "outer": """name: "outer" platform: "ensemble" ensemble_scheduling { step [
        { model_name: "plain" model_version: -1 },
        { model_name: "inner" model_version: -1 } ] }""",
    "inner": """name: "inner" platform: "ensemble" ensemble_scheduling { step [
        { model_name: "repeat" model_version: -1 } ] }""",
    "plain_only": """name: "plain_only" platform: "ensemble" ensemble_scheduling { step [
        { model_name: "plain" model_version: -1 },
        { model_name: "plain_only" model_version: -1 },
        { model_name: "missing" model_version: -1 } ] }""",
}


def _config_of(model: str) -> mc.ModelConfig | None:
    text = _CONFIGS.get(model)
    return parse_config(text, model) if text is not None else None


def test_decoupled_models_and_ensembles_over_them_answer_as_they_come() -> None:
    assert answers_as_they_come("repeat", _config_of)
    assert answers_as_they_come("inner", _config_of)
    assert answers_as_they_come("outer", _config_of)  # two ensembles deep


def test_default_models_and_ensembles_of_them_keep_request_order() -> None:
    assert not answers_as_they_come("plain", _config_of)
    # a step of its own name and an unknown step: no loop, and the unknown keeps order
    assert not answers_as_they_come("plain_only", _config_of)
    assert not answers_as_they_come("missing", _config_of)
