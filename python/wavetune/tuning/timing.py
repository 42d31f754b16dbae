"""Timing launches through torch: CUDA graphs of launches over rotated operand copies, replayed
round-robin. What the grouped-GEMM and attention tuning measure with, and the benchmarks compare with
(the dense GEMM's tuning times through the C++ profiler instead); and PyTorch's documented way to capture
a graph, which the tests and benchmarks of graph capture use. Importing this module imports torch."""

from __future__ import annotations

import statistics

import torch


def interleaved_us(launches: dict, operands: list[tuple], per_graph: int, reps: int) -> dict[str, float]:
    """Median us per launch of each method: one CUDA graph each, replayed round-robin.

    NOTES: everything runs on the one stream the graphs are captured on. A graph keeps the workspace of its
    capture stream (split-K, stream-K, cuBLAS), so replaying it on another stream while the next method
    warms up on the capture stream runs two kernels on one workspace at once: stream-K's tile flags then
    never settle and the GPU hangs (seen on the H100 at M=384, N=3584, K=18944).
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graphs = {}
    samples = {name: [] for name in launches}
    with torch.cuda.stream(stream):
        for name, launch in launches.items():
            # Warm-up outside the capture, once per operand set and at least twice: what a launch sets up on
            # its first call with an operand (workspaces, a benchmark's copies of it) is made here.
            for i in range(max(2, len(operands))):
                launch(*operands[i % len(operands)])
            graphs[name] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graphs[name], stream=stream):
                for i in range(per_graph):
                    launch(*operands[i % len(operands)])
            graphs[name].replay()  # the first replay uploads the graph
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(reps):
            for name, graph in graphs.items():
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                samples[name].append(start.elapsed_time(end) * 1e3 / per_graph)
    torch.cuda.current_stream().wait_stream(stream)
    return {name: statistics.median(s) for name, s in samples.items()}


def capture_documented(fn, *args, warmup: int = 3):
    """PyTorch's CUDA-graph example: ``warmup`` calls of ``fn(*args)`` on a side stream, then
    ``torch.cuda.graph(g)``; returns the graph and its static output."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)
    return graph, out
