"""Prometheus text exposition (format 0.0.4): a page parsed into families, and rendered back.

Names are kept exactly as written: Triton's counters have no `_total` suffix
(`nv_inference_count`), and prometheus_client's parser would add one, so a replica's page is
read here instead. A replica's page is read as untrusted text: a line that is not the format
is skipped, never fatal, and a page is bounded by the caller.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from thawserver.metric_values import value_text

__all__ = ["Family", "Labels", "SampleKey", "parse", "render"]

Labels = tuple[tuple[str, str], ...]  # sorted by label name
SampleKey = tuple[str, Labels]  # (sample name, labels)

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|(?=}))')
_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")
_KINDS = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})


@dataclass
class Family:
    """One metric family: its samples by (sample name, labels)."""

    name: str
    kind: str = "untyped"
    help: str = ""
    samples: dict[SampleKey, float] = field(default_factory=dict)


def parse(text: str) -> dict[str, Family]:
    """The families of a page, by name, in page order."""
    families: dict[str, Family] = {}
    current: Family | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            current = _comment(line, families, current)
            continue
        sample = _sample(line)
        if sample is None:
            continue
        name, labels, value = sample
        family = current if current is not None and _belongs(name, current.name) else None
        if family is None:
            family = families.setdefault(name, Family(name))
        family.samples[(name, labels)] = value
    return families


def _comment(line: str, families: dict[str, Family], current: Family | None) -> Family | None:
    parts = line.split(None, 3)
    if len(parts) < 3 or parts[1] not in ("HELP", "TYPE") or not _NAME.fullmatch(parts[2]):
        return current
    family = families.setdefault(parts[2], Family(parts[2]))
    rest = parts[3] if len(parts) > 3 else ""
    if parts[1] == "HELP":
        family.help = rest.replace("\\n", "\n").replace("\\\\", "\\")
    elif rest in _KINDS:
        family.kind = rest
    return family


def _belongs(sample: str, family: str) -> bool:
    return sample == family or (sample.startswith(family) and sample[len(family) :] in _SUFFIXES)


def _sample(line: str) -> tuple[str, Labels, float] | None:
    match = _NAME.match(line)
    if match is None:
        return None
    name, rest = match.group(), line[match.end() :]
    labels: list[tuple[str, str]] = []
    if rest.startswith("{"):
        pos = 1
        while not rest[pos:].lstrip().startswith("}"):
            label = _LABEL.match(rest, pos)
            if label is None:
                return None
            labels.append((label.group(1), _unescape(label.group(2))))
            pos = label.end()
        rest = rest[rest.index("}", pos) + 1 :]
    fields = rest.split()
    if not fields:
        return None
    try:
        value = float(fields[0])
    except ValueError:
        return None
    return name, tuple(sorted(labels)), value


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return value_text(value)  # as the replicas (and Triton) write it


def render(families: Iterable[Family]) -> str:
    """The text of `families` (HELP and TYPE lines, then samples in a stable order)."""
    lines: list[str] = []
    for family in families:
        if not family.samples:
            continue
        help_text = family.help.replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"# HELP {family.name} {help_text}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for (name, labels), value in sorted(family.samples.items()):
            inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            lines.append(
                f"{name}{{{inner}}} {_number(value)}" if labels else f"{name} {_number(value)}"
            )
    return "\n".join(lines) + ("\n" if lines else "")
