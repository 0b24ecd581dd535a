"""Timers of the GPU benchmarks: CUDA events around one call, and CUDA-graph replay (the host's
Python and the small torch ops around each launch are captured, so the host's speed does not
enter the number)."""

from __future__ import annotations

import statistics
import time

import torch

T0 = time.time()


def log(msg):
    """A progress line with the seconds since the start, flushed (a timeout shows where it was)."""
    print(f"[{time.time() - T0:7.1f} s] {msg}", flush=True)


def event_time(fn, iters):
    """Seconds per call: median of `iters` calls each between two CUDA events."""
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)


def stream_time(fn, iters):
    """Seconds per call when ``iters`` calls run back to back between two CUDA events (median of
    three such runs): the host queues the next call while the device runs the last, as in a
    training loop, so a call costs max(its host time, its device time) rather than their sum."""
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3 / iters)
    return statistics.median(ts)


def cuda_time(fn, iters, per_graph=10):
    """Seconds per call of fn: median over `iters` replays of a CUDA graph holding `per_graph`
    calls."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(per_graph):
            fn()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3 / per_graph)
    del g
    torch.cuda.empty_cache()
    return statistics.median(ts)


def copy_baseline(x, iters):
    """(seconds, bytes/s) of the faster bf16 copy of x: cudaMemcpy D2D (events; a memcpy node in
    a graph runs slower) or an elementwise copy kernel (graph replay, as the kernels are timed)."""
    y = torch.empty_like(x)
    t_memcpy = event_time(lambda: y.copy_(x), iters)
    t_kcopy = cuda_time(lambda: torch.mul(x, 1, out=y), iters)
    t = min(t_memcpy, t_kcopy)
    log(f"copy: cudaMemcpy {t_memcpy * 1e3:.3f} ms, elementwise kernel {t_kcopy * 1e3:.3f} ms "
        f"({2 * x.numel() * x.element_size() / t / 1e12:.2f} TB/s, the '% copy' denominator)")
    return t, 2 * x.numel() * x.element_size() / t
