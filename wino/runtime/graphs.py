"""``plan.graph(...)``: a plan's run captured once as a CUDA graph and replayed.

On CUDA the run is captured with ``torch.cuda.graph`` when x is a torch tensor (the graph then
lives in torch's graph memory pool and replays on torch's current stream), else with CuPy
stream capture. On the host target there is no graph: ``replay`` re-issues the run on the same
arrays (so code written against the API runs everywhere).
"""

from __future__ import annotations

import threading
from typing import Any

from ..vocab import Target
from . import lru
from .arrays import is_torch

#: plan.run on CUDA issues a run as one CUDA graph launch once the same operand pointers come
#: back this many times (the first sightings issue each launch; the last one captures).
GRAPH_AFTER = 2
#: Pointer sets a plan remembers (seen counts and graphs), the least recently used dropped.
GRAPH_SLOTS = 8


class RunGraphs:
    """A plan's runs as CUDA graphs, by the pointers they were issued on (``plan.run``'s own,
    not ``plan.graph``'s): a graph replays exactly the launches a run on those pointers would
    issue (kernargs packed at plan time, pointers baked), so it serves a call whose operands
    sit at the same addresses now, whatever arrays they are. Nothing else is held: a graph
    reads and writes only those addresses, live in the call that replays it. A graph dropped
    (least recently used, ``plan.release``) may still be running: the driver frees an
    in-flight executable graph on its completion (cuGraphExecDestroy)."""

    def __init__(self, after: int = GRAPH_AFTER, slots: int = GRAPH_SLOTS):
        self.after, self.slots = after, slots
        self._entries: dict[tuple, Any] = {}  # key -> sightings or graph, least recent first
        self._lock = threading.Lock()  # a plan may run on several threads

    def find(self, key: tuple) -> tuple[Any, bool]:
        """(the graph of ``key`` or None, whether to capture one now), counting a sighting."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and not isinstance(entry, int):
                lru.put(self._entries, key, entry, self.slots)
                return entry, False
            seen = 1 if entry is None else entry + 1
            lru.put(self._entries, key, seen, self.slots)
            return None, seen >= self.after

    def keep(self, key: tuple, graph: Any) -> None:
        with self._lock:
            lru.put(self._entries, key, graph, self.slots)

    def graphs(self) -> int:
        return sum(not isinstance(e, int) for e in self._entries.values())

    def clear(self) -> None:
        self._entries.clear()


class PlanGraph:
    """A captured run: ``replay(stream=None)`` re-issues every launch on the captured arrays.
    It holds those arrays (x, w, y, workspace, U, bias) for as long as it lives: a replay
    reads and writes them where the capture did, so none may be freed before the graph."""

    def __init__(self, plan, replay, graph: Any = None):
        self.plan = plan
        self._replay = replay
        self.graph = graph  # torch.cuda.CUDAGraph, cupy.cuda.graph.Graph, or None (host)
        self.arrays: tuple = ()  # (x, w, y, workspace, U, bias) as captured (capture sets it)

    def replay(self, stream=None) -> None:
        self._replay(stream)


def _required(y, workspace) -> None:
    if y is None:
        raise ValueError("y: plan.graph needs the output array (a replay writes where it was)")
    if workspace is None:
        raise ValueError("workspace: plan.graph needs a workspace of plan.workspace_bytes")


def capture(plan, x, w, y, workspace, U, bias=None) -> PlanGraph:
    _required(y, workspace)
    # eager first: module loads, handles, checks
    plan.run(x, w, y=y, workspace=workspace, U=U, bias=bias)
    arrays = (x, w, y, workspace, U, bias)
    if plan.target is not Target.CUDA:
        graph = PlanGraph(plan, lambda stream: plan.run(x, w, y, workspace, U, stream, bias))
    elif is_torch(x):
        graph = _torch_graph(plan, x, w, y, workspace, U, bias)
    else:
        graph = _cupy_graph(plan, x, w, y, workspace, U, bias)
    graph.arrays = arrays
    return graph


def _torch_graph(plan, x, w, y, workspace, U, bias) -> PlanGraph:
    import torch

    torch.cuda.synchronize(x.device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan.run(x, w, y=y, workspace=workspace, U=U, bias=bias)

    def replay(stream) -> None:
        if stream is None:
            graph.replay()
            return
        with torch.cuda.stream(_torch_stream(stream, x.device)):
            graph.replay()

    return PlanGraph(plan, replay, graph)


def _torch_stream(stream, device):
    import torch

    if isinstance(stream, torch.cuda.Stream):
        return stream
    handle = stream if isinstance(stream, int) else getattr(stream, "ptr", None)
    if handle is None:
        raise TypeError(f"stream: expected a torch/CuPy stream or an int, got {stream!r}")
    return torch.cuda.ExternalStream(handle, device=device)


def _cupy_graph(plan, x, w, y, workspace, U, bias) -> PlanGraph:
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    cupy.cuda.get_current_stream().synchronize()
    with stream:
        stream.begin_capture()
        try:
            plan.run(x, w, y=y, workspace=workspace, U=U, stream=stream, bias=bias)
        finally:
            graph = stream.end_capture()

    def replay(stream_) -> None:
        if stream_ is None:
            graph.launch(cupy.cuda.get_current_stream())
        elif isinstance(stream_, int):
            graph.launch(cupy.cuda.ExternalStream(stream_))
        else:
            handle = getattr(stream_, "cuda_stream", None)
            graph.launch(cupy.cuda.ExternalStream(handle) if handle is not None else stream_)

    return PlanGraph(plan, replay, graph)
