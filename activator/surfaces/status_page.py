"""The status page at `/ui/`: static files shipped in the package, read once, served by name.

No build step and nothing fetched from elsewhere: `activator/surfaces/ui/` holds the page (HTML,
CSS and a small hand-written script that draws its plots in SVG), declared as package data in
pyproject.toml. The script polls `GET /thaw/status` and `GET /thaw/history?since=N`. Every
answer carries a Content-Security-Policy that lets the page load only from its own origin.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

__all__ = ["ASSETS", "CSP", "StatusPage"]

# File name -> content type: the only files served (anything else under /ui/ is a 404).
ASSETS = {
    "index.html": "text/html",
    "status.css": "text/css",
    "status.js": "text/javascript",
}

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


@dataclass(frozen=True)
class StatusPage:
    """The page's files, by name: (bytes, content type)."""

    files: dict[str, tuple[bytes, str]]

    @classmethod
    def load(cls) -> StatusPage:
        """Read every asset from the installed package (blocking: call it off the loop)."""
        root = resources.files("activator.surfaces") / "ui"
        return cls({name: ((root / name).read_bytes(), kind) for name, kind in ASSETS.items()})

    def get(self, name: str) -> tuple[bytes, str] | None:
        return self.files.get(name)
