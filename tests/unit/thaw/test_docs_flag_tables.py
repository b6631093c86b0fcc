"""The docs' flag tables and the commands' parsers agree: every flag a table names exists on
the command its page documents, every flag `--help` shows is in one of that command's tables,
and a default a table states as a plain value is the parser's default.

A flag table is a Markdown table whose header's first cell says `flag`; its rows name flags in
backticks in their first cell (`` `--port N` ``); a column headed `default` gives defaults; a
header whose first cell names `` `thaw CMD` `` makes the table that command's alone.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from activator.config import ScaleSettings
from activator.process import cli as up_cli
from activator.process import prefetch_cli, status_cli
from runtime.process import cli as serve_cli
from snapshotter import cli as snapshot_cli

DOCS = Path(__file__).resolve().parents[3] / "docs"

_Register = Callable[[argparse._SubParsersAction], None]
_COMMANDS: dict[str, _Register] = {
    "serve": serve_cli.register,
    "up": up_cli.register,
    "status": status_cli.register,
    "prefetch": prefetch_cli.register,
}

# page -> the commands whose flags its tables document (a row's flag exists on one of them).
PAGES: dict[str, tuple[str, ...]] = {
    "serve.md": ("serve",),
    "grpc.md": ("serve", "up"),
    "gpu.md": ("serve", "up"),
    "scale-to-zero.md": ("up",),
    "density.md": ("up",),
    "kubernetes.md": ("up", "prefetch"),
    "operating.md": ("status", "up"),
    "openai.md": ("serve", "up"),
}

# Flags named only in the prose of pages other engineers are editing (reported, not edited
# here); each must still be missing from the tables, so whoever tables it removes it here.
KNOWN_UNTABLED: dict[str, set[str]] = {}

# Rows that are known stale on pages other engineers are editing: each must still be stale
# (strict xfail), so whoever fixes the page also removes its entry here.
KNOWN_STALE_DEFAULTS: set[tuple[str, str]] = set()

_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
_CODE = re.compile(r"`([^`]*)`")


@dataclass(frozen=True)
class Row:
    page: str
    line: int
    flags: tuple[str, ...]
    default: str | None  # the `default` column's cell, when the table has one
    commands: tuple[str, ...]  # the commands the row's table documents


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _flags(cell: str) -> tuple[str, ...]:
    return tuple(flag for code in _CODE.findall(cell) for flag in _FLAG.findall(code))


def rows(page: str) -> Iterator[Row]:
    """Every row of `page`'s flag tables (outside code blocks)."""
    default_col: int | None = None
    flag_table = False
    commands = PAGES[page]
    header = True
    in_code = False
    for number, line in enumerate((DOCS / page).read_text().splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("|"):
            header = True  # the next table starts with its header
            continue
        cells = _cells(line.replace(r"\|", "/"))
        if header:
            lowered = [c.lower() for c in cells]
            default_col = lowered.index("default") if "default" in lowered else None
            flag_table = "flag" in cells[0].lower()
            named = re.findall(r"`thaw ([a-z]+)`", cells[0])
            commands = tuple(named) if named else PAGES[page]
            header = False
            continue
        flags = _flags(cells[0])
        if flag_table and flags:
            default = cells[default_col] if default_col is not None else None
            yield Row(page, number, flags, default, commands)


def _parser(command: str) -> argparse.ArgumentParser:
    root = argparse.ArgumentParser()
    sub = root.add_subparsers()
    _COMMANDS[command](sub)
    (parser,) = sub.choices.values()
    return parser


def _actions(command: str) -> dict[str, argparse.Action]:
    """Long option -> its action, for every option `--help` shows."""
    return {
        option: action
        for action in _parser(command)._actions
        if action.help != argparse.SUPPRESS
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }


def _all_rows() -> list[Row]:
    return [row for page in PAGES for row in rows(page)]


def test_every_page_has_flag_tables() -> None:
    for page in PAGES:
        assert list(rows(page)), f"docs/{page} has no flag table"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_flag_a_table_names_exists(page: str) -> None:
    unknown = [
        f"docs/{page}:{r.line}: {f} (thaw {'/'.join(r.commands)})"
        for r in rows(page)
        for f in r.flags
        if not any(f in _actions(command) for command in r.commands)
    ]
    assert not unknown, f"flags no parser of the command the table documents has: {unknown}"


@pytest.mark.parametrize("command", sorted(_COMMANDS))
def test_every_flag_help_shows_is_in_a_table(command: str) -> None:
    tabled = {f for r in _all_rows() if command in r.commands for f in r.flags}
    pages = [f"docs/{p}" for p, commands in PAGES.items() if command in commands]
    missing = set(_actions(command)) - tabled
    known = KNOWN_UNTABLED.get(command, set())
    assert not missing - known, (
        f"`thaw {command} --help` flags in none of {pages}' tables: {sorted(missing - known)}"
    )
    assert known <= missing, f"now tabled, remove from KNOWN_UNTABLED: {sorted(known - missing)}"


def _plain(cell: str) -> str | None:
    """A default cell that is one plain value (`8000`, `` `auto` ``, `0.5`), else None."""
    text = cell.strip().strip("`").strip()
    return text if re.fullmatch(r"[\w.,-]+", text) else None


def _defaults() -> Iterator[tuple[Row, str, str]]:
    """(row, flag, stated default) for rows with one flag, or `--a` / `--b` with `x` / `y`."""
    for row in _all_rows():
        if row.default is None:
            continue
        parts = [p for p in re.split(r"\s+/\s+", row.default)] if len(row.flags) > 1 else None
        pairs = (
            zip(row.flags, parts, strict=True)
            if parts is not None and len(parts) == len(row.flags)
            else [(row.flags[0], row.default)]
            if len(row.flags) == 1
            else []
        )
        for flag, cell in pairs:
            stated = _plain(cell)
            if stated is not None:
                yield row, flag, stated


_UNSET = {"none", "unbounded", "unset", "off", "false"}


def _same(stated: str, default: object) -> bool:
    if str(default) == stated:
        return True
    if isinstance(default, bool):
        return stated.lower() in ({"on", "true"} if default else _UNSET)
    if default is None or default == [] or default == "":
        return stated.lower() in _UNSET
    if isinstance(default, int | float):
        try:
            return float(stated.replace(",", "")) == float(default)
        except ValueError:
            return False
    return str(default) == stated


def _default(command: str, flag: str) -> object:
    """The parser's default (`required` for a required flag); a scale setting's flag (None:
    unset) has ScaleSettings' own."""
    action = _actions(command)[flag]
    if action.required:
        return "required"
    default = action.default
    name = flag.removeprefix("--").replace("-", "_")
    if command == "up" and default is None and name in _SCALE_DEFAULTS:
        return _SCALE_DEFAULTS[name]
    return default


_SCALE_DEFAULTS = {f.name: getattr(ScaleSettings(), f.name) for f in fields(ScaleSettings)}


def _default_cases() -> list[object]:
    cases: list[object] = []
    for row, flag, stated in _defaults():
        marks = (
            [pytest.mark.xfail(strict=True, reason="stale on a page another engineer edits")]
            if (row.page, flag) in KNOWN_STALE_DEFAULTS
            else []
        )
        cases.append(pytest.param(row, flag, stated, id=f"{row.page}:{flag}", marks=marks))
    return cases


@pytest.mark.parametrize(("row", "flag", "stated"), _default_cases())
def test_a_plain_default_in_a_table_is_the_parsers(row: Row, flag: str, stated: str) -> None:
    commands = [c for c in row.commands if flag in _actions(c)]
    defaults = {c: _default(c, flag) for c in commands}
    assert any(_same(stated, d) for d in defaults.values()), (
        f"docs/{row.page}:{row.line}: {flag} default {stated!r}, the parser's {defaults}"
    )


def test_every_thaw_snapshot_flag_is_on_the_snapshots_page() -> None:
    """`thaw snapshot ACTION` has no flag table: its flags are in docs/snapshots.md's examples."""
    sub = argparse.ArgumentParser().add_subparsers()
    snapshot_cli.register(sub)
    (snapshot,) = sub.choices.values()
    text = (DOCS / "snapshots.md").read_text()
    missing = [
        f"{action} {option}"
        for sub in snapshot._actions
        if isinstance(sub, argparse._SubParsersAction)
        for action, parser in sub.choices.items()
        for flag in parser._actions
        if flag.help != argparse.SUPPRESS
        for option in flag.option_strings
        if option.startswith("--") and option != "--help"
        if not re.search(re.escape(option) + r"(?![a-z0-9-])", text)
    ]
    assert not missing, f"thaw snapshot flags docs/snapshots.md never names: {missing}"


def test_the_table_reader_finds_what_it_must() -> None:
    """The reader itself: a known row of each shape is read as it is written."""
    serve = {r.flags: r.default for r in rows("serve.md")}
    assert serve[("--port",)] == "`8000`"
    scale = {r.flags: r.default for r in rows("scale-to-zero.md")}
    assert scale[("--host", "--port", "--http-port")] == "`127.0.0.1` / `8000`"
    assert scale[("--max-replicas",)] == "4"
