"""thawserver.repository_flags: the repository list and `--strict-model-config`'s warnings that
`thaw serve` and `thaw up` both give, and `thaw serve` printing them before its log starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from thawserver.repository_flags import model_repositories, strict_model_config_warnings

_ROOT = Path(__file__).resolve().parents[3]


def test_repo_first_then_each_model_repository_once(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert model_repositories(a, [str(b), f"{a}/", str(b)]) == (a, b)
    assert model_repositories(None, [str(b)]) == (b,)
    with pytest.raises(ValueError, match="no model repository"):
        model_repositories(None, [])


def test_a_link_to_a_repository_already_given_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a")
    with pytest.raises(ValueError, match="is given twice"):
        model_repositories(tmp_path / "a", [str(tmp_path / "link")])


def test_only_a_given_strict_model_config_warns() -> None:
    assert strict_model_config_warnings(None, disable_auto_complete=True) == []
    assert len(strict_model_config_warnings(True, disable_auto_complete=True)) == 1
    assert len(strict_model_config_warnings(False, disable_auto_complete=True)) == 2


def test_thaw_serve_prints_the_warning_on_stderr(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "thaw.cli", "serve", str(tmp_path / "missing"),
         "--strict-model-config=true"],
        capture_output=True, text=True, cwd=_ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 2  # the missing repository; the warning comes first
    assert out.stderr.startswith("Warning: '--strict-model-config' has been deprecated! Please use")


@pytest.mark.parametrize(
    ("url", "store"), [("gs://bucket/models", "Google Cloud Storage"), ("as://acct/c/m", "Azure")]
)
def test_a_cloud_store_thaw_cannot_read_is_refused_by_name(url: str, store: str) -> None:
    # Vertex AI's AIP_STORAGE_URI is a gs:// URL: said so, not "gs:/bucket is not a directory".
    with pytest.raises(ValueError, match=f"model repository {url}: {store}.* not supported"):
        model_repositories(None, [url])
    with pytest.raises(ValueError, match="not supported"):
        model_repositories(url, [])
