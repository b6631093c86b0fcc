"""`TORCH_COMPILE_OPTIONAL_PARAMETERS`, the model parameter Triton's PyTorch backend reads for
`torch.compile`, parsed strictly into `CompileSettings`.

A JSON object of `fullgraph`, `dynamic`, `backend`, `mode`, `options`, `disable`; present, the
runtime compiles a torch.export program at load and the snapshotter builds its compile caches
ahead (snapshotter.compile_cache), both from these settings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tritonconfig.errors import ModelConfigError
from tritonconfig.schema import mc

__all__ = [
    "TORCH_COMPILE_MODES",
    "TORCH_COMPILE_PARAMETER",
    "CompileSettings",
    "compile_settings",
    "parse_compile_settings",
]

TORCH_COMPILE_PARAMETER = "TORCH_COMPILE_OPTIONAL_PARAMETERS"
TORCH_COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_KEYS = {"fullgraph": bool, "dynamic": bool, "backend": str, "mode": str, "options": dict}


@dataclass(frozen=True)
class CompileSettings:
    """The `torch.compile` arguments of one model (Triton's parameter, validated)."""

    fullgraph: bool = False
    dynamic: bool | None = None
    backend: str = "inductor"
    mode: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `torch.compile` (`mode` and `options` are exclusive there)."""
        out: dict[str, Any] = {"fullgraph": self.fullgraph, "backend": self.backend}
        if self.dynamic is not None:
            out["dynamic"] = self.dynamic
        if self.mode is not None and self.mode != "default":
            out["mode"] = self.mode
        if self.options:
            out["options"] = dict(self.options)
        return out


def parse_compile_settings(raw: str) -> CompileSettings | None:
    """Settings from the parameter's JSON text; None when it says `{"disable": true}`.
    Raises ModelConfigError (naming the parameter) on anything else malformed."""
    name = TORCH_COMPILE_PARAMETER
    try:
        doc = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError) as exc:
        raise ModelConfigError(f"parameter `{name}` is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ModelConfigError(f"parameter `{name}` = {raw!r}, must be a JSON object")
    if doc.get("disable") is True:
        return None
    for key, value in doc.items():
        want = _KEYS.get(key) if key != "disable" else bool
        if want is None:
            raise ModelConfigError(f"parameter `{name}`: unknown key {key!r} (known: {_known()})")
        if not isinstance(value, want):
            raise ModelConfigError(
                f"parameter `{name}`: `{key}` = {value!r}, must be {want.__name__}"
            )
    mode = doc.get("mode")
    if mode is not None and mode not in TORCH_COMPILE_MODES:
        raise ModelConfigError(
            f"parameter `{name}`: `mode` = {mode!r}, must be one of {TORCH_COMPILE_MODES}"
        )
    if mode not in (None, "default") and doc.get("options"):
        raise ModelConfigError(f"parameter `{name}`: give `mode` or `options`, not both")
    return CompileSettings(
        fullgraph=doc.get("fullgraph", False),
        dynamic=doc.get("dynamic"),
        backend=doc.get("backend", "inductor"),
        mode=mode,
        options=doc.get("options", {}),
    )


def _known() -> str:
    return ", ".join([*_KEYS, "disable"])


def compile_settings(config: mc.ModelConfig) -> CompileSettings | None:
    """The compile settings of a `ModelConfig`, or None when the model does not ask for it."""
    params = config.parameters
    if TORCH_COMPILE_PARAMETER not in params:
        return None
    return parse_compile_settings(params[TORCH_COMPILE_PARAMETER].string_value)
