"""What an error body may say about the server's own files: the server's directories (model
repositories, cache) are cut out of every message a client reads, and a Python traceback with
them.

A model's load error is useful to its client ("badcfg/config.pbtxt:3: Expected string"), where
the machine's layout ("/srv/models/...") is not: a path under a known directory is shown
relative to it, the directory itself as ".".
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["Redactor"]

# Any of a repository index's rows (`{"name", "version", "state", "reason"}`).
IndexRow = dict[str, Any]

_TRACEBACK = "Traceback (most recent call last)"


class Redactor:
    """`redactor(message)`: `message` without the directories `roots` (as given, normalized;
    pure string work, so it is built on the event loop without touching the filesystem) or
    anything from a traceback's first line on."""

    def __init__(self, roots: Iterable[Path | None]) -> None:
        forms: set[str] = set()
        for root in roots:
            if root is None:
                continue
            for form in (str(root), os.path.normpath(root)):
                if form not in ("", "/", "."):
                    forms.add(form.rstrip("/"))
        # A root only where it is a whole path (a relative root such as `repo` is no part of
        # "repository", nor of `other/repo`): `root/` is cut, `root` alone becomes ".".
        self._roots = [
            re.compile(rf"(?<![\w./-]){re.escape(form)}(/|(?![\w.-]))")
            for form in sorted(forms, key=len, reverse=True)  # a nested form before its parent
        ]

    def __call__(self, message: str) -> str:
        cut = message.find(_TRACEBACK)
        if cut >= 0:
            message = message[:cut].rstrip() or "internal server error"
        for root in self._roots:
            message = root.sub(lambda m: "" if m.group(1) else ".", message)
        return message

    def index(self, rows: Iterable[IndexRow]) -> list[IndexRow]:
        """A repository index as a client reads it: each row's `reason` (a failed load's error)
        redacted."""
        return [
            {**row, "reason": self(row["reason"])} if isinstance(row.get("reason"), str) else row
            for row in rows
        ]
