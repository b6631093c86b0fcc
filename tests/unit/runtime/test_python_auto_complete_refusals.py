"""A Python model's `auto_complete_config` that Triton refuses, refused in Triton's words (the
expected texts of qa/L0_model_config's autofill_noplatform/python no_return and
conflicting_scheduler_sequence)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.errors import RepositoryError
from runtime.python.backend import auto_complete_config
from tritonconfig import parse_config

MODEL = """
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        {body}
"""


def _completed(tmp_path: Path, body: str, config_text: str) -> None:
    model_file = tmp_path / "model.py"
    model_file.write_text(MODEL.format(body=body))
    auto_complete_config(parse_config(config_text, "c"), model_file)


def test_a_hook_that_returns_nothing(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError) as info:
        _completed(tmp_path, "return None", 'name: "no_return"\nbackend: "python"\n')
    assert info.value.message == (
        "auto_complete_config function in model 'no_return' must return a valid "
        "pb.ModelConfig object."
    )


def test_a_hook_that_sets_another_scheduler(tmp_path: Path) -> None:
    body = (
        "auto_complete_model_config.set_dynamic_batching()\n"
        "        return auto_complete_model_config"
    )
    config = 'name: "m"\nbackend: "python"\nmax_batch_size: 4\nsequence_batching { }\n'
    with pytest.raises(RepositoryError) as info:
        _completed(tmp_path, body, config)
    assert info.value.message == (
        "Configuration specified scheduling_choice as 'sequence_batching', but "
        "auto-complete-config function for model 'm' tries to set scheduling_choice as "
        "'dynamic_batching'"
    )


def test_a_hook_that_keeps_the_scheduler(tmp_path: Path) -> None:
    body = (
        "auto_complete_model_config.set_dynamic_batching()\n"
        "        return auto_complete_model_config"
    )
    config = 'name: "m"\nbackend: "python"\nmax_batch_size: 4\ndynamic_batching { }\n'
    _completed(tmp_path, body, config)


def test_a_refusal_of_pb_utils_model_config_is_the_loads_reason_whole(tmp_path: Path) -> None:
    body = (
        'auto_complete_model_config.add_input({"data_type": "TYPE_FP32", "dims": [4]})\n'
        "        return auto_complete_model_config"
    )
    with pytest.raises(RepositoryError) as info:
        _completed(tmp_path, body, 'name: "input_missing_name"\nbackend: "python"\n')
    assert info.value.message == (
        "input in auto-complete-config function for model 'input_missing_name' is missing "
        "'name' property."
    )
