"""What one run of a Triton client example comes to: its verdict from its exit status and
output (`verdict`), the results table, and the masking that makes Triton's and Thaw's printed
output comparable (`mask`, `output_diff`)."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from tests.conformance.client_example_cases import Case

__all__ = ["Outcome", "mask", "output_diff", "results_table", "verdict"]


@dataclass(frozen=True)
class Outcome:
    """One example on one target: passed | failed | skipped, a one-line detail, its output."""

    outcome: str
    detail: str
    output: str = ""


def verdict(
    returncode: int,
    output: str,
    pass_line: str | None,
    deliberate: tuple[str, str] | None = None,
) -> Outcome:
    """An example's outcome from its exit status and output (stdout and stderr): passed,
    failed, or deliberate (a failure printing `deliberate`'s line: a difference kept on
    purpose)."""
    lines = output.strip().splitlines()
    tail = " | ".join(lines[-3:])
    if returncode != 0:
        failed = Outcome("failed", f"exit {returncode}: {tail}", output)
    elif pass_line is not None and not any(line.strip() == pass_line for line in lines):
        failed = Outcome("failed", f"exit 0 without {pass_line!r}: {tail}", output)
    else:
        return Outcome("passed", pass_line or "exit 0", output)
    if deliberate is not None and any(line.strip() == deliberate[0] for line in lines):
        return Outcome("deliberate", deliberate[1], output)
    return failed


_MASKS = (
    (re.compile(r"(localhost|127\.0\.0\.1):\d+"), r"\1:PORT"),
    # Timings and the clock: statistics' `ns` and `last_inference` in JSON, dicts and protobuf.
    (re.compile(r"""(["']?\b(?:ns|last_inference)["']?:\s?)\d+"""), r"\1N"),
    # Headers any HTTP server may add (aiohttp's Date and Server), in tritonclient's dict reprs.
    (re.compile(r""", '(?:Date|Server)': '[^']*'"""), ""),
    (re.compile(r"""'(?:Date|Server)': '[^']*', """), ""),
    (re.compile(r'(raw_output_contents: )".{200,}"'), r'\1"..."'),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "UUID"),
    (re.compile(r"0x[0-9a-f]{6,}"), "0xADDR"),
    (re.compile(r"(?i)^(date|server): .*$", re.M), r"\1: ..."),
)


def mask(output: str) -> str:
    """`output` with what differs between any two runs (ports, uuids, addresses, dates) masked."""
    for pattern, replacement in _MASKS:
        output = pattern.sub(replacement, output)
    return output


def output_diff(triton: str, thaw: str, *, context: int = 0) -> list[str]:
    """The unified diff of two runs' masked outputs, Triton's as the `-` side."""
    return list(
        difflib.unified_diff(
            mask(triton).splitlines(),
            mask(thaw).splitlines(),
            "triton",
            "thaw",
            n=context,
            lineterm="",
        )
    )


def results_table(cases: tuple[Case, ...], by_target: dict[str, dict[str, Outcome]]) -> str:
    """A markdown table: one row per example, one column per target, skip reasons last."""
    targets = list(by_target)
    head = ["example", *(f"thaw {t}" if t != "triton" else "Triton 2.51" for t in targets), "note"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case in cases:
        outcomes = [by_target[t].get(case.name) for t in targets]
        cells = [o.outcome if o else "-" for o in outcomes]
        notes = {o.detail for o in outcomes if o and o.outcome != "passed"}
        rows.append(f"| `{case.name}` | " + " | ".join(cells) + f" | {'; '.join(sorted(notes))} |")
    return "\n".join(rows)
