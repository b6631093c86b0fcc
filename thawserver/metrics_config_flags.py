"""tritonserver's `--metrics-config`, `--allow-cpu-metrics` and `--allow-gpu-metrics`, for both
CLIs: which per-model latency families `/metrics` carries (Triton's counters, its summaries), the
summaries' quantiles, and whether the host's `nv_cpu_*` and the GPUs' `nv_gpu_*` gauges are there.

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
import dataclasses
import logging
import re
from dataclasses import dataclass

from thawserver.bool_flag import triton_bool

__all__ = [
    "DEFAULT_QUANTILES",
    "MetricsSettings",
    "add_metrics_config_argument",
    "metrics_settings",
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
    `nv_inference_*_summary_us` summaries (and `nv_cache_{hit,miss}_summary_per_model`).
    `cpu_gauges` / `gpu_gauges`: `--allow-cpu-metrics` / `--allow-gpu-metrics`, the host's
    `nv_cpu_*` gauges and the GPUs' `nv_gpu_*` / `nv_energy_*` families."""

    counter_latencies: bool = True
    summary_latencies: bool = False
    summary_quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES
    cpu_gauges: bool = True
    gpu_gauges: bool = True

    def to_args(self) -> tuple[str, ...]:
        """These settings as `thaw serve` flags (`thaw up` gives them to replicas)."""
        args: tuple[str, ...] = ()
        if dataclasses.replace(self, cpu_gauges=True, gpu_gauges=True) != MetricsSettings():
            quantiles = ",".join(f"{q}:{e}" for q, e in self.summary_quantiles)
            args += (
                "--metrics-config", f"counter_latencies={str(self.counter_latencies).lower()}",
                "--metrics-config", f"summary_latencies={str(self.summary_latencies).lower()}",
                "--metrics-config", f"summary_quantiles={quantiles}",
            )  # fmt: skip
        if not self.cpu_gauges:
            args += ("--allow-cpu-metrics=false",)
        if not self.gpu_gauges:
            args += ("--allow-gpu-metrics=false",)
        return args


def metrics_settings(args: argparse.Namespace) -> MetricsSettings:
    """The settings the flags of `add_metrics_config_argument` give (ValueError: a bad
    `--metrics-config`, in Triton's words)."""
    settings = parse_metrics_config(args.metrics_config)
    return dataclasses.replace(
        settings, cpu_gauges=args.allow_cpu_metrics, gpu_gauges=args.allow_gpu_metrics
    )


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
    """The flags; `replicas`: `thaw up`'s help (it gives them to every replica)."""
    where = " (given to every replica)" if replicas else ""
    whose = "the front door's and every replica's" if replicas else "the"
    group.add_argument(
        "--allow-cpu-metrics", type=triton_bool, default=True, metavar="BOOL",
        help=f"publish the host's nv_cpu_utilization and nv_cpu_memory_* gauges on {whose} "
        "/metrics (default true, as tritonserver)",
    )  # fmt: skip
    group.add_argument(
        "--allow-gpu-metrics", type=triton_bool, default=True, metavar="BOOL",
        help="publish the nv_gpu_* and nv_energy_* families (NVML; absent where no GPU or no "
        f"NVML is) (default true, as tritonserver){where}",
    )  # fmt: skip
    group.add_argument(
        "--metrics-config", action="append", default=[], metavar="<setting>=<value>",
        help="Triton's per-model latency metrics (repeatable): counter_latencies=false drops "
        "the nv_inference_*_duration_us counters, summary_latencies=true adds the "
        "nv_inference_*_summary_us summaries, summary_quantiles=<q>:<error>,... their "
        f"quantiles{where}",
    )  # fmt: skip
