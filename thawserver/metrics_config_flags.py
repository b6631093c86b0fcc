"""tritonserver's `--metrics-config`, for both CLIs: which per-model latency families `/metrics`
carries (Triton's counters, its summaries) and the summaries' quantiles.

    parse_metrics_config(["summary_latencies=true", "summary_quantiles=0.5:0.05,0.9:0.01"])
        -> MetricsSettings(counter_latencies=True, summary_latencies=True,
                           summary_quantiles=((0.5, 0.05), (0.9, 0.01)))

The value is `<setting>=<value>` or `<group>,<setting>=<value>` (Triton's grammar); settings
Triton's core does not read are kept out of the result, as there. A quantile pair without its
`:` or not starting with a number is skipped, as Triton's core skips it (it logs an error), and
each number is read as `std::stod` reads it, its longest leading number (`0.0.1` is 0.0); a
list with no valid pair keeps the default quantiles.
"""

from __future__ import annotations

import argparse
import logging
import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_QUANTILES",
    "MetricsSettings",
    "add_metrics_config_argument",
    "parse_metrics_config",
]

logger = logging.getLogger(__name__)

# Triton core's default summary quantiles: (quantile, allowed error).
DEFAULT_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.5, 0.05),
    (0.9, 0.01),
    (0.95, 0.001),
    (0.99, 0.001),
    (0.999, 0.001),
)


@dataclass(frozen=True)
class MetricsSettings:
    """What `--metrics-config` asked for. `counter_latencies`: the `nv_inference_*_duration_us`
    counters (and the cache's `nv_cache_*_per_model` ones); `summary_latencies`: the
    `nv_inference_*_summary_us` summaries (and `nv_cache_{hit,miss}_summary_per_model`)."""

    counter_latencies: bool = True
    summary_latencies: bool = False
    summary_quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES

    def to_args(self) -> tuple[str, ...]:
        """These settings as `--metrics-config` flags (`thaw up` gives them to replicas)."""
        if self == MetricsSettings():
            return ()
        quantiles = ",".join(f"{q}:{e}" for q, e in self.summary_quantiles)
        return (
            "--metrics-config", f"counter_latencies={str(self.counter_latencies).lower()}",
            "--metrics-config", f"summary_latencies={str(self.summary_latencies).lower()}",
            "--metrics-config", f"summary_quantiles={quantiles}",
        )  # fmt: skip


def parse_metrics_config(values: list[str]) -> MetricsSettings:
    """Every `--metrics-config` value; ValueError in Triton's words for one without `=`."""
    counters, summaries, quantiles = True, False, DEFAULT_QUANTILES
    for text in values:
        setting = text.split(",", 1)[1] if "," in text.split("=", 1)[0] else text
        name, sep, value = setting.partition("=")
        if not sep or not name:
            raise ValueError(
                "--metrics-config option format is '<setting>=<value>' or "
                f"'<group>,<setting>=<value>'. Got {text}"
            )
        # Triton's core compares the values to these exact spellings.
        if name == "counter_latencies" and value == "false":
            counters = False
        elif name == "counter_latencies" and value == "true":
            counters = True
        elif name == "summary_latencies":
            summaries = value == "true"
        elif name == "summary_quantiles":
            quantiles = _quantiles(value) or quantiles
    return MetricsSettings(counters, summaries, quantiles)


def _quantiles(text: str) -> tuple[tuple[float, float], ...]:
    pairs = []
    for pair in text.split(","):
        quantile, sep, error = pair.partition(":")
        try:
            if not sep:
                raise ValueError("no ':' delimiter found")
            pairs.append((_stod(quantile), _stod(error)))
        except ValueError as exc:
            logger.error(
                "Invalid option: [%s]. Expected format is <quantile>:<error> (%s)", pair, exc
            )
    return tuple(pairs)


# std::stod's reading: the longest number at the start ("0.0.1" is 0.0); ValueError for none.
_NUMBER = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _stod(text: str) -> float:
    match = _NUMBER.match(text)
    if match is None:
        raise ValueError(f"not a number: {text!r}")
    return float(match.group())


def add_metrics_config_argument(
    group: argparse._ActionsContainer, *, replicas: bool = False
) -> None:
    """The flag; `replicas`: `thaw up`'s help (it gives it to every replica)."""
    where = " (given to every replica)" if replicas else ""
    group.add_argument(
        "--metrics-config", action="append", default=[], metavar="<setting>=<value>",
        help="Triton's per-model latency metrics (repeatable): counter_latencies=false drops "
        "the nv_inference_*_duration_us counters, summary_latencies=true adds the "
        "nv_inference_*_summary_us summaries, summary_quantiles=<q>:<error>,... their "
        f"quantiles{where}",
    )  # fmt: skip
