"""Triton's qa/L0_sagemaker against `thaw serve --allow-sagemaker`: sagemaker_test.py's nine
cases (JSON and binary requests and responses with SageMaker's content types, four malformed
binary headers) on port 8080 and on 8000 (`--sagemaker-port`), then test.sh's single-model
checks: a safe port range that leaves out the HTTP port refuses the start in Triton's words, an
invocation without SAGEMAKER_TRITON_DEFAULT_MODEL_NAME names Triton's placeholder model, and
`/ping` is not 200 while the model failed to load; then its multi-model endpoint:
sagemaker_multi_model_test.py's seven cases (load, 409 for a second load, list, get, invoke in
JSON and binary, unload and 404, an ensemble loaded from one directory with its steps).

    unshare -n -m sh -c 'ip link set lo up && \
        .venv/bin/python -m tests.conformance.triton_l0_sagemaker'

Not run: test.sh itself, which starts the SageMaker container's `serve` script (the flags it
gives tritonserver are given here, as test.sh's own starts give them, and for the multi-model
part as `serve` gives them with SAGEMAKER_MULTI_MODEL=true: an empty repository, explicit
model control, namespacing, `/ping` asking live). As test.sh, the multi-model part links
/opt/ml/models to its models (the test's urls name it) and removes the link after; it is left
out, and says so, where /opt/ml/models exists already or cannot be made. The tests and
qa/common/test_util.py are read from the server mirror (`--mirror`, default
`$TRITON_SERVER_MIRROR`; without one the run says so and exits 0); the ONNX models are made
by Triton's qa/common/gen_qa_models.py and gen_qa_identity_models.py
(tests/fixtures/triton_qa_gen.py), the ensemble's `nop_TYPE_FP32_-1` step (Triton's C++
identity test backend) is a Python identity. Uses ports 8000 and 8080: run it in a network
namespace of its own, as above. Exit status 0 when every check passed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.conformance.qa_test_sh import mirror_at
from tests.fixtures.triton_qa_gen import copy_models
from tests.fixtures.triton_qa_reshape_repos import IDENTITY_BY_CONFIG_PY
from tests.fixtures.triton_qa_suite_repos import Mirror

__all__ = ["main"]

MODEL = "onnx_int32_int32_int32"
PYTHON_MODEL = "python_float32_float32_float32"
NOP = "nop_TYPE_FP32_-1"
_LABELS = re.compile(r"label_filename:.*")
_NAME = re.compile(r"^name:.*", re.MULTILINE)
# test.sh's second start: the `serve` script's flags for one model (SageMaker's own port only).
FLAGS = ("--allow-sagemaker=true", "--allow-grpc=false", "--allow-http=false",
         "--allow-metrics=false", "--model-control-mode=explicit")  # fmt: skip
UNIT_TEST_COUNT = 9
MULTI_MODEL_TEST_COUNT = 7
# Where the multi-model test's urls are (`/opt/ml/models/<hash>/model`), linked as test.sh does.
SAGEMAKER_MODELS = Path("/opt/ml/models")
# `serve` with SAGEMAKER_MULTI_MODEL=true: an empty repository of its own, namespacing on.
MULTI_MODEL_FLAGS = ("--allow-sagemaker=true", "--allow-grpc=false", "--allow-http=false",
                     "--allow-metrics=false", "--model-control-mode=explicit",
                     "--model-namespacing=true")  # fmt: skip


def _status(url: str, *, data: bytes | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=10) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


class _Server:
    """`thaw serve ARGS` with `env`, its log in `log`; `ready(port)` waits for /ping 200."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "thaw.cli", "serve", *args],
                                         stdout=out, stderr=subprocess.STDOUT, env=env)  # fmt: skip

    def ready(self, port: int, timeout_s: float = 60) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            if _status(f"http://localhost:{port}/ping")[0] == 200:
                return True
            time.sleep(0.25)
        return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)


def _client_tests(
    suite: Path,
    env: dict[str, str],
    test: tuple[str, str] = ("sagemaker_test.py", "SageMakerTest"),
    count: int = UNIT_TEST_COUNT,
) -> tuple[bool, str]:
    """`test` (a file and its class): its `count` cases passed, and its output."""
    result = suite / "test_results.txt"
    result.unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, *test], cwd=suite, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    counted = result.read_text() if result.exists() else ""
    passed = proc.returncode == 0 and f'"total": {count}, "errors": 0, "failures": 0' \
        in counted  # fmt: skip
    return passed, proc.stdout + proc.stderr


def _checks(work: Path, suite: Path, models: Path, env: dict[str, str]) -> list[tuple[str, bool]]:
    """Each check's name and verdict, in test.sh's order."""
    results: list[tuple[str, bool]] = []
    named = {**env, "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "sm_model"}
    repo = f"--model-repository={models}"
    for port in (8080, 8000):
        server = _Server([repo, *FLAGS, f"--sagemaker-port={port}", "--load-model=sm_model"],
                         named, work / f"server-{port}.log")  # fmt: skip
        try:
            ok = server.ready(port)
            passed, output = _client_tests(suite, {**named, "SAGEMAKER_BIND_TO_PORT": str(port)})
            results.append((f"sagemaker_test.py on port {port}", ok and passed))
            if not passed:
                print(output[-3000:])
        finally:
            server.stop()
    refused = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "serve", repo, "--allow-sagemaker=true",
         "--allow-grpc", "false", "--allow-http", "true", "--allow-metrics", "false",
         "--model-control-mode=explicit", "--load-model=sm_model",
         "--sagemaker-safe-port-range=8081-9000"],
        env=named, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    words = "The server cannot listen to HTTP requests at port 8000"
    results.append(("safe port range refuses HTTP on 8000",
                    refused.returncode != 0 and words in refused.stderr))  # fmt: skip
    server = _Server([repo, *FLAGS, "--exit-on-error=false"], env, work / "server-unnamed.log")
    try:
        server.ready(8080, timeout_s=5)  # ready at once: nothing to load
        _, body = _status("http://localhost:8080/invocations", data=b"dummy")
        words = "Request for unknown model: 'unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME' is " \
            "not found"  # fmt: skip
        results.append(("invocation of the placeholder model", words in body))
    finally:
        server.stop()
    for path in (models / "sm_model" / "1").iterdir():
        path.unlink()  # test.sh's `rm models/sm_model/1/*`: the model cannot load
    server = _Server([repo, *FLAGS, "--load-model=sm_model", "--exit-on-error=false"], named,
                     work / "server-broken.log")  # fmt: skip
    try:
        time.sleep(5)  # test.sh's wait
        status, _ = _status("http://localhost:8080/ping")
        results.append(("/ping not 200 while the model failed to load", status != 200))
    finally:
        server.stop()
    return results


def _multi_model_repository(work: Path, mirror: Mirror) -> Path:
    """test.sh's `models` of the multi-model part: two models at `<hash>/model` and an
    ensemble's three at `123456789ensemble/model`."""
    models = work / "mme"
    data = work / "data"
    copy_models(mirror, "qa_model_repository", data, [MODEL])
    copy_models(mirror, "qa_identity_model_repository", data, ["onnx_zero_1_float32"])
    copy_models(mirror, "qa_ensemble_model_repository", data, [NOP])
    for digest, source, name in [("123456789abcdefghi", MODEL, "sm_mme_model_1"),
                                 ("987654321ihgfedcba", "onnx_zero_1_float32",
                                  "sm_mme_model_2")]:  # fmt: skip
        model = models / digest / "model"
        shutil.copytree(data / source, model)
        shutil.rmtree(model / "2", ignore_errors=True)
        shutil.rmtree(model / "3", ignore_errors=True)
        config = model / "config.pbtxt"
        config.write_text(config.read_text().replace(source, name))
    ensemble = models / "123456789ensemble" / "model"
    add_sub = ensemble / PYTHON_MODEL
    (add_sub / "1").mkdir(parents=True)
    mirror.copy("qa/python_models/add_sub/model.py", add_sub / "1" / "model.py")
    text = mirror.read("qa/python_models/add_sub/config.pbtxt").decode()
    (add_sub / "config.pbtxt").write_text(_LABELS.sub("", text) + "max_batch_size: 64\n")
    fan = ensemble / f"fan_{PYTHON_MODEL}"
    (fan / "1").mkdir(parents=True)
    text = mirror.read("qa/python_models/fan_add_sub/config.pbtxt").decode()
    text = text.replace('model_name: "ENSEMBLE_MODEL_NAME"', f'model_name: "{PYTHON_MODEL}"')
    text = _NAME.sub(f'name: "fan_{PYTHON_MODEL}"', _LABELS.sub("", text), count=1)
    (fan / "config.pbtxt").write_text(text + "max_batch_size: 64\n")
    nop = ensemble / NOP
    shutil.copytree(data / NOP, nop)
    config = nop / "config.pbtxt"
    config.write_text(config.read_text().replace('backend: "identity"', 'backend: "python"'))
    (nop / "1").mkdir(exist_ok=True)
    (nop / "1" / "model.py").write_text(IDENTITY_BY_CONFIG_PY)
    return models


def _multi_model_checks(work: Path, suite: Path, models: Path, env: dict[str, str]) -> \
        list[tuple[str, bool]]:  # fmt: skip
    """sagemaker_multi_model_test.py's cases on `serve`'s multi-model start, /opt/ml/models
    linked to `models` meanwhile."""
    if SAGEMAKER_MODELS.exists() or SAGEMAKER_MODELS.is_symlink():
        print(f"multi-model part left out: {SAGEMAKER_MODELS} exists already")
        return []
    made_parent = not SAGEMAKER_MODELS.parent.exists()
    try:
        SAGEMAKER_MODELS.parent.mkdir(parents=True, exist_ok=True)
        SAGEMAKER_MODELS.symlink_to(models)
    except OSError as exc:
        print(f"multi-model part left out: cannot link {SAGEMAKER_MODELS}: {exc}")
        return []
    empty = work / "sagemaker-empty"
    empty.mkdir()
    mme_env = {**env, "SAGEMAKER_MULTI_MODEL": "true", "SAGEMAKER_TRITON_PING_MODE": "live"}
    server = _Server([f"--model-repository={empty}", *MULTI_MODEL_FLAGS], mme_env,
                     work / "server-multi-model.log")  # fmt: skip
    try:
        ok = server.ready(8080)
        passed, output = _client_tests(
            suite, mme_env, ("sagemaker_multi_model_test.py", "SageMakerMultiModelTest"),
            MULTI_MODEL_TEST_COUNT,
        )  # fmt: skip
        if not passed:
            print(output[-3000:])
        return [("sagemaker_multi_model_test.py (multi-model endpoint)", ok and passed)]
    finally:
        server.stop()
        SAGEMAKER_MODELS.unlink()
        if made_parent:
            SAGEMAKER_MODELS.parent.rmdir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--mirror", type=Path, default=os.environ.get("TRITON_SERVER_MIRROR", ""))
    parser.add_argument("--ref", default="v2.51.0")
    parser.add_argument("--keep", type=Path, help="copy the work directory (logs) here after")
    args = parser.parse_args(argv)
    test = "qa/L0_sagemaker/sagemaker_test.py"
    multi_model_test = "qa/L0_sagemaker/sagemaker_multi_model_test.py"
    mirror = mirror_at(args.mirror, args.ref, test)
    if mirror is None:
        return 0
    with tempfile.TemporaryDirectory(prefix="thaw-l0-sagemaker-") as tmp:
        work = Path(tmp)
        suite = work / "qa" / "L0_sagemaker"
        mirror.copy(test, suite / "sagemaker_test.py")
        mirror.copy(multi_model_test, suite / "sagemaker_multi_model_test.py")
        mirror.copy("qa/common/test_util.py", work / "qa" / "common" / "test_util.py")
        models = work / "models"
        copy_models(mirror, "qa_model_repository", work / "data", [MODEL])
        shutil.copytree(work / "data" / MODEL, models / "sm_model")
        shutil.rmtree(models / "sm_model" / "2")
        shutil.rmtree(models / "sm_model" / "3")
        config = models / "sm_model" / "config.pbtxt"
        config.write_text(config.read_text().replace(MODEL, "sm_model"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAGEMAKER_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
        results = _checks(work, suite, models, env)
        results += _multi_model_checks(work, suite, _multi_model_repository(work, mirror), env)
        if args.keep is not None:
            shutil.copytree(work, args.keep, dirs_exist_ok=True)
    for name, passed in results:
        print(f"{'passed' if passed else 'FAILED'}: {name}")
    failed = sum(not passed for _, passed in results)
    print(f"L0_sagemaker on thaw serve: {len(results) - failed}/{len(results)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
