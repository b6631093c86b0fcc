"""Plain-HTTP helpers for the scheduling tests: a JSON infer call that is timed, requests sent
at once from threads, and one metric's value from `/metrics`."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

__all__ = ["Answer", "Later", "fp32", "infer", "metric"]


@dataclass
class Answer:
    status: int
    doc: dict[str, Any]
    elapsed_s: float
    finished_at: float  # time.monotonic() when the answer arrived

    def output(self, name: str) -> list[Any]:
        return next(o["data"] for o in self.doc["outputs"] if o["name"] == name)

    @property
    def error(self) -> str:
        return str(self.doc.get("error", ""))


def infer(
    url: str,
    model: str,
    inputs: list[dict[str, Any]],
    *,
    parameters: dict[str, Any] | None = None,
    timeout_s: float = 60.0,
) -> Answer:
    """POST one JSON infer request; the answer (any status), timed."""
    doc: dict[str, Any] = {"inputs": inputs}
    if parameters is not None:
        doc["parameters"] = parameters
    request = urllib.request.Request(
        f"{url}/v2/models/{model}/infer", data=json.dumps(doc).encode(), method="POST"
    )
    start = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    end = time.monotonic()
    return Answer(status, json.loads(body or b"{}"), end - start, end)


class Later:
    """`infer` in a thread, started now; `result()` waits for its answer."""

    def __init__(self, url: str, model: str, inputs: list[dict[str, Any]], **kw: Any) -> None:
        self._answers: list[Answer] = []
        target = lambda: self._answers.append(infer(url, model, inputs, **kw))  # noqa: E731
        self._thread = threading.Thread(target=target, daemon=True)
        self._thread.start()

    def done(self) -> bool:
        return bool(self._answers)

    def result(self, timeout_s: float = 60.0) -> Answer:
        self._thread.join(timeout_s)
        assert self._answers, "the request did not finish in time"
        return self._answers[0]


def fp32(name: str, values: list[float], *, batched: bool = True) -> dict[str, Any]:
    """A JSON FP32 input of one row (`[1, n]`, or `[n]` without a batch dimension)."""
    shape = [1, len(values)] if batched else [len(values)]
    return {"name": name, "datatype": "FP32", "shape": shape, "data": values}


def metric(url: str, name: str, **labels: str) -> float:
    """The value of one sample on `/metrics` (0 when absent)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if not line.startswith(name + "{") and line.split(" ")[0] != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
