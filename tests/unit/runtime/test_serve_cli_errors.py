"""`thaw serve`'s refusal of a bad command line names every flag as it is typed, as `thaw up`
does: each setting the message names that a flag sets, not only the first one."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.process import cli as serve_cli


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "`--port` = 70000, must be in [0, 65535]"),
        (
            ["--allow-http", "false", "--allow-grpc", "false"],
            "`--allow-http` and `--allow-grpc` are both false: nothing to serve",
        ),
        (["--handoff-state", "state"], "`--handoff-state` needs `--handoff-socket`"),
        # a setting no one flag sets keeps its own name
        (["--model-load-thread-count", "0"], "`model_load_threads` = 0, must be in [1, 1024]"),
    ],
)
def test_a_refusal_names_the_flags_as_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert serve_cli.main([str(tmp_path), *args]) == 2
    assert capsys.readouterr().err.strip() == f"thaw serve: error: {message}"
