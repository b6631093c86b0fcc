"""The qa/L0_secure_grpc, qa/L0_data_compression and qa/L0_http_fuzz runners: test.sh's client
runs, the mutated client files, and a run without mirrors (or boofuzz) that says so and passes;
the part of qa/L0_http's test.sh its runner runs with bash (the curl checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance import triton_l0_secure_grpc as runner


def test_the_steps_are_test_shs_fourteen_python_client_runs() -> None:
    files = {name: Path(name) for name in
             ("ca", "client_key", "client_cert", "client2_key", "client2_cert")}  # fmt: skip
    all_steps = [s for start in runner.STARTS for s in runner.steps(start, files)]
    assert len(all_steps) == 14
    assert sum(s.passes for s in all_steps) == 6  # --ssl with the client's pair, each start
    assert all("--ssl" not in s.args for s in all_steps if "no_ssl" in s.name)
    assert all("client2_key" in s.args for s in all_steps if "wrong_ssl" in s.name)


def test_the_mutated_copy_capitalises_each_word_as_test_shs_sed(tmp_path: Path) -> None:
    source = tmp_path / "client.key"
    source.write_text("-----BEGIN PRIVATE KEY-----\nabc+def/ghi\n")
    mutated = runner._mutated(source, tmp_path / "client2.key")
    assert mutated.read_text() == "-----BEGIN PRIVATE KEY-----\nAbc+Def/Ghi\n"


def test_without_mirrors_the_run_is_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["--mirror", "", "--client-mirror", ""]) == 0
    assert "skipped" in capsys.readouterr().err


def test_the_data_compression_runs_are_test_shs_twelve_python_client_runs() -> None:
    from tests.conformance import triton_l0_data_compression as compression

    made = compression.runs()
    assert len(made) == 12
    assert all(
        a.count("gzip") + a.count("deflate") >= 1 and a.count("gzip") < 2 and a.count("deflate") < 2
        for _, _, a in made
    )
    assert compression.main(["--mirror", "", "--client-mirror", ""]) == 0


def test_the_http_fuzz_run_without_boofuzz_says_so_and_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.conformance import triton_l0_http_fuzz as fuzz

    assert fuzz.main(["--mirror", "", "--boofuzz-path", str(tmp_path)]) == 0
    assert "boofuzz not installed" in capsys.readouterr().err


def test_the_curl_section_is_test_shs_from_its_first_curl_out_to_that_servers_kill() -> None:
    from tests.conformance.triton_l0_http import curl_section

    test_sh = (
        "run_server\nset +e\npython http_test.py\n"
        "rm -f ./curl.out\ncode=`curl -s localhost:8000/v2`\nRET=1\n"
        "kill $SERVER_PID\nwait $SERVER_PID\nrm -f ./curl.out\n"
    )
    assert curl_section(test_sh) == "rm -f ./curl.out\ncode=`curl -s localhost:8000/v2`\nRET=1\n"
    assert curl_section("run_server\nkill $SERVER_PID\n") is None
