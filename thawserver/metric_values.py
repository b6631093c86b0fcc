"""Sample values on both servers' `/metrics` as Triton writes them: `3`, `25276203008`, `0.005`.

Triton's metrics library (prometheus-cpp) writes a value as C's `%.16g` does (seen on
tritonserver 2.51: `100000`, `150000000000`, `1e+21`, `1.234567890123457e+16`, `1e-07`):
sixteen significant digits, no trailing `.0`, an exponent only past them. prometheus_client
writes Python's `repr` and switches to an exponent past six integer digits
(`2.5276203008e+10`, `3.0`). Both parse to the same number, but scripts and Triton's own tests
read these pages with regular expressions: qa/L0_metrics's `nv_cpu_memory_total_bytes (\\d+)`
reads `2.5276203008e+10` as 2.

`value_text(v)` is one value; `triton_values(page)` rewrites the last field of every sample
line of a text exposition (a value is always last: no timestamps are written). Infinities and
NaN keep the exposition format's spelling (`+Inf`, `-Inf`, `NaN`; Triton writes `Nan`, which
not every parser takes).
"""

from __future__ import annotations

import math

__all__ = ["triton_values", "value_text"]


def value_text(value: float) -> str:
    """`value` as Triton writes a sample (module docstring)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return format(value, ".16g")


def triton_values(page: bytes) -> bytes:
    """A text exposition with every sample's value written as Triton writes it."""
    lines = page.split(b"\n")
    for index, line in enumerate(lines):
        if not line or line.startswith(b"#"):
            continue
        head, _, raw = line.rpartition(b" ")
        try:
            number = float(raw)
        except ValueError:
            continue
        text = value_text(number).encode()
        if text != raw:
            lines[index] = head + b" " + text
    return b"\n".join(lines)
