"""The perf_analyzer runs tests/conformance/perf_analyzer_runs.py makes, one per mode a Triton
user benchmarks with: each names its model (tests/fixtures/perf_analyzer_models.py) and
perf_analyzer's arguments beyond the common ones (`-u`, short windows, no stability demand).

`{http}`, `{grpc}`, `{metrics}` and `{tmp}` in an argument are the server's HTTP, gRPC and
metrics `HOST:PORT` and the run's scratch folder. `csv`: the run writes `-f {tmp}/NAME.csv`,
checked to hold its header and one row per load level. `onnx`: the model is ONNX, which real
Triton's pip build cannot serve (no onnxruntime backend). `refused`: perf_analyzer is expected
to stop with an error (its first error line is reported, to compare the servers' words).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CASES", "STRINGS_JSON", "Case"]

# `simple_string`'s inputs for `--input-data FILE`: numbers written as strings (random bytes are
# no numbers, so the model refuses them on every server alike).
STRINGS_JSON = {
    "data": [
        {"INPUT0": [str(i) for i in range(16)], "INPUT1": ["1"] * 16},
        {"INPUT0": ["7"] * 16, "INPUT1": [str(-i) for i in range(16)]},
    ]
}

_REPEAT = ("--shape", "IN:4", "--shape", "DELAY:4", "--shape", "WAIT:1", "--input-data", "zero")


@dataclass(frozen=True)
class Case:
    """One perf_analyzer run: its name, model, protocol (http | grpc) and extra arguments."""

    name: str
    model: str
    protocol: str
    args: tuple[str, ...] = ()
    csv: bool = False
    onnx: bool = False
    refused: bool = False


def _both(name: str, model: str, *args: str, **kw: bool) -> tuple[Case, ...]:
    return (
        Case(f"{name} (http)", model, "http", args, **kw),
        Case(f"{name} (grpc)", model, "grpc", args, **kw),
    )


CASES: tuple[Case, ...] = (
    # First on `thaw up`: the model is at zero, and this run wakes it.
    *_both("add_sub sync, concurrency 1", "simple", "--sync"),
    *_both("add_sub --async --concurrency-range 1:3:2", "simple", "--async",
           "--concurrency-range", "1:3:2"),
    *_both("add_sub --request-rate-range 100:200:100", "simple", "--request-rate-range",
           "100:200:100"),
    *_both("add_sub --async --request-rate-range 200", "simple", "--async",
           "--request-rate-range", "200"),
    *_both("add_sub --shared-memory system", "simple", "--shared-memory", "system"),
    *_both("add_sub --input-data zero", "simple", "--input-data", "zero"),
    *_both("add_sub --input-data random -f CSV", "simple", "--input-data", "random", csv=True),
    *_both("add_sub --collect-metrics --metrics-url", "simple", "--collect-metrics",
           "--metrics-url", "{metrics}/metrics", "--metrics-interval", "200", "--verbose-csv",
           csv=True),
    Case("add_sub --streaming (grpc)", "simple", "grpc", ("--streaming",)),
    Case("add_sub --streaming --shared-memory system (grpc)", "simple", "grpc",
         ("--streaming", "--shared-memory", "system")),
    *_both("BYTES identity, random strings --shape", "simple_identity", "--shape", "INPUT0:4"),
    *_both("BYTES add_sub --input-data JSON", "simple_string", "--input-data",
           "{tmp}/strings.json"),
    *_both("BYTES --shared-memory system", "simple_string", "--input-data", "{tmp}/strings.json",
           "--shared-memory", "system", "--output-shared-memory-size", "1024"),
    *_both("sequence --sequence-length 4", "simple_sequence", "--sequence-length", "4"),
    *_both("sequence --async --concurrency-range 2", "simple_sequence", "--async",
           "--sequence-length", "4", "--concurrency-range", "2"),
    Case("sequence --streaming (grpc)", "simple_sequence", "grpc",
         ("--streaming", "--sequence-length", "4")),
    *_both("sequence --request-rate-range 50", "simple_sequence", "--request-rate-range", "50",
           "--sequence-length", "4"),
    Case("decoupled --streaming (grpc)", "repeat_int32", "grpc", ("--streaming", *_REPEAT)),
    *_both("dynamic batching -b 4 --concurrency-range 2", "simple_batched", "-b", "4",
           "--concurrency-range", "2"),
    *_both("dynamic batching -b 4 --async --shared-memory system", "simple_batched", "-b", "4",
           "--async", "--shared-memory", "system"),
    *_both("add_sub --input/--output-tensor-format json", "simple", "--input-tensor-format",
           "json", "--output-tensor-format", "json"),
    *_both("BYTES --input/--output-tensor-format json", "simple_string", "--input-data",
           "{tmp}/strings.json", "--input-tensor-format", "json", "--output-tensor-format", "json"),
    Case("add_sub --request-parameter (grpc)", "simple", "grpc",
         ("--request-parameter", "foo:bar:string", "--request-parameter", "n:3:int",
          "--request-parameter", "b:true:bool")),
    Case("add_sub --grpc-compression-algorithm gzip (grpc)", "simple", "grpc",
         ("--grpc-compression-algorithm", "gzip")),
    Case("add_sub --grpc-compression-algorithm deflate (grpc)", "simple", "grpc",
         ("--grpc-compression-algorithm", "deflate")),
    *_both("add_sub --measurement-mode count_windows", "simple", "--measurement-mode",
           "count_windows", "--measurement-request-count", "50"),
    *_both("add_sub --request-intervals FILE", "simple", "--request-intervals",
           "{tmp}/intervals.txt"),
    *_both("add_sub --binary-search -l", "simple", "--concurrency-range", "1:4",
           "--binary-search", "-l", "50"),
    *_both("sequence --serial-sequences --sequence-id-range", "simple_sequence",
           "--serial-sequences", "--sequence-id-range", "100:200", "--sequence-length", "3",
           "--concurrency-range", "2"),
    Case("decoupled --periodic-concurrency-range (grpc)", "repeat_int32", "grpc",
         ("--streaming", *_REPEAT, "--periodic-concurrency-range", "1:4:1", "--request-period",
          "2", "--profile-export-file", "{tmp}/profile.json")),
    *_both("add_sub --trace-level TIMESTAMPS (no trace file)", "simple", "--trace-level",
           "TIMESTAMPS", "--trace-rate", "100", "--trace-count", "10", "--log-frequency", "0",
           refused=True),
    *_both("unknown model", "no_such_model", refused=True),
    *_both("ONNX -x 3 (no such version)", "onnx_add", "-x", "3", onnx=True, refused=True),
    *_both("decoupled without --streaming", "repeat_int32", *_REPEAT, refused=True),
    *_both("ONNX", "onnx_add", onnx=True),
    *_both("ONNX -x 2", "onnx_add", "-x", "2", onnx=True),
    *_both("ONNX -x 1 -b 2 -f CSV", "onnx_add", "-x", "1", "-b", "2", csv=True, onnx=True),
)  # fmt: skip
