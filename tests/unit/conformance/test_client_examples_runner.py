"""The pure parts of tests/conformance/triton_client_examples.py and its modules
(client_example_cases, client_example_results): an example's verdict from its exit status and
output, the masking that makes two servers' outputs comparable, the results table, the case
list's consistency, a start whose flag a target lacks, and reading the examples from a mirror."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conformance.client_example_cases import CASES, REPOSITORIES, Case, ServerMode
from tests.conformance.client_example_results import (
    Outcome,
    mask,
    output_diff,
    results_table,
    verdict,
)
from tests.conformance.triton_client_examples import extract_examples, main, run_cases
from tests.fixtures.client_example_models import ALL_MODELS


def test_an_example_passes_when_it_exits_0_and_prints_its_pass_line() -> None:
    assert verdict(0, "0 + 1 = 1\nPASS: infer\n", "PASS: infer").outcome == "passed"
    assert verdict(0, "anything", None) == Outcome("passed", "exit 0", "anything")


def test_an_example_fails_on_a_nonzero_exit_or_a_missing_pass_line() -> None:
    failed = verdict(1, "a\nb\nc\nFAILED : Repository Index\n", "PASS: model control")
    assert failed.outcome == "failed"
    assert failed.detail == "exit 1: b | c | FAILED : Repository Index"
    # grpc_explicit_int_content_client exits 0 when the server's error text is not Triton's:
    # only its missing PASS line tells.
    quiet = verdict(0, "15 - 1 = 14\n", "PASS: explicit int")
    assert quiet.outcome == "failed" and "without 'PASS: explicit int'" in quiet.detail
    assert verdict(0, "PASS: infer (and more)\n", "PASS: infer").outcome == "failed"


def test_only_the_named_failure_of_a_deliberate_difference_is_not_a_failure() -> None:
    why = ("FAILED: expected INTERNAL, got INVALID_ARGUMENT", "a 400 on purpose")
    printed = "load_model ...\nFAILED: expected INTERNAL, got INVALID_ARGUMENT\n"
    assert verdict(1, printed, "PASS: model control", why) == Outcome(
        "deliberate", "a 400 on purpose", printed
    )
    other = verdict(1, "FAILED : Repository Index\n", "PASS: model control", why)
    assert other.outcome == "failed"
    assert verdict(0, "PASS: model control\n", "PASS: model control", why).outcome == "passed"
    (model_control,) = (c for c in CASES if c.name == "simple_grpc_model_control")
    assert model_control.deliberate is not None


def test_masking_hides_what_differs_between_any_two_runs() -> None:
    triton = (
        "POST /v2/models/simple/infer at localhost:8000\n"
        "<HTTPSocketPoolResponse status=200 headers={'Content-Length': '0'}>\n"
        '{"success":{"count":1,"ns":26027055},"last_inference":1796350703126}\n'
        "      ns: 33944389\n"
        "sequence 5f0c1c52-4d1e-4a53-9f0e-2b7b1a0e9a11\n"
    )
    thaw = (
        "POST /v2/models/simple/infer at localhost:41235\n"
        "<HTTPSocketPoolResponse status=200 headers={'Date': 'Fri, 04 Dec 2026 02:18:58 GMT', "
        "'Content-Length': '0', 'Server': 'Python/3.11 aiohttp/3.14.5'}>\n"
        '{"success":{"count":1,"ns":1037679},"last_inference":1796350738588}\n'
        "      ns: 13805800\n"
        "sequence 0a1b2c3d-0000-4000-8000-123456789abc\n"
    )
    assert mask(triton) == mask(thaw)
    assert output_diff(triton, thaw) == []


def test_a_difference_users_see_survives_the_masking() -> None:
    diff = output_diff('version: "2.51.0"\nsame\n', 'version: "0.1.0"\nsame\n')
    assert diff[:2] == ["--- triton", "+++ thaw"]
    assert [line for line in diff if line[:1] in "+-" and line[1:2] != line[:1]] == [
        '-version: "2.51.0"',
        '+version: "0.1.0"',
    ]
    assert output_diff("status=400", "status=503") != []


def test_the_table_has_a_column_per_target_and_the_reasons_of_what_did_not_pass() -> None:
    cases = (Case("a", "a.py"), Case("b -d", "b.py", ("-d",)), Case("c", "c.py", skip="no GPU"))
    table = results_table(
        cases,
        {
            "serve": {"a": Outcome("passed", "PASS"), "b -d": Outcome("failed", "exit 1: x")},
            "triton": {"a": Outcome("passed", "PASS"), "b -d": Outcome("passed", "PASS")},
        },
    )
    lines = table.splitlines()
    assert lines[0] == "| example | thaw serve | Triton 2.51 | note |"
    assert lines[3] == "| `b -d` | failed | passed | exit 1: x |"
    assert lines[4] == "| `c` | - | - |  |"


def test_every_case_names_a_server_that_exists_and_a_url_it_can_be_given() -> None:
    names = [case.name for case in CASES]
    assert len(names) == len(set(names))
    for case in CASES:
        assert case.mode in REPOSITORIES, case
        assert case.url in ("http", "grpc", "fixed"), case
        assert set(REPOSITORIES[case.mode].models) <= set(ALL_MODELS)
    # The model-control examples count the repository index: 7 over HTTP, 8 over gRPC.
    assert len(REPOSITORIES["http-model-control"].models) == 7
    assert len(REPOSITORIES["grpc-model-control"].models) == 8
    skipped = {case.script for case in CASES if case.skip}
    assert skipped == {
        "simple_http_cudashm_client.py",
        "simple_grpc_cudashm_client.py",
        "image_client.py",
        "grpc_image_client.py",
        "ensemble_image_client.py",
    }


def test_a_server_flag_the_target_lacks_is_named_and_nothing_is_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test.sh start whose tritonserver flag `thaw serve` does not take is reported
    `unsupported`, naming the flag, never run without it (nor counted as a failure)."""
    monkeypatch.setitem(
        REPOSITORIES, "odd-start", ServerMode(("simple",), flags=("--no-such-flag=1",))
    )
    case = Case("x", "x.py", mode="odd-start")
    results = run_cases((case,), tmp_path, "serve", verbose=False)
    assert results == {"x": Outcome("unsupported", "thaw serve does not take --no-such-flag")}


def test_without_a_mirror_the_run_says_so_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mirror", ""]) == 0
    assert "$TRITON_CLIENT_MIRROR" in capsys.readouterr().err


def test_examples_are_read_from_the_mirror_and_a_missing_one_is_named(tmp_path: Path) -> None:
    work = tmp_path / "work"
    examples = work / "src" / "python" / "examples"
    examples.mkdir(parents=True)
    (examples / "a.py").write_text("print('PASS: a')\n")

    def git(*args: str, cwd: Path = work) -> None:
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "examples")
    mirror = tmp_path / "mirror.git"
    git("clone", "-q", "--mirror", str(work), str(mirror), cwd=tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    cases = (Case("a", "a.py"), Case("b", "b.py"), Case("c", "c.py", skip="no GPU"))
    assert extract_examples(mirror, "HEAD", cases, out) == ["b.py"]
    assert sorted(p.name for p in out.iterdir()) == ["a.py"]
