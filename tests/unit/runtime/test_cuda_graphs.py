"""CUDA graphs from Triton's `optimization.cuda` config: which shapes, and replay vs eager."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from runtime.backends.cuda_graphs import GraphedModule, graph_shapes
from tritonconfig import parse_config

BASE = """
name: "m" backend: "pytorch" max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "ids" data_type: TYPE_INT64 dims: [ -1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def test_no_graphs_unless_the_config_asks() -> None:
    assert graph_shapes(parse_config(BASE, "c")) == ([], None)


def test_graph_specs_give_the_shapes_to_capture() -> None:
    config = parse_config(
        BASE
        + """optimization { cuda { graphs: true graph_spec [
            { batch_size: 2 input { key: "ids" value: { dim: [ 16 ] } } },
            { batch_size: 8 input { key: "ids" value: { dim: [ 3 ] } } } ] } }""",
        "c",
    )
    shapes, why_not = graph_shapes(config)
    assert why_not is None
    assert [[(n, s) for n, s, _ in g.inputs] for g in shapes] == [
        [("x", (2, 4)), ("ids", (2, 16))],
        [("x", (8, 4)), ("ids", (8, 3))],
    ]
    assert shapes[0].inputs[1][2] == np.dtype(np.int64)


def test_a_variable_dimension_without_a_spec_is_not_captured_and_says_why() -> None:
    config = parse_config(BASE + "optimization { cuda { graphs: true } }", "c")
    shapes, why_not = graph_shapes(config)
    assert (
        shapes == [] and why_not is not None and "input 'ids' has a variable dimension" in why_not
    )


class _ReplayOnly:
    """Stands in for torch.cuda.CUDAGraph: replay recomputes into the static output buffer."""

    def __init__(self, module: Any, static_in: list[Any], static_out: Any) -> None:
        self.module, self.static_in, self.static_out = module, static_in, static_out
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1
        self.static_out.copy_(self.module(*self.static_in))


def test_matching_shapes_replay_the_graph_and_others_run_eagerly() -> None:
    def module(x: Any) -> Any:
        return x * 2 + 1

    static_in = [torch.zeros(2, 4)]
    static_out = torch.zeros(2, 4)
    graph = _ReplayOnly(module, static_in, static_out)
    graphed = GraphedModule(module, {((2, 4),): (graph, static_in, static_out)})
    x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    first = graphed(x)
    assert graph.replays == 1 and torch.equal(first, x * 2 + 1)
    second = graphed(x + 1)
    assert torch.equal(first, x * 2 + 1)  # outputs are copies: the next replay cannot change them
    assert torch.equal(second, (x + 1) * 2 + 1)
    other = torch.ones(3, 4)
    assert torch.equal(graphed(other), other * 2 + 1) and graph.replays == 2  # eager, no replay


def test_a_shape_whose_capture_fails_runs_eagerly_and_is_named() -> None:
    from runtime.backends.cuda_graphs import capture_graphs

    def module(x: Any) -> Any:
        return x * 2 + 1

    config = parse_config(
        """name: "m" backend: "pytorch" max_batch_size: 8
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
        optimization { cuda { graphs: true graph_spec [ { batch_size: 2 }, { batch_size: 8 } ] } }
        """,
        "c",
    )
    shapes, why_not = graph_shapes(config)
    assert why_not is None and len(shapes) == 2

    def capture(mod: Any, shape: Any, positions: dict[str, int], device: str) -> Any:
        ((_, dims, _),) = shape.inputs
        if dims[0] == 8:  # what torch raises for an op that cannot be captured
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        static_in = [torch.zeros(dims)]
        static_out = torch.zeros(dims)
        return _ReplayOnly(mod, static_in, static_out), static_in, static_out

    graphed = capture_graphs(module, shapes, {"x": 0}, "cuda:0", capture=capture)
    assert graphed.captured == 1 and len(graphed.failures) == 1
    assert "[(8, 4)]" in graphed.failures[0] and "stream is capturing" in graphed.failures[0]
    x8 = torch.ones(8, 4)
    assert torch.equal(graphed(x8), x8 * 2 + 1)  # the failed shape runs eagerly, same result


class _FakeCuda:
    """torch.cuda as a capture sees it, recording what is entered, left and ended; the graph's
    `capture_end` raises as the driver does for a capture the run invalidated."""

    def __init__(self, *, routing_ended_by_capture_end: bool) -> None:
        self.events: list[str] = []
        self.current = "default"
        self.routing_ended_by_capture_end = routing_ended_by_capture_end

    def graph_pool_handle(self) -> tuple[int, int]:
        return (0, 7)

    def Stream(self, device: str) -> Any:
        cuda = self

        class _Stream:
            name = "capture"

            def wait_stream(self, other: Any) -> None:
                cuda.events.append("wait")

        return _Stream()

    def current_stream(self, device: str) -> Any:
        return self.Stream(device)

    def synchronize(self, device: str) -> None:
        self.events.append("synchronize")

    def stream(self, stream: Any) -> Any:
        cuda = self

        class _Ctx:
            def __enter__(self) -> None:
                cuda.current = stream.name

            def __exit__(self, *exc: object) -> None:
                cuda.current = "default"

        return _Ctx()


class _FakeTorch:
    def __init__(self, cuda: _FakeCuda) -> None:
        self.cuda = cuda
        self._C = self
        self.routed = True

    def device(self, name: str) -> Any:
        return torch.device(name)

    def _cuda_endAllocateToPool(self, index: int, pool: tuple[int, int]) -> None:
        if not self.routed:
            raise RuntimeError("endAllocatePool: not currently recording to mempool_id")
        self.routed = False
        self.cuda.events.append(f"end routing {index} {pool}")


class _FailingGraph:
    def __init__(self, fake: _FakeTorch) -> None:
        self.fake = fake

    def capture_begin(self, pool: Any, capture_error_mode: str) -> None:
        self.fake.cuda.events.append(f"begin {pool} {capture_error_mode}")

    def capture_end(self) -> None:
        if self.fake.cuda.routing_ended_by_capture_end:
            self.fake.routed = False
        raise RuntimeError("CUDA error: operation failed due to a previous error during capture")


@pytest.mark.parametrize("routing_ended_by_capture_end", [False, True])
def test_a_failed_capture_leaves_its_stream_and_ends_its_pool_routing(
    routing_ended_by_capture_end: bool,
) -> None:
    from runtime.backends.cuda_graphs import captured

    cuda = _FakeCuda(routing_ended_by_capture_end=routing_ended_by_capture_end)
    fake = _FakeTorch(cuda)

    def run() -> Any:
        assert cuda.current == "capture"  # the run is captured on the capture's own stream
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    with pytest.raises(RuntimeError, match="not permitted when stream is capturing"):
        captured(fake, _FailingGraph(fake), run, "cuda:1")
    assert cuda.current == "default"  # torch.cuda.graph would have left it on "capture"
    assert "begin (0, 7) thread_local" in cuda.events
    assert fake.routed is False
    ended = [e for e in cuda.events if e.startswith("end routing")]
    assert ended == ([] if routing_ended_by_capture_end else ["end routing 1 (0, 7)"])
