"""thawserver.metric_values: sample values written as tritonserver 2.51 writes them (C's
`%.16g`, observed with a Python model's gauges: the expected texts below are Triton's)."""

from __future__ import annotations

import math
import re

import pytest

from thawserver.metric_values import triton_values, value_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (3.0, "3"),
        (25276203008.0, "25276203008"),
        (100000.0, "100000"),
        (1.5e11, "150000000000"),
        (2e10, "20000000000"),
        (123456789012.0, "123456789012"),
        (1e21, "1e+21"),
        (1e16, "1e+16"),
        (12345678901234567.0, "1.234567890123457e+16"),
        (700.0, "700"),
        (0.1, "0.1"),
        (1e-7, "1e-07"),
        (-2.5, "-2.5"),
        (0.0, "0"),
    ],
)
def test_values_are_written_as_triton_writes_them(value: float, text: str) -> None:
    assert value_text(value) == text
    assert float(text) == pytest.approx(value, rel=1e-15)


def test_infinities_and_nan_keep_the_exposition_formats_spelling() -> None:
    assert [value_text(v) for v in (math.inf, -math.inf, math.nan)] == ["+Inf", "-Inf", "NaN"]


def test_a_page_has_only_its_sample_values_rewritten() -> None:
    page = (
        b"# HELP nv_cpu_memory_total_bytes CPU total memory 1.0\n"
        b"# TYPE nv_cpu_memory_total_bytes gauge\n"
        b"nv_cpu_memory_total_bytes 2.5276203008e+10\n"
        b'nv_inference_count{model="a b 1.0",version="1"} 3.0\n'
        b'h_bucket{le="+Inf"} 2.0\n'
        b"not_a_number_line abc\n"
    )
    assert triton_values(page) == (
        b"# HELP nv_cpu_memory_total_bytes CPU total memory 1.0\n"
        b"# TYPE nv_cpu_memory_total_bytes gauge\n"
        b"nv_cpu_memory_total_bytes 25276203008\n"
        b'nv_inference_count{model="a b 1.0",version="1"} 3\n'
        b'h_bucket{le="+Inf"} 2\n'
        b"not_a_number_line abc\n"
    )
    # qa/L0_metrics reads the memory gauges with `(\d+)`: the whole number, not its first digit.
    match = re.search(rb"nv_cpu_memory_total_bytes (\d+)", triton_values(page))
    assert match is not None and int(match.group(1)) == 25276203008
