"""The answer to a repository load or unload call when the model-control API is off.

Triton serves load/unload only in `--model-control-mode explicit` and answers every other mode
with this message (observed on 2.51, for `none` and `poll` alike); `thaw serve` and `thaw up`
both keep the API off unless started with `--model-control-mode explicit`, and say so.
"""

from __future__ import annotations

__all__ = ["CONTROL_DISABLED"]

# Word for word Triton's, so that clients matching on it keep working.
CONTROL_DISABLED = "explicit model load / unload is not allowed if polling is enabled"
