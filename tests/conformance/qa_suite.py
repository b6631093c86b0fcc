"""One QA suite of Triton's and the server starts its test.sh makes (tests.conformance.triton_qa).

Suite   qa/<name>: its test files, the repositories built for it, its runs, what is deselected
Run     one server start: a unittest target (or a script, or a refusal check) and its flags
SuiteRun what a suite that runs itself (`Suite.runner`) is given: mirror, ref, its directory
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from tests.conformance.qa_checkout import Result
from tests.fixtures.triton_qa_suite_repos import Mirror

__all__ = ["RepoBuilder", "Run", "Suite", "SuiteRun"]

RepoBuilder = Callable[[Path, Mirror], Path]


@dataclass(frozen=True)
class SuiteRun:
    """A suite whose cases are read from the mirror at run time runs itself with this."""

    mirror: Path  # the bare git mirror of triton-inference-server/server
    ref: str
    qa_dir: Path  # its qa/<name>, its `files` extracted there
    kind: str  # serve | up
    label: str  # the report's ref column


@dataclass(frozen=True)
class Run:
    """One server start: `target` (a unittest name, or a script and its arguments) against
    the `repo` built for it, with the flags and environment test.sh uses. `{qa_dir}` in a flag
    is the suite's directory (test.sh's `pwd`: `--model-repository={qa_dir}/models_0`)."""

    target: str
    repo: str
    serve_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    label: str = ""  # names the run in the report when a suite runs one file several times
    script_args: tuple[str, ...] | None = None  # set: `target` is a script, one row
    refusal: str = ""  # set: one row, passed when the server refuses to start saying this
    # test.sh's SERVER_LOG, for tests that read the server's log: the server's log, linked
    # there in the test's directory for the run
    server_log: str = ""
    pytest: bool = False  # `target` is a pytest-style file (no TestCase): run under pytest
    # False: test.sh's run_server_nowait (the test checks a server that is not live or not
    # ready): the run goes on once the server listens, not once it is ready
    ready: bool = True
    # the test signals the server itself: its pid goes to the test as SERVER_PID
    pass_pid: bool = False
    # test.sh's name for the run's repository when the test reads or edits it by that name
    # (`models/<model>/config.pbtxt`): linked to `repo` in the suite's directory for the run
    link: str = ""
    # What test.sh exports before it starts the server (a Python model reads it there).
    # In `serve_args`, `env` and `server_env`, `{qa_dir}` is the suite's directory this run
    # and `{triton_dir}` the directory holding its `qa/` (Triton's TRITON_DIR).
    server_env: tuple[tuple[str, str], ...] = ()
    # test.sh's grep of the server's log after the run: one more row, passed when it has this
    log_expects: str = ""

    def at(self, qa_dir: Path) -> Run:
        """This run with `{qa_dir}` in its flags and environments made `qa_dir`."""

        # test.sh's TRITON_DIR: the directory holding `qa/` (qa_dir is qa/<suite>[/<subtest>]).
        triton_dir = next(p.parent for p in (qa_dir, *qa_dir.parents) if p.name == "qa")

        def sub(text: str) -> str:
            return text.replace("{qa_dir}", str(qa_dir)).replace("{triton_dir}", str(triton_dir))

        return replace(
            self,
            serve_args=tuple(sub(arg) for arg in self.serve_args),
            env=tuple((k, sub(v)) for k, v in self.env),
            server_env=tuple((k, sub(v)) for k, v in self.server_env),
        )

    @property
    def file(self) -> str:
        return self.target.split(".", 1)[0] + ".py"


@dataclass(frozen=True)
class Suite:
    name: str  # qa/<name>
    files: tuple[str, ...]  # under qa/<name>
    repos: dict[str, RepoBuilder]
    runs: tuple[Run, ...]
    # (a test-id substring, the reason it is not run)
    deselect: tuple[tuple[str, str], ...] = field(default=())
    large: bool = False  # needs more memory than a small machine has: run with --with-large
    # Files under qa/ that test.sh runs from another directory (`../test_infer_shm_leak.py`),
    # copied into qa/<name> so that they run there (their paths are cwd-relative).
    beside: tuple[str, ...] = ()
    # Set: the suite's cases are read from the mirror when it runs (L0_model_config's case
    # directories); `runner` starts each server and returns every row, `runs` is empty.
    runner: Callable[[SuiteRun], list[Result]] | None = None
    # Set: `files` are read at this ref, not the run's (a later release's copy of a test whose
    # only change is one this machine's Python needs); the models still come from the run's.
    files_ref: str = ""
    # (file under qa/<name>, old text, new text): a change this machine's libraries need in a
    # test file no release of Triton's has made (NumPy 2 removed `np.NINF`: `-np.inf`), made
    # in the extracted copy before the run; each `old` must be there.
    edits: tuple[tuple[str, str, str], ...] = ()
