"""Timing (DESIGN.md's recipe).

Cold mode (default): before each sample an L2 flush (a write of at least twice the L2 size),
then a short spin kernel that holds the GPU while the host enqueues the start event, the launch
and the end event, so the events bracket the device's work for the launch and not the time the
host took to issue it (without the spin, that host time leaks into the sample whenever the GPU
runs dry, which depends on how many other launches happen to be queued). The host's own cost per
launch is measured apart (``host_us``: wall time per call while the GPU is held busy). Implementations of one case are sampled interleaved, round
by round, so drift in clocks or temperature hits them alike. Sampling stops for an
implementation once the median is stable - the estimated standard error of the median,
1.253 * (IQR / 1.349) / sqrt(n), is at most ``rel_spread`` of the median - or at its time cap.

Graph mode: the launch is captured ``reps`` times into a CUDA graph and the replays are timed;
per-launch time = replay time / reps. L2 stays warm and launch overhead disappears: label it so.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass
class TimingConfig:
    mode: str = "cold"  # "cold" | "graph"
    min_samples: int = 15
    max_samples: int = 2000
    rel_spread: float = 0.01
    time_cap_s: float = 2.0
    warmup_ms: float = 25.0

    def describe(self) -> str:
        if self.mode == "graph":
            return ("CUDA-graph replay, warm L2, launch overhead removed; per-launch time = "
                    "replay / launches per graph")
        return (f"cold L2 (flush of >= 2x L2 before each sample), device time of one launch between "
                f"CUDA events (the host enqueues the launch while a spin kernel holds the GPU; host "
                f"cost per call reported apart as host_us), median of >= {self.min_samples} samples, "
                f"stop when the median's standard error <= {self.rel_spread:.0%} or after "
                f"{self.time_cap_s:g} s")


@dataclass
class Stats:
    samples: list[float] = field(default_factory=list)  # seconds
    wall_s: float = 0.0
    reps: int = 1
    host_s: float | None = None  # host wall time per launch call (GPU held busy meanwhile)

    @property
    def n(self) -> int:
        return len(self.samples)

    def quartiles(self) -> tuple[float, float, float]:
        s = sorted(self.samples)
        if len(s) == 1:
            return s[0], s[0], s[0]
        q = statistics.quantiles(s, n=4, method="inclusive")
        return q[0], statistics.median(s), q[2]

    def stable(self, rel: float) -> bool:
        if self.n < 2:
            return False
        q1, med, q3 = self.quartiles()
        if med <= 0:
            return True
        se = 1.253 * ((q3 - q1) / 1.349) / math.sqrt(self.n)
        return se <= rel * med

    def to_json(self, keep_raw: bool = True) -> dict:
        q1, med, q3 = self.quartiles()
        d = {"median_s": med, "q1_s": q1, "q3_s": q3, "iqr_s": q3 - q1, "samples": self.n,
             "min_s": min(self.samples), "launches_per_sample": self.reps, "host_us":
             None if self.host_s is None else round(self.host_s * 1e6, 2)}
        if keep_raw:
            d["raw_s"] = [float(f"{x:.6g}") for x in self.samples]
        return d


class Flusher:
    """A buffer of at least twice the L2 size, written before each cold sample."""

    def __init__(self, device):
        props = torch.cuda.get_device_properties(device)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0) or 64 * 2 ** 20
        n = max(2 * l2, 256 * 2 ** 20) // 4
        self.buf = torch.empty(n, dtype=torch.int32, device=device)
        self.bytes = n * 4

    def __call__(self):
        self.buf.fill_(1)


def warmup(fn: Callable, ms: float) -> None:
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < ms:
        fn()
        torch.cuda.synchronize()


class Spinner:
    """Holds the GPU for about ``us`` microseconds (torch.cuda._sleep, calibrated once)."""

    def __init__(self, us: float = 300.0):
        self.cycles = 0
        if not hasattr(torch.cuda, "_sleep"):  # pragma: no cover - torch without the spin kernel
            return
        torch.cuda._sleep(1000)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 2_000_000
        s.record()
        torch.cuda._sleep(cycles)
        e.record()
        torch.cuda.synchronize()
        per_us = cycles / max(s.elapsed_time(e) * 1e3, 1.0)
        self.cycles = int(per_us * us)

    def __call__(self):
        if self.cycles:
            torch.cuda._sleep(self.cycles)


def host_cost(fn: Callable, spin: Spinner, calls: int = 10) -> float:
    """Host wall time per call of ``fn`` while the GPU is held busy (nothing waits on the device)."""
    big = Spinner.__new__(Spinner)
    big.cycles = spin.cycles * 20
    big()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    dt = (time.perf_counter() - t0) / calls
    torch.cuda.synchronize()
    return dt


def time_cold(launches: dict[str, Callable], cfg: TimingConfig, device,
              progress: Callable[[str], None] | None = None) -> dict[str, Stats]:
    """Interleaved cold-L2 timing of several zero-argument launches (same case)."""
    flush = Flusher(device)
    spin = Spinner()
    stats = {k: Stats() for k in launches}
    for k, fn in launches.items():
        warmup(fn, cfg.warmup_ms)
        stats[k].host_s = host_cost(fn, spin)
    active = list(launches)
    started = {k: time.perf_counter() for k in launches}
    while active:
        pending = []
        for k in active:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            flush()
            spin()
            s.record()
            launches[k]()
            e.record()
            pending.append((k, s, e))
        torch.cuda.synchronize()
        for k, s, e in pending:
            stats[k].samples.append(s.elapsed_time(e) * 1e-3)
        now = time.perf_counter()
        still = []
        for k in active:
            st = stats[k]
            st.wall_s = now - started[k]
            done = st.n >= cfg.max_samples or (st.n >= cfg.min_samples and (
                st.stable(cfg.rel_spread) or st.wall_s >= cfg.time_cap_s))
            if not done:
                still.append(k)
        active = still
    return stats


def time_graph(launches: dict[str, Callable], cfg: TimingConfig, device) -> dict[str, Stats]:
    """CUDA-graph replays: each sample is one replay of ``reps`` captured launches."""
    out = {}
    for k, fn in launches.items():
        warmup(fn, cfg.warmup_ms)
        # choose reps so that one replay lasts about 1 ms
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        one = max(s.elapsed_time(e) * 1e-3, 1e-6)
        reps = int(min(1000, max(1, 1e-3 / one)))
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            fn()  # side-stream warm-up, as graph capture requires
            torch.cuda.current_stream().synchronize()
            with torch.cuda.graph(g, stream=stream):
                for _ in range(reps):
                    fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        st = Stats(reps=reps)
        t0 = time.perf_counter()
        while True:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            g.replay()
            e.record()
            torch.cuda.synchronize()
            st.samples.append(s.elapsed_time(e) * 1e-3 / reps)
            st.wall_s = time.perf_counter() - t0
            if st.n >= cfg.max_samples or (st.n >= cfg.min_samples and (
                    st.stable(cfg.rel_spread) or st.wall_s >= cfg.time_cap_s)):
                break
        out[k] = st
        del g
    return out


def time_launches(launches, cfg: TimingConfig, device) -> dict[str, Stats]:
    if cfg.mode == "graph":
        return time_graph(launches, cfg, device)
    return time_cold(launches, cfg, device)
