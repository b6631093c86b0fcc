"""before_after.py's trees: a temporary worktree whose code, not this checkout's, really runs.

The `thaw serve` a benchmark starts from the worktree (the worktree's own `benchmarks/peers.py`,
with `PYTHONPATH=<worktree>` as `before_after.py` runs it) imports every product module from the
worktree: Python's import log (`PYTHONVERBOSE`) of that server names no file elsewhere.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.before_after import (
    PRODUCT_PACKAGES,
    ROOT,
    Tree,
    check_tree_code,
    checked_out,
    tree_env,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs a git checkout"),
]

_START_THAW = """\
import sys
from pathlib import Path
from benchmarks.peers import ThawPeer, free_port
from benchmarks.workloads import write_add_sub
repo = Path(sys.argv[1])
write_add_sub(repo)
handle = ThawPeer().start(repo, free_port(), timeout_s=120)
handle.stop()
print(handle.log_path)
"""

_TOPS = "|".join(sorted({name.split(".")[0] for name in PRODUCT_PACKAGES} | {"thawserver"}))
_PRODUCT_FILE = re.compile(rf"(/[^\s']*?/(?:{_TOPS})/[^\s']*\.py)\b")


def _worktrees() -> str:
    return subprocess.run(
        ["git", "worktree", "list"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def test_thaw_serve_started_from_the_worktree_runs_the_worktrees_code(tmp_path: Path) -> None:
    with checked_out("base", "HEAD", tmp_path) as tree:
        assert tree.path == tmp_path / "base" and str(tree.path) in _worktrees()
        check_tree_code(tree)
        proc = subprocess.run(
            [sys.executable, "-c", _START_THAW, str(tmp_path / "models")],
            cwd=tree.path,
            env={**tree_env(tree), "PYTHONVERBOSE": "1"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        log = Path(proc.stdout.splitlines()[-1]).read_text(errors="replace")
        loaded = {Path(path) for path in _PRODUCT_FILE.findall(log)}
        assert tree.path / "runtime" / "process" / "server.py" in loaded
        assert {path for path in loaded if not path.is_relative_to(tree.path)} == set()
    assert not tree.path.exists()
    assert str(tree.path) not in _worktrees()


def test_a_tree_without_the_packages_is_refused(tmp_path: Path) -> None:
    """Nothing on PYTHONPATH: the editable install's finder supplies this checkout's code."""
    empty = Tree("base", "empty", tmp_path, "none")
    with pytest.raises(RuntimeError, match="loads code from elsewhere"):
        check_tree_code(empty)
