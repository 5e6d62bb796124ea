"""Timers. ``time_us(issue, sets)`` runs ``issue(s)`` (the launches to time, on operand set s)
and returns the median time of one run in microseconds.

- Host: ``time.perf_counter`` around each call (the host backend is synchronous).
- CUDA: each set's launches are captured into a CUDA graph on a non-default CuPy stream (CuPy
  kernels and cuBLAS both issue on the current stream), replayed ``warmup`` times, then replayed
  ``repeats`` times back to back with a CUDA event recorded between replays (the host runs
  ahead, so the event gaps are device time). Sets rotate, so inputs that fit in L2 are not
  re-read from it.
- cuDNN (PyTorch): the same, with ``torch.cuda.graph`` capture and torch events.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

Issue = Callable[[int], object]


@dataclass(frozen=True)
class Settings:
    warmup: int
    repeats: int

    def __post_init__(self) -> None:
        if self.repeats < 1 or self.warmup < 0:
            raise ValueError(
                f"timing: repeats {self.repeats} must be >= 1 and warmup {self.warmup} >= 0"
            )


def median_us(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e6


class HostTimer:
    def __init__(self, settings: Settings):
        self.settings = settings

    def time_us(self, issue: Issue, sets: int = 1) -> float:
        for i in range(self.settings.warmup):
            issue(i % sets)
        samples = []
        for i in range(self.settings.repeats):
            start = time.perf_counter()
            issue(i % sets)
            samples.append(time.perf_counter() - start)
        return median_us(samples)


class CupyGraphTimer:
    def __init__(self, settings: Settings):
        import cupy

        self.cupy = cupy
        self.settings = settings
        self.stream = cupy.cuda.Stream(non_blocking=True)

    def capture(self, issue: Issue, s: int):
        """One set's launches as a CUDA graph (run once eagerly first: module loads, errors)."""
        stream = self.stream
        with stream:
            issue(s)
            stream.synchronize()
            stream.begin_capture()
            try:
                issue(s)
            finally:
                graph = stream.end_capture()
        return graph

    def time_us(self, issue: Issue, sets: int = 1) -> float:
        cupy, stream = self.cupy, self.stream
        cupy.cuda.runtime.deviceSynchronize()  # operands written on other streams are ready
        graphs = [self.capture(issue, s) for s in range(sets)]
        for i in range(self.settings.warmup):
            graphs[i % sets].launch(stream)
        events = [cupy.cuda.Event() for _ in range(self.settings.repeats + 1)]
        events[0].record(stream)
        for i in range(self.settings.repeats):
            graphs[i % sets].launch(stream)
            events[i + 1].record(stream)
        events[-1].synchronize()
        pairs = zip(events[:-1], events[1:], strict=True)
        samples = [cupy.cuda.get_elapsed_time(a, b) * 1e-3 for a, b in pairs]
        return median_us(samples)


class TorchGraphTimer:
    """For PyTorch work (cuDNN): ``issue(s)`` must only launch (its outputs stay alive in the
    graph's memory pool)."""

    def __init__(self, settings: Settings):
        import torch

        self.torch = torch
        self.settings = settings

    def capture(self, issue: Issue, s: int):
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # eager runs first: cudnn.benchmark picks its algorithm
            for _ in range(2):
                issue(s)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            issue(s)
        return graph

    def time_us(self, issue: Issue, sets: int = 1) -> float:
        torch = self.torch
        graphs = [self.capture(issue, s) for s in range(sets)]
        for i in range(self.settings.warmup):
            graphs[i % sets].replay()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(self.settings.repeats + 1)]
        events[0].record()
        for i in range(self.settings.repeats):
            graphs[i % sets].replay()
            events[i + 1].record()
        events[-1].synchronize()
        samples = [a.elapsed_time(b) * 1e-3 for a, b in zip(events[:-1], events[1:], strict=True)]
        return median_us(samples)
