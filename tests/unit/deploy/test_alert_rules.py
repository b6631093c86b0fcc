"""deploy/prometheus/thaw-alerts.yaml: valid rules (`promtool check rules`) that fire on the
stories of thaw-alerts.test.yaml and only there (`promtool test rules`).

promtool comes with Debian's `prometheus` package (`make system-deps` installs it); without it
these tests skip, saying so.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

RULES_DIR = Path(__file__).resolve().parents[3] / "deploy" / "prometheus"
RULES = RULES_DIR / "thaw-alerts.yaml"
RULE_TESTS = RULES_DIR / "thaw-alerts.test.yaml"
OPERATING = Path(__file__).resolve().parents[3] / "docs" / "operating.md"

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not installed (Debian package `prometheus`: make system-deps)",
)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=60, check=False
    )


def _alerts() -> list[dict[str, object]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


@needs_promtool
def test_the_rules_are_valid() -> None:
    done = _promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in done.stdout


@needs_promtool
def test_every_alert_fires_on_its_story_and_only_there() -> None:
    done = _promtool("test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_story_a_severity_and_a_runbook_section() -> None:
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    runbook = OPERATING.read_text()
    for rule in _alerts():
        name = str(rule["alert"])
        assert name in tested, f"{name} has no promtool story where it fires"
        labels = rule["labels"]
        assert isinstance(labels, dict) and labels["severity"] in {"critical", "warning"}
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        assert annotations["runbook"] == f"docs/operating.md#{name.lower()}"
        assert f"### {name}" in runbook, f"docs/operating.md has no runbook section for {name}"
