"""Triton's qa/L0_backend_python/test.sh itself, its first server run: `python_test.py` on the
models tests/fixtures/triton_qa_backend_python_main.py builds, with test.sh's flags
(`--backend-config=python,shm-default-byte-size=5242880`, `--log-verbose=1`; no
`--backend-directory`: Thaw's Python backend needs none). The model `init_args` checks its
`model_repository` against `$TRITON_DIR/qa/L0_backend_python/models/init_args`, so the server
gets TRITON_DIR as test.sh's environment has it. test.sh's later runs (a SIGKILLed server's
stubs, multi_file, model_env, the shared-memory size runs, init_exit, KIND_GPU) and its
subtests' own suites (tests/conformance/qa_backend_python.py) are not this suite.
"""

from __future__ import annotations

from tests.conformance.qa_suite import Run, Suite
from tests.fixtures.triton_qa_backend_python_main import build_python_test_repo

__all__ = ["PYTHON_TEST_SUITE"]

_CUDA = "CUDA shared memory and tensors on a GPU (tritonclient.utils.cuda_shared_memory)"
# The test of v2.51 sends a float32 array as its BF16 input, which the tritonclient installed
# here (2.73; since r26.06) refuses in the client, before any request is sent.
_CLIENT_BF16 = "the installed tritonclient refuses a float32 array as a BF16 input (not sent)"

PYTHON_TEST_SUITE = Suite(
    "L0_backend_python",
    ("python_test.py",),
    {"models": build_python_test_repo},
    (
        Run(
            "python_test",
            "models",
            ("--backend-config", "python,shm-default-byte-size=5242880", "--log-verbose", "1"),
            server_env=(("TRITON_DIR", "{triton_dir}"),),
            server_log="inference_server.log",
        ),
    ),
    deselect=(
        ("test_gpu_tensor_error", _CUDA),
        ("test_dlpack_tensor_error", _CUDA),
        ("test_bf16", _CLIENT_BF16),
    ),
)
