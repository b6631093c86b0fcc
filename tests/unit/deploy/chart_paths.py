"""Where the deploy tests find the repository, the Helm chart and `helm`, the type of the
`render` fixture (conftest.py) that renders the chart, and readers of what it rendered."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART = REPO_ROOT / "deploy" / "helm" / "thaw"
TOOLS = REPO_ROOT / ".tools" / "bin"

# render(values_dict, *set_args, check=True) -> the rendered objects (`helm template`)
Render = Callable[..., list[dict[str, Any]]]


def runtime_args(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each warm pool's runtime container args, by placement class (at least one pool)."""
    pools = {}
    for o in objects:
        labels = o["metadata"]["labels"]
        if o["kind"] == "Deployment" and labels.get("app.kubernetes.io/component") == "runtime":
            (container,) = o["spec"]["template"]["spec"]["containers"]
            pools[labels["thaw.dev/placement-class"]] = list(container["args"])
    assert pools
    return pools


_TOKEN_FLAG = "--internal-token-file="
_mounted_token: Path | None = None


def as_mounted(args: list[str]) -> list[str]:
    """A container's rendered args with the Secret the kubelet would mount (the deployment's
    token, `--internal-token-file=/etc/thaw-internal/token`) at a local file holding a token,
    so that `build_config` reads the args as the pod's process would."""
    global _mounted_token
    if _mounted_token is None:
        import tempfile

        from thawwire.internal_calls import new_token, write_token

        _mounted_token = Path(tempfile.mkdtemp(prefix="thaw-chart-token-")) / "token"
        write_token(_mounted_token, new_token())
    return [
        f"{_TOKEN_FLAG}{_mounted_token}" if arg.startswith(_TOKEN_FLAG) else arg for arg in args
    ]
