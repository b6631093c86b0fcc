"""Triton's qa/L0_storage_S3 against `thaw serve` (or `thaw up`), on a moto S3 server that
checks credentials as S3 does: test.sh's steps, in its order, each a check.

    unshare -n sh -c 'ip link set lo up && .venv/bin/python -m \
        tests.conformance.triton_l0_storage_s3 [--server serve] [--server up] [--keep DIR]'

For each way of giving credentials (`env`: AWS_* variables only; `env_dummy`: the variables
and dummy values in ~/.aws, the variables win; `config`: ~/.aws only) and each spelling of
the bucket's URL (`s3://bucket`, `s3://bucket/`, `s3://bucket//`, and the prefix `models`
between as many slashes):

    an empty bucket starts                         --model-repository=ROOT
    a repository holding one file (no model)       --model-repository=ROOT/models
    infer_test.py, the models at the bucket's root
    infer_test.py, the models under models/ beside other files

then: models copied into the bucket of a polling server are served; TRITON_AWS_MOUNT_DIRECTORY
holds the server's copy while it runs and nothing once it stopped; an explicit load, a version
added to the bucket, a load again (the index, compared as test.sh compares it); temporary
credentials (a session token); a wrong secret refuses the start; a model directory of 1,050
files besides the model's (S3 lists 1,000 keys a page) is copied whole.

Differences from test.sh, each because there is no AWS account here: the bucket is on a moto
server (`moto[server]`, `INITIAL_NO_AUTH_ACTION_COUNT` set so it checks each request's
signature against its IAM keys) that every start finds through boto3's `AWS_ENDPOINT_URL_S3`,
in the environment whichever way the credentials are given; `aws configure` is the same two
files written here, under a HOME of the run's own; the session token is an assumed role's
(moto accepts those; `get-session-token`'s it does not check); the poll case waits for the
models to be ready (at most 120 s) where test.sh sleeps 600 s. Models: gen_qa_models.py's
`onnx_*` and `libtorch_*` `float32_float32_float32` and `object_object_object` (the TensorFlow
and TensorRT ones are not served by Thaw; infer_test.py runs with BACKENDS="onnx libtorch"),
made by Triton's own script (tests/fixtures/triton_qa_gen.py). The expected refusal text of a
wrong secret is Triton's C++ client's ("Unable to create S3 filesystem client. Check account
credentials. Exception: '' Message: 'No response body.'"); Thaw's names the repository and
S3's own error instead, and the check asks that the start be refused and the log say the
credentials were refused. Ports 8000-8002: run it in a network namespace of its own. Triton's
files come from the server mirror (`--mirror`, default `$TRITON_SERVER_MIRROR`; without one
the run says so and exits 0). Exit status 0 when every check passed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conformance.qa_checkout import mirror_parser, qa_python_path
from tests.conformance.qa_servers import Server, add_server_argument, refusal, start
from tests.conformance.qa_test_sh import mirror_at
from tests.fixtures.moto_s3 import REGION, Keys, aws_client, moto_server_with_auth
from tests.fixtures.triton_qa_gen import copy_models, data_repo
from tests.fixtures.triton_qa_suite_repos import Mirror

__all__ = ["main"]

BUCKET = "triton-bucket-thaw"
CREDENTIAL_MODES = ("env", "env_dummy", "config")
SLASHES = ("", "/", "//")
# test.sh's models: each framework's float32 model, and every `*_object_object_object` one.
FRAMEWORKS = ("onnx", "libtorch")
RELOAD_MODEL = "libtorch_float32_float32_float32"
INFER_TEST_COUNT = 3  # test.sh's EXPECTED_NUM_TESTS
MANY_FILES = 1050
_COMMON = ("qa/common/infer_test.py", "qa/common/infer_util.py", "qa/common/test_util.py",
           "qa/common/shm_util.py")  # fmt: skip
_ARGS = ("--exit-timeout-secs=120",)
# test.sh's model of its last case: how many files its model directory holds, said at load.
_COUNT_FILES_PY = """\
import os


class TritonPythonModel:

    def initialize(self, args):
        count = 0
        model_dir = args['model_repository']
        for path in os.listdir(model_dir):
            if os.path.isfile(os.path.join(model_dir, path)):
                count += 1
        print('Found {} files in model directory'.format(count), flush=True)

    def execute(self):
        pass
"""


@dataclass
class Check:
    name: str
    passed: bool
    detail: str = ""


class Bucket:
    """The test bucket on the moto server at `endpoint`, written with `keys` (`aws s3 cp/rm`)."""

    def __init__(self, endpoint: str, keys: Keys) -> None:
        self.client = aws_client("s3", endpoint, keys)
        self.client.create_bucket(Bucket=BUCKET)

    def copy(self, local: Path, prefix: str = "") -> None:
        """`aws s3 cp LOCAL s3://bucket/PREFIX --recursive`."""
        for path in sorted(local.rglob("*")):
            if path.is_file():
                key = prefix + path.relative_to(local).as_posix()
                self.client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())

    def empty(self) -> None:
        """`aws s3 rm s3://bucket/ --recursive`."""
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=BUCKET):
            for item in page.get("Contents", []):
                self.client.delete_object(Bucket=BUCKET, Key=item["Key"])


class Credentials:
    """Where the servers find credentials: AWS_* variables (`variables`) and ~/.aws under
    `home` (`aws configure set ...`, or `rm ~/.aws/credentials ~/.aws/config`)."""

    def __init__(self, home: Path, endpoint: str) -> None:
        self.home = home
        self.endpoint = endpoint
        self.variables: dict[str, str] = {}

    def configure(self, keys: Keys | None, region: str = REGION) -> None:
        aws = self.home / ".aws"
        if keys is None:
            shutil.rmtree(aws, ignore_errors=True)
            return
        aws.mkdir(parents=True, exist_ok=True)
        token = f"aws_session_token = {keys.token}\n" if keys.token else ""
        (aws / "credentials").write_text(
            f"[default]\naws_access_key_id = {keys.key_id}\n"
            f"aws_secret_access_key = {keys.secret}\n{token}"
        )
        (aws / "config").write_text(f"[default]\nregion = {region}\n")

    def export(self, keys: Keys | None, region: str = REGION) -> None:
        self.variables = {} if keys is None else {
            "AWS_ACCESS_KEY_ID": keys.key_id, "AWS_SECRET_ACCESS_KEY": keys.secret,
            "AWS_DEFAULT_REGION": region, "AWS_SESSION_TOKEN": keys.token,
        }  # fmt: skip

    def environ(self, **extra: str) -> dict[str, str]:
        """A server's (or client's) whole environment: this one's without its AWS_* names."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(HOME=str(self.home), AWS_ENDPOINT_URL_S3=self.endpoint)
        env.update(self.variables)
        env.update(extra)
        return env


class Run:
    """One run's work directory, bucket, credentials and chosen server."""

    def __init__(self, kind: str, work: Path, mirror: Mirror, bucket: Bucket,
                 credentials: Credentials) -> None:  # fmt: skip
        self.kind = kind
        self.work = work
        self.mirror = mirror
        self.bucket = bucket
        self.credentials = credentials
        self.suite = work / "qa" / "L0_storage_S3"
        self.checks: list[Check] = []

    def check(self, name: str, passed: bool, detail: str = "") -> None:
        print(f"{'passed' if passed else 'FAILED'}: {name}{': ' + detail if detail else ''}",
              flush=True)  # fmt: skip
        self.checks.append(Check(name, passed, detail))

    @contextlib.contextmanager
    def server(self, repo: str, *args: str, **env: str) -> Iterator[Server | str]:
        """The server on `repo`, ready; or, when it did not start, the reason."""
        with _swapped_environ(self.credentials.environ(**env)):
            try:
                server = start(self.kind, repo, (*_ARGS, *args))
            except RuntimeError as exc:
                yield str(exc)[-2000:]
                return
        try:
            yield server
        finally:
            server.stop()

    def starts(self, name: str, repo: str) -> None:
        with self.server(repo) as server:
            self.check(name, not isinstance(server, str), _said(server))

    def infer_test(self, name: str, repo: str, *args: str) -> None:
        with self.server(repo, *args) as server:
            if isinstance(server, str):
                self.check(name, False, f"did not start: {server}")
                return
            self.check(name, *self._infer_test())

    def _infer_test(self) -> tuple[bool, str]:
        result = self.suite / "test_results.txt"
        result.unlink(missing_ok=True)
        env = self.credentials.environ(BACKENDS="onnx libtorch", PYTHONPATH=qa_python_path())
        proc = subprocess.run([sys.executable, "../common/infer_test.py"], cwd=self.suite,
                              env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
        counted = result.read_text() if result.exists() else ""
        want = f'"total": {INFER_TEST_COUNT}, "errors": 0, "failures": 0'
        if proc.returncode == 0 and want in counted:
            return True, ""
        return False, (proc.stdout + proc.stderr)[-1500:]


@contextlib.contextmanager
def _swapped_environ(env: dict[str, str]) -> Iterator[None]:
    """os.environ is `env` meanwhile (the servers' fixtures start from it)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _said(server: Server | str) -> str:
    return server if isinstance(server, str) else ""


def _root(slash: str) -> str:
    return f"s3://{BUCKET}{slash}"


def _models(slash: str) -> str:
    return f"s3://{BUCKET}/{slash}models{slash}"


def _qa_models(run: Run) -> Path:
    """test.sh's `models`: its frameworks' float32 and object models, version directories
    left empty by the script given a file of their own name (the CLI skips empty ones)."""
    models = run.work / "models"
    shutil.rmtree(models, ignore_errors=True)
    source = data_repo(run.mirror, "qa_model_repository")
    names = [f"{fw}_float32_float32_float32" for fw in FRAMEWORKS]
    names += [p.name for p in source.glob("*_object_object_object") if "nobatch" not in p.name]
    copy_models(run.mirror, "qa_model_repository", models, names)
    for config in models.glob("*/config.pbtxt"):
        config.write_text(config.read_text() + "instance_group [ { kind: KIND_GPU }]\n")
    for version in models.glob("*/*"):
        if version.is_dir() and not any(version.iterdir()):
            (version / version.name).touch()
    return models


def credential_cases(run: Run, keys: Keys) -> None:
    """test.sh's first loop: three ways to give credentials, three URL spellings each."""
    dummy = Keys("dummy_id", "dummy_key")
    for mode in CREDENTIAL_MODES:
        run.credentials.export(None if mode == "config" else keys)
        run.credentials.configure(
            {"env": None, "env_dummy": dummy, "config": keys}[mode],
            "dummy_region" if mode == "env_dummy" else REGION,
        )
        for slash in SLASHES:
            label = f"{mode}, {_root(slash)!r}"
            run.starts(f"{label}: an empty bucket starts", _root(slash))
            dummy_file = run.work / "only-a-file"
            shutil.rmtree(dummy_file, ignore_errors=True)
            (dummy_file / "models").mkdir(parents=True)
            (dummy_file / "models" / "dummy").touch()
            run.bucket.copy(dummy_file)
            run.starts(f"{label}: {_models(slash)!r} holding one file starts", _models(slash))
            run.bucket.empty()
            models = _qa_models(run)
            run.bucket.copy(models)
            run.infer_test(f"{label}: infer_test.py, models at the root", _root(slash))
            run.bucket.empty()
            run.bucket.copy(models, "models/")
            run.bucket.copy(_beside(run))
            run.infer_test(f"{label}: infer_test.py, models under models/ beside other files",
                           _models(slash))  # fmt: skip
            run.bucket.empty()
    run.credentials.export(keys)
    run.credentials.configure(keys)


def _beside(run: Run) -> Path:
    """test.sh copies its whole directory (`aws s3 cp . ...`): files beside `models/`."""
    beside = run.work / "beside"
    beside.mkdir(exist_ok=True)
    (beside / "test.sh").write_text("# beside the models\n")
    (beside / "client.env.log").write_text("a client log\n")
    return beside


def poll_case(run: Run) -> None:
    """A polling server on an empty bucket serves the models copied in after its start."""
    models = _qa_models(run)
    with run.server(_root(""), "--model-control-mode=poll", "--repository-poll-secs=2") as server:
        if isinstance(server, str):
            run.check("poll: models copied into the bucket are served", False, server)
            return
        run.bucket.copy(models)
        names = [p.name for p in models.iterdir()]
        ready = _wait(lambda: all(_ready(server, m) for m in names), 120)
        passed, detail = run._infer_test() if ready else (False, "not ready within 120 s")
        run.check("poll: models copied into the bucket are served", passed, detail)


def mount_case(run: Run) -> None:
    """TRITON_AWS_MOUNT_DIRECTORY holds the copy while the server runs, nothing after."""
    mount = run.work / "aws_localization_test"
    mount.mkdir()
    name = "TRITON_AWS_MOUNT_DIRECTORY"
    with run.server(_root(""), **{name: str(mount)}) as server:
        held = any(mount.iterdir())
        run.check(f"{name} holds the copy while serving", held and not isinstance(server, str),
                  _said(server) or ("" if held else "empty"))  # fmt: skip
    left = sorted(p.name for p in mount.iterdir())
    run.check(f"{name} cleared at the stop", not left, f"left: {left}" if left else "")
    shutil.rmtree(mount)
    run.bucket.empty()


def reload_case(run: Run) -> None:
    """Explicit model control: load version 1, add version 3 to the bucket, load again."""
    data = run.work / "reload-data"
    copy_models(run.mirror, "qa_model_repository", data, [RELOAD_MODEL])
    models = run.work / "reload"
    shutil.rmtree(models, ignore_errors=True)
    (models / RELOAD_MODEL).mkdir(parents=True)
    shutil.copytree(data / RELOAD_MODEL / "1", models / RELOAD_MODEL / "1")
    for name in ("config.pbtxt", "output0_labels.txt"):
        shutil.copyfile(data / RELOAD_MODEL / name, models / RELOAD_MODEL / name)
    config = models / RELOAD_MODEL / "config.pbtxt"
    config.write_text("".join(line for line in config.read_text().splitlines(keepends=True)
                              if not line.startswith("version_policy")))  # fmt: skip
    run.bucket.copy(models)
    first = f'[{{"name":"{RELOAD_MODEL}","version":"1","state":"READY"}}]'
    second = (f'[{{"name":"{RELOAD_MODEL}","version":"1","state":"UNAVAILABLE",'
              f'"reason":"unloaded"}},{{"name":"{RELOAD_MODEL}","version":"3",'
              '"state":"READY"}]')  # fmt: skip
    with run.server(f"s3://{BUCKET}", "--model-control-mode=explicit") as server:
        if isinstance(server, str):
            run.check("explicit: load, add version 3, load again", False, server)
            return
        _post(server, f"/v2/repository/models/{RELOAD_MODEL}/load")
        index = _post(server, "/v2/repository/index")
        run.check("explicit: the index after the first load", index == first, index)
        run.bucket.copy(data / RELOAD_MODEL / "3", f"{RELOAD_MODEL}/3/")
        _post(server, f"/v2/repository/models/{RELOAD_MODEL}/load")
        index = _post(server, "/v2/repository/index")
        run.check("explicit: the index after version 3 was added and loaded", index == second,
                  index)  # fmt: skip
    run.bucket.empty()


def temporary_credentials_case(run: Run, temporary: Keys, models: Path) -> None:
    """Temporary credentials (AWS_SESSION_TOKEN), in the variables and in ~/.aws."""
    run.credentials.export(temporary)
    run.credentials.configure(temporary)
    run.bucket.copy(models)
    run.infer_test("temporary credentials (a session token)", f"s3://{BUCKET}")


def access_decline_case(run: Run, keys: Keys) -> None:
    """A wrong secret: the start is refused and the log says why."""
    run.credentials.export(Keys(keys.key_id, "[Invalid]"))
    run.credentials.configure(None)
    with _swapped_environ(run.credentials.environ()):
        started, log = refusal(run.kind, f"s3://{BUCKET}", _ARGS)
    said = "credential" in log.lower() or "signature" in log.lower()
    lines = [line for line in log.splitlines() if BUCKET in line]
    run.check("a wrong secret refuses the start, naming the credentials", not started and said,
              lines[-1][-400:] if lines else log[-400:])  # fmt: skip
    run.credentials.export(keys)
    run.credentials.configure(keys)
    run.bucket.empty()


def many_files_case(run: Run) -> None:
    """A model directory of 1,050 files besides its version: every one is copied."""
    models = run.work / "many"
    (models / "model" / "1").mkdir(parents=True)
    (models / "model" / "1" / "model.py").write_text(_COUNT_FILES_PY)
    for i in range(1, MANY_FILES + 1):
        (models / "model" / f"0{i}.txt").touch()
    run.bucket.copy(models)
    with run.server(f"s3://{BUCKET}", "--model-control-mode=none") as server:
        said = f"Found {MANY_FILES} files in model directory"
        if not isinstance(server, str) and run.kind == "up":
            # Its models wait at zero: a request wakes it (the model's execute then fails).
            _post(server, "/v2/models/model/infer", b'{"inputs": []}')
        log = server if isinstance(server, str) else _wait_log(server, said, 60)
        run.check(f"{MANY_FILES} files in the model directory are all copied", said in log,
                  "" if said in log else log[-6000:])  # fmt: skip
    run.bucket.empty()


def _wait_log(server: Server, words: str, timeout_s: float) -> str:
    """The server's output (stdout, where a model's prints go, then its log) once it holds
    `words`, or after `timeout_s`."""

    def text() -> str:
        return "\n".join(server.stdout_lines) + "\n" + server.log_path.read_text(errors="replace")

    _wait(lambda: words in text(), timeout_s)
    return text()


def _wait(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


def _ready(server: Server, model: str) -> bool:
    try:
        with urllib.request.urlopen(f"{server.url}/v2/models/{model}/ready", timeout=10) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _post(server: Server, path: str, body: bytes = b"") -> str:
    request = urllib.request.Request(server.url + path, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=600) as answer:
            return str(answer.read().decode())
    except urllib.error.HTTPError as exc:
        return f"{exc.code} {exc.read().decode(errors='replace')}"


def run_all(kind: str, mirror: Mirror, work: Path) -> list[Check]:
    for path in _COMMON:
        mirror.copy(path, work / path)
    (work / "qa" / "L0_storage_S3").mkdir(parents=True)
    with moto_server_with_auth() as (endpoint, keys, temporary):
        bucket = Bucket(endpoint, keys)
        credentials = Credentials(work / "home", endpoint)
        run = Run(kind, work, mirror, bucket, credentials)
        credential_cases(run, keys)
        models = _qa_models(run)
        poll_case(run)
        run.bucket.empty()
        run.bucket.copy(models)
        mount_case(run)
        reload_case(run)
        temporary_credentials_case(run, temporary, models)
        run.credentials.export(keys)
        run.credentials.configure(keys)
        run.bucket.empty()
        access_decline_case(run, keys)
        many_files_case(run)
        return run.checks


def main(argv: list[str] | None = None) -> int:
    parser = mirror_parser((__doc__ or "").split("\n")[0])
    parser.add_argument("--ref", default="v2.51.0")
    add_server_argument(parser)
    parser.add_argument("--keep", type=Path, help="copy the work directory (logs) here after")
    args = parser.parse_args(argv)
    mirror = mirror_at(args.mirror, args.ref, "qa/L0_storage_S3/test.sh")
    if mirror is None:
        return 0
    status = 0
    for kind in args.server or ["serve"]:
        with tempfile.TemporaryDirectory(prefix="thaw-l0-storage-s3-") as tmp:
            checks = run_all(kind, mirror, Path(tmp))
            if args.keep is not None:
                shutil.copytree(tmp, args.keep / kind, dirs_exist_ok=True)
        failed = [c for c in checks if not c.passed]
        for c in failed:
            print(f"FAILED: {c.name}\n  {c.detail}")
        print(f"L0_storage_S3 on thaw {kind}: {len(checks) - len(failed)}/{len(checks)}")
        status |= 1 if failed else 0
    return status


if __name__ == "__main__":
    sys.exit(main())
