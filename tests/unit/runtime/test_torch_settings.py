"""The libtorch backend's execution parameters Triton's PyTorch backend documents
(DISABLE_OPTIMIZED_EXECUTION, DISABLE_CUDNN, ENABLE_CACHE_CLEANING, ENABLE_JIT_PROFILING,
ENABLE_JIT_EXECUTOR, ENABLE_TENSOR_FUSER, INTRA_OP_THREAD_COUNT, INTER_OP_THREAD_COUNT): read
as Triton reads them, logged in its words, and set on the thread that runs the model."""

from __future__ import annotations

import threading

import pytest
import torch

from runtime.backends.torch_backend import _apply
from runtime.errors import RepositoryError
from runtime.model_config import parse_config, torch_settings
from tritonconfig.torch_parameters import TorchSettings


def _config(**params: str) -> str:
    text = 'name: "m" platform: "pytorch_libtorch"\n'
    for key, value in params.items():
        text += f'parameters: {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
    return text


def test_defaults_and_values_as_triton_reads_them() -> None:
    assert torch_settings(parse_config(_config(), "m")) == TorchSettings()
    got = torch_settings(parse_config(_config(
        DISABLE_OPTIMIZED_EXECUTION="true", DISABLE_CUDNN="Yes", ENABLE_CACHE_CLEANING="1",
        ENABLE_JIT_PROFILING="off", ENABLE_JIT_EXECUTOR="false", ENABLE_TENSOR_FUSER="on",
        INTRA_OP_THREAD_COUNT="2", INTER_OP_THREAD_COUNT=" 1 ",
    ), "m"))  # fmt: skip
    assert got == TorchSettings(
        optimized_execution=False, cudnn=False, cache_cleaning=True, jit_profiling=False,
        jit_executor=False, tensor_fuser=True, intra_op_threads=2, inter_op_threads=1,
    )  # fmt: skip
    with pytest.raises(RepositoryError, match="failed to convert 'maybe' to boolean value"):
        torch_settings(parse_config(_config(DISABLE_OPTIMIZED_EXECUTION="maybe"), "m"))
    with pytest.raises(RepositoryError, match="failed to convert 'two' to integral number"):
        torch_settings(parse_config(_config(INTRA_OP_THREAD_COUNT="two"), "m"))


def test_the_log_lines_are_tritons() -> None:
    assert TorchSettings().log_lines("m_0") == [
        "Optimized execution is enabled for model instance 'm_0'",
        "Cache Cleaning is disabled for model instance 'm_0'",
        "cuDNN is enabled for model instance 'm_0'",
    ]
    lines = TorchSettings(optimized_execution=False, jit_executor=True, intra_op_threads=3,
                          inter_op_threads=0).log_lines("m")  # fmt: skip
    assert lines[0] == "Optimized execution is disabled for model instance 'm'"
    assert "Jit executor is enabled for model instance 'm'" in lines
    assert "Intra op thread count is set to 3 for model instance 'm'" in lines
    assert not any("Inter op" in line for line in lines)  # 0: not set, as in Triton


def test_optimized_execution_is_set_on_the_thread_that_runs_the_model() -> None:
    seen: list[bool] = []

    def run() -> None:
        _apply(torch, TorchSettings(optimized_execution=False))
        seen.append(torch._C._get_graph_executor_optimize())
        _apply(torch, TorchSettings())
        seen.append(torch._C._get_graph_executor_optimize())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [False, True]
