"""Triton's qa/L0_pytorch_python_runtime against `thaw serve` (or `thaw up`): the PyTorch
backend's Python runtime (`backend: "pytorch"`, `runtime: "model.py"`).

    unshare -n sh -c 'ip link set lo up && .venv/bin/python -m \
        tests.conformance.triton_l0_pytorch_python_runtime [--server serve] [--server up]'

As test.sh: unit_test.py (the runtime's gather and scatter of batched requests), then one
server start with `--log-verbose=1` on its models: the seven log lines it greps (each model's
torch parallelism settings and `torch.compile` parameters, the TorchScript model loaded as
such), the TorchScript model inferred with a batch of 2, and infer.py (a model without a
parameter file, a model with one at batch 4, then 8 requests of 1 at once through its dynamic
batcher).

Stand-ins, for what comes from Triton's data directory and install: the models of
`pytorch_model_store` (`addsub`: add and subtract, `torch.compile` disabled; `neuralnet`: a
two-layer net with its state_dict in model.pt, NUM_THREADS 4, NUM_INTEROP_THREADS 2, the
default `torch.compile`, and its test_data.json of inputs and the labels its outputs give) and
`libtorch_model_store/resnet50_libtorch` (a small scripted CNN with resnet50's I/O, given
test.sh's edits: its platform line removed, `backend`, `runtime` and KIND_MODEL appended) are
made here with seeded random weights (tests/fixtures/pytorch_runtime_models.py); unit_test.py
imports `py_runtime`, which test.sh copies from the backend's model.py, and here is Thaw's
runtime's `gather` and `scatter` under the names the test imports; image_client.py on
vulture.jpeg (it needs PIL and the real resnet50) is a batch of 2 random images through
tritonclient. Uses ports 8000-8002: run it in a network namespace of its own. Triton's files
come from the server mirror (`--mirror`, default `$TRITON_SERVER_MIRROR`; without one the run
says so and exits 0). Exit status 0 when every check passed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from tests.conformance.qa_checkout import mirror_parser, qa_python_path
from tests.conformance.qa_servers import Server, add_server_argument, start
from tests.conformance.qa_test_sh import mirror_at
from tests.fixtures.models import write_config
from tests.fixtures.pytorch_runtime_models import make_addsub, make_neuralnet, reference_module

__all__ = ["main"]

SUITE = "qa/L0_pytorch_python_runtime"
UNIT_TESTS = 2
# test.sh's EXPECTED_LOG_MSGS.
LOG_LINES = (
    "Loading 'resnet50_libtorch' as TorchScript",
    "Torch parallelism settings for 'addsub': NUM_THREADS = 1; NUM_INTEROP_THREADS = 1;",
    "Torch parallelism settings for 'neuralnet': NUM_THREADS = 4; NUM_INTEROP_THREADS = 2;",
    "Torch parallelism settings for 'resnet50_libtorch': NUM_THREADS = 1; NUM_INTEROP_THREADS = 1;",
    "'torch.compile' optional parameter(s) for 'addsub': {'disable': True}",
    "'torch.compile' optional parameter(s) for 'neuralnet': {}",
    "'torch.compile' optional parameter(s) for 'resnet50_libtorch': {}",
)
# unit_test.py's `from py_runtime import ...`: Thaw's runtime under those names.
_PY_RUNTIME = """\
from runtime.python.pytorch_runtime.model import gather as _gather_torch_tensors
from runtime.python.pytorch_runtime.model import scatter as _scatter_torch_tensors
"""
_RESNET_STAND_IN = """\
import torch


class ResNetStandIn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 7, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1)
        )
        self.classifier = torch.nn.Linear(8, 1000)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))
"""
_RESNET_CONFIG = """\
name: "resnet50_libtorch"
platform: "pytorch_libtorch"
max_batch_size: 128
input { name: "INPUT__0" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 224, 224 ] }
output { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1000 ] }
"""
_TEST_ROWS = 8  # infer.py reads rows 0-3, then 0-7 one each


def _models(work: Path) -> Path:
    """test.sh's `models`, from the stand-ins (module docstring); test_data.json moved out."""
    import torch

    models = work / "models"
    make_addsub(models)
    neuralnet = make_neuralnet(
        models, compile_parameters=None,
        parameters={"NUM_THREADS": "4", "NUM_INTEROP_THREADS": "2"},
    )  # fmt: skip
    net = reference_module(neuralnet / "1" / "model.py", "NeuralNet")
    net.load_state_dict(torch.load(neuralnet / "1" / "model.pt"))
    rows = np.random.default_rng(3).random((_TEST_ROWS, 8), dtype=np.float32)
    with torch.no_grad():
        labels = net(torch.from_numpy(rows)).max(dim=1).values.tolist()
    data = {"input_data": rows.tolist(), "labels": labels}
    (work / "qa" / "L0_pytorch_python_runtime" / "neuralnet_test_data.json").write_text(
        json.dumps(data)
    )
    resnet = models / "resnet50_libtorch"
    (resnet / "1").mkdir(parents=True)
    source = work / "resnet_stand_in.py"
    source.write_text(_RESNET_STAND_IN)
    torch.manual_seed(5)
    torch.jit.script(reference_module(source, "ResNetStandIn")).save(str(resnet / "1" / "model.pt"))
    # test.sh: sed -i "/platform/d", then backend, runtime and KIND_MODEL appended.
    config = "".join(line for line in _RESNET_CONFIG.splitlines(keepends=True)
                     if "platform" not in line)  # fmt: skip
    write_config(resnet, config + 'backend: "pytorch"\nruntime: "model.py"\n'
                 "instance_group: [{ kind: KIND_MODEL }]\n")  # fmt: skip
    return models


def _unit_tests(suite: Path) -> tuple[bool, str]:
    (suite / "py_runtime.py").write_text(_PY_RUNTIME)
    result = suite / "test_results.txt"
    result.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": qa_python_path()}
    proc = subprocess.run([sys.executable, "unit_test.py"], cwd=suite, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    return proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]


def _resnet(server: Server) -> tuple[bool, str]:
    """image_client.py's request, in its place: a batch of 2 NCHW images, one class each."""
    import tritonclient.http as httpclient

    images = np.random.default_rng(4).random((2, 3, 224, 224), dtype=np.float32)
    tensor = httpclient.InferInput("INPUT__0", list(images.shape), "FP32")
    tensor.set_data_from_numpy(images)
    wanted = httpclient.InferRequestedOutput("OUTPUT__0", class_count=1)
    try:
        client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
        got = client.infer("resnet50_libtorch", [tensor], outputs=[wanted])
    except Exception as exc:  # the check's detail, whatever the client raised
        return False, str(exc)
    classes = got.as_numpy("OUTPUT__0")
    return classes is not None and classes.shape == (2, 1), str(classes)


def _output(server: Server) -> str:
    return "\n".join(server.stdout_lines) + "\n" + server.log_path.read_text(errors="replace")


def run(kind: str, work: Path) -> list[tuple[str, bool, str]]:
    suite = work / "qa" / "L0_pytorch_python_runtime"
    checks: list[tuple[str, bool, str]] = [("unit_test.py", *_unit_tests(suite))]
    models = _models(work)
    try:
        server = start(kind, models, ("--log-verbose=1",))
    except RuntimeError as exc:
        return [*checks, ("the server starts", False, str(exc)[-2000:])]
    try:
        checks.append(("resnet50_libtorch (TorchScript), batch 2", *_resnet(server)))
        proc = subprocess.run([sys.executable, "infer.py"], cwd=suite, capture_output=True,
                              text=True, timeout=900)  # fmt: skip
        checks.append(("infer.py", proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]))
        # After the requests: through `thaw up` a model loads (and logs) at its first one.
        log = _output(server)
        for line in LOG_LINES:
            checks.append((f"log: {line}", line in log, ""))
    finally:
        server.stop()
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = mirror_parser((__doc__ or "").split("\n")[0])
    parser.add_argument("--ref", default="v2.51.0")
    add_server_argument(parser)
    args = parser.parse_args(argv)
    mirror = mirror_at(args.mirror, args.ref, f"{SUITE}/test.sh")
    if mirror is None:
        return 0
    status = 0
    for kind in args.server or ["serve"]:
        with tempfile.TemporaryDirectory(prefix="thaw-l0-pytorch-runtime-") as tmp:
            work = Path(tmp)
            for name in ("unit_test.py", "infer.py"):
                mirror.copy(f"{SUITE}/{name}", work / SUITE / name)
            checks = run(kind, work)
            shutil.rmtree(work / "models", ignore_errors=True)
        for name, passed, detail in checks:
            print(
                f"{'passed' if passed else 'FAILED'}: {name}" + ("" if passed else f"\n  {detail}")
            )
        failed = sum(not passed for _, passed, _ in checks)
        print(f"L0_pytorch_python_runtime on thaw {kind}: {len(checks) - failed}/{len(checks)}")
        status |= 1 if failed else 0
    return status


if __name__ == "__main__":
    sys.exit(main())
