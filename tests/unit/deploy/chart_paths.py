"""Where the deploy tests find the repository, the Helm chart and `helm`, and the type of the
`render` fixture (conftest.py) that renders the chart."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART = REPO_ROOT / "deploy" / "helm" / "thaw"
TOOLS = REPO_ROOT / ".tools" / "bin"

# render(values_dict, *set_args, check=True) -> the rendered objects (`helm template`)
Render = Callable[..., list[dict[str, Any]]]
