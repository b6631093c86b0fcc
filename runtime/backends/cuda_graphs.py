"""CUDA graphs captured at load for a torch model on a GPU, where its config asks and allows.

The config knob is Triton's own (its TensorRT backend reads the same field):

    optimization { cuda { graphs: true
                          graph_spec [ { batch_size: 4 }, { batch_size: 8 input { key: "x"
                                         value: { dim: [ 16 ] } } } ] } }

Each graph spec is one shape to capture: `batch_size` (with `max_batch_size > 0`) plus each
input's dims from the spec, else from the config (which must then be fixed: a -1 without a
spec'd shape cannot be captured, and the model runs eagerly, logged why). Without any spec, one
graph at `max_batch_size`. At execution a request whose input shapes match a captured graph
copies its inputs into the graph's static buffers and replays it (no per-kernel launch cost);
any other shape runs the module eagerly, as without graphs. A shape whose capture fails (an op
that cannot be captured: a host sync, a CPU tensor, dynamic control flow; `cudaErrorStream
CaptureUnsupported` and kin) is not captured: that shape runs eagerly, the failure is logged and
the backend counts it (`thaw_device_fallbacks_total{reason="cuda_graph_capture"}`), and the
load goes on. Only the torch backend captures
(TorchScript and torch.export modules); onnxruntime's CUDA EP has its own `enable_cuda_graph`
(it needs IOBinding, which Thaw does not use) and TensorRT plans run as built.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime.datatypes import config_to_v2, v2_to_numpy
from tritonconfig.schema import mc

__all__ = ["GraphShape", "GraphedModule", "capture_graphs", "captured", "graph_shapes"]

logger = logging.getLogger(__name__)

# BYTES are Python objects; BF16 travels as uint16 words the backend reinterprets per request.
_NOT_CAPTURED = frozenset({"BYTES", "BF16"})
# Warm-up iterations on a side stream before a capture (what torch's CUDA graph docs do).
_WARMUP_ITERS = 3


@dataclass(frozen=True)
class GraphShape:
    """One graph to capture: every input's full shape and numpy dtype, in config order."""

    inputs: tuple[tuple[str, tuple[int, ...], np.dtype[Any]], ...]


def graph_shapes(config: mc.ModelConfig) -> tuple[list[GraphShape], str | None]:
    """The graphs the config asks for, and why none can be captured (None: no reason; an
    empty list with no reason means graphs are not asked for)."""
    cuda = config.optimization.cuda
    if not cuda.graphs:
        return [], None
    specs = list(cuda.graph_spec)
    batches = [s.batch_size for s in specs] or [config.max_batch_size]
    shapes = []
    for index, batch in enumerate(batches):
        spec = specs[index] if specs else None
        inputs = []
        for io in config.input:
            given = spec is not None and io.name in spec.input
            dims = list(spec.input[io.name].dim) if spec is not None and given else list(io.dims)
            if any(d < 0 for d in dims):
                return [], (
                    f"input '{io.name}' has a variable dimension {dims} and no graph_spec shape"
                )
            if config.max_batch_size > 0:
                if batch < 1:
                    return [], f"graph_spec batch_size = {batch}, must be >= 1"
                dims = [batch, *dims]
            datatype = config_to_v2(mc.DataType.Name(io.data_type))
            if datatype in _NOT_CAPTURED:
                return [], f"input '{io.name}' is {datatype}, which a captured graph cannot hold"
            inputs.append((io.name, tuple(dims), v2_to_numpy(datatype)))
        shapes.append(GraphShape(tuple(inputs)))
    return shapes, None


class GraphedModule:
    """Calls the module through a captured graph when the argument shapes match one, else
    eagerly; same results either way (outputs are copied out of the graph's static buffers).
    `failures`: why each shape that was asked for could not be captured."""

    def __init__(
        self,
        module: Any,
        graphs: dict[tuple[tuple[int, ...], ...], Any],
        failures: tuple[str, ...] = (),
    ) -> None:
        self.module = module
        self._graphs = graphs  # shapes of the positional args -> (graph, static in, static out)
        self.failures = failures

    @property
    def captured(self) -> int:
        return len(self._graphs)

    def __call__(self, *args: Any) -> Any:
        key = tuple(tuple(a.shape) for a in args)
        found = self._graphs.get(key)
        if found is None:
            return self.module(*args)
        graph, static_in, static_out = found
        for buffer, arg in zip(static_in, args, strict=True):
            buffer.copy_(arg, non_blocking=True)
        graph.replay()
        return _clone(static_out)


Capture = Callable[[Any, GraphShape, dict[str, int], str], tuple[Any, list[Any], Any]]
"""(module, shape, positions, device) -> (graph, static inputs, static output), or raise."""


def capture_graphs(
    module: Any,
    shapes: list[GraphShape],
    positions: dict[str, int],
    device: str,
    *,
    capture: Capture | None = None,
) -> GraphedModule:
    """One CUDA graph per shape (`capture`, default torch.cuda.CUDAGraph; needs a GPU); a shape
    whose capture fails runs eagerly and is named in `failures`."""
    import torch

    run = capture or _capture_one
    graphs: dict[tuple[tuple[int, ...], ...], Any] = {}
    failures: list[str] = []
    with torch.inference_mode():
        for shape in shapes:
            dims = [d for _, d, _ in shape.inputs]
            try:
                graph, static, out = run(module, shape, positions, device)
            except RuntimeError as exc:  # torch raises CUDA and capture errors as RuntimeError
                failures.append(f"{dims}: {exc}")
                logger.warning("CUDA graph capture of shape %s failed, it runs eagerly: %s",
                               dims, exc)  # fmt: skip
                _settle(torch, device)
                continue
            graphs[tuple(tuple(t.shape) for t in static)] = (graph, static, out)
    return GraphedModule(module, graphs, tuple(failures))


def _capture_one(
    module: Any, shape: GraphShape, positions: dict[str, int], device: str
) -> tuple[Any, list[Any], Any]:
    import torch

    static: list[Any] = [None] * len(positions)
    for name, dims, dtype in shape.inputs:
        static[positions[name]] = torch.from_numpy(np.zeros(dims, dtype=dtype)).to(device)
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(_WARMUP_ITERS):
            module(*static)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    out = captured(torch, graph, lambda: module(*static), device)
    return graph, static, out


def captured(torch: Any, graph: Any, run: Callable[[], Any], device: str) -> Any:
    """`run()` captured into `graph` on a stream of its own; its output (the graph's static
    output). Raises what the capture raised, and leaves this thread as it found it.

    Not `torch.cuda.graph`: when a capture fails, ending it raises too, and that context
    manager's exit then never leaves the capture's stream, so the loading thread would go on
    launching on it; and the caching allocator would still send that stream's allocations to
    the failed graph's private pool, which `empty_cache` never frees. Here the stream is left
    in any case, the pool's routing is ended, and the capture is `thread_local`: a restore or
    a load in another thread (cudaMalloc, a synchronize) is not caught up in this capture."""
    index = torch.device(device).index or 0
    pool = torch.cuda.graph_pool_handle()
    stream = torch.cuda.Stream(device=device)
    stream.wait_stream(torch.cuda.current_stream(device))
    torch.cuda.synchronize(device)
    with torch.cuda.stream(stream):
        graph.capture_begin(pool, capture_error_mode="thread_local")
        try:
            out = run()
        except BaseException:
            _end_failed_capture(torch, graph, index, pool)
            raise
        try:
            graph.capture_end()
        except BaseException:
            _end_pool_routing(torch, index, pool)
            raise
    torch.cuda.current_stream(device).wait_stream(stream)
    return out


def _end_failed_capture(torch: Any, graph: Any, index: int, pool: Any) -> None:
    """End a capture whose run raised: the driver refuses to end an invalidated capture (that
    error is the run's consequence, not news), and the allocator stops routing to its pool."""
    try:
        graph.capture_end()
    except RuntimeError as exc:
        logger.debug("ending the failed CUDA graph capture: %s", exc)
    _end_pool_routing(torch, index, pool)


def _end_pool_routing(torch: Any, index: int, pool: Any) -> None:
    """Stop the caching allocator sending allocations to the capture's private pool, where a
    failed capture_end left it doing so; refused (and ignored) where capture_end did stop it."""
    # Its name in torch 2.11 and 2.13 (run on a GPU / here); older releases had the second.
    end = getattr(torch._C, "_cuda_endAllocateToPool", None) or getattr(
        torch._C, "_cuda_endAllocateCurrentStreamToPool", None
    )
    if end is None:
        logger.debug("this torch has no hook to end a CUDA graph pool's routing")
        return
    try:
        end(index, pool)
    except RuntimeError as exc:  # capture_end ended it already
        logger.debug("CUDA graph pool %s routing: %s", pool, exc)


def _settle(torch: Any, device: str) -> None:
    """After a failed capture: let the device finish what was queued, so the error stays with
    the capture and the next shape (or the first request) starts clean."""
    if not torch.cuda.is_available():
        return
    try:
        torch.cuda.synchronize(device)
    except RuntimeError as exc:  # a failure that poisoned the context: the load will say so
        logger.warning("after a failed CUDA graph capture, %s did not synchronize: %s",
                       device, exc)  # fmt: skip


def _clone(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value.clone()
