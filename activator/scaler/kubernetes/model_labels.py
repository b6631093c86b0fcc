"""A model's name as a Kubernetes label value, so its pods can be selected by label.

Label values are at most 63 characters of `[A-Za-z0-9._-]`, beginning and ending with an
alphanumeric; Thaw model names are up to 128 characters and may begin with `_` or end with
`.`, `-` or `_`. A name that is a valid label value is its own label; any other is mapped to
a readable prefix plus 10 hex digits of its sha256, so two names never share a label in
practice, and the exact name always travels in the `thaw.dev/model` annotation, which is what
the backend compares (a label is only the selector).
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["MAX_LABEL", "is_label_value", "label_value"]

MAX_LABEL = 63
_LABEL = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?$")
_DIGEST_HEX = 10


def is_label_value(text: str) -> bool:
    """True for a valid Kubernetes label value (the empty string is one)."""
    return len(text) <= MAX_LABEL and bool(_LABEL.match(text))


def label_value(model: str) -> str:
    """The label value that selects `model`'s pods; ValueError for an empty name."""
    if not model:
        raise ValueError("a model name cannot be empty")
    if is_label_value(model):
        return model
    digest = hashlib.sha256(model.encode()).hexdigest()[:_DIGEST_HEX]
    readable = re.sub(r"[^A-Za-z0-9._-]", "-", model)
    readable = readable[: MAX_LABEL - _DIGEST_HEX - 1].strip("._-")
    return f"{readable}-{digest}" if readable else f"m-{digest}"
