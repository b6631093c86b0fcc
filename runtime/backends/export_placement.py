"""A `torch.export` program put on its instance's device, ops pinned to the CPU at export included.

`ExportedProgram.module().to("cuda:N")` moves parameters and buffers, but not the devices written
into the graph at export time: `torch.ones(3, device="cpu")`, `x.to("cpu")` and factory ops
traced on a CPU machine stay `device=cpu` kwargs. On a GPU such a program computes those ops on
the CPU and copies between host and GPU on every request (or fails mixing devices). So before a
GPU instance runs a program:

    ops on another device? ─no─▶ as is
        │ yes
    torch.export.passes.move_to_device_pass(program, device): constants, state and the graph's
        │ device kwargs rewritten (torch >= 2.6)
    still some (no such pass, or ops it does not rewrite) ─▶ a counted fallback
        (`cpu_placed_ops`), the ops named in the log line: it serves, slower
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["foreign_device_ops", "place_program"]

logger = logging.getLogger(__name__)


def foreign_device_ops(graph: Any, device: str) -> list[str]:
    """Graph nodes whose `device` argument names another device type than `device`'s."""
    import torch

    want = torch.device(device).type
    out = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        values = [node.kwargs.get("device"), *node.args]
        for value in values:
            if isinstance(value, torch.device | str) and _is_device(value):
                if torch.device(value).type != want:
                    out.append(f"{node.name} ({node.target})")
                break
    return out


def _is_device(value: Any) -> bool:
    import torch

    if isinstance(value, torch.device):
        return True
    try:
        torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        return False
    return value.split(":")[0] in ("cpu", "cuda", "meta", "mps", "xpu")


def place_program(program: Any, device: str) -> tuple[Any, list[str]]:
    """`program` with its graph's devices moved to `device` where torch can, and the ops that
    still name another device (empty: all placed)."""
    found = foreign_device_ops(program.graph, device)
    if not found:
        return program, []
    try:
        from torch.export.passes import move_to_device_pass
    except ImportError:  # torch < 2.6
        return program, found
    moved = move_to_device_pass(program, device)
    left = foreign_device_ops(moved.graph, device)
    logger.debug("moved %d op(s) of an exported program to %s; %d left", len(found) - len(left),
                 device, len(left))  # fmt: skip
    return moved, left
