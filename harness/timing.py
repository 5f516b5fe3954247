"""Timing (DESIGN.md's recipe).

Cold mode (default): before each sample an L2 flush (a write of at least twice the L2 size),
then a short spin kernel that holds the GPU while the host enqueues the start event, the launch
and the end event, so the events bracket the device's work for the launch and not the time the
host took to issue it (without the spin, that host time leaks into the sample whenever the GPU
runs dry, which depends on how many other launches happen to be queued). The host's own cost per
launch is measured apart (``host_us``: wall time per call while the GPU is held busy). Implementations of one case are sampled interleaved, round
by round, so drift in clocks or temperature hits them alike, and each round starts one place
further along the list, so that no implementation always takes the same slot in a round. Sampling stops for an
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


def _on_gpu(device) -> bool:
    return torch.device(device).type == "cuda"


def _sync(device) -> None:
    if _on_gpu(device):
        torch.cuda.synchronize()


class _HostEvent:
    """A wall-clock stand-in for a CUDA event (the CPU mode: self-test and unit tests only;
    nothing timed on the CPU is reported as a result)."""

    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, end) -> float:
        return (end.t - self.t) * 1e3


def _event(device):
    return torch.cuda.Event(enable_timing=True) if _on_gpu(device) else _HostEvent()


def warmup(fn: Callable, ms: float, device="cuda") -> None:
    fn()
    _sync(device)
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < ms:
        fn()
        _sync(device)


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


def host_cost(fn: Callable, spin: Spinner, calls: int = 10, device="cuda") -> float:
    """Host wall time per call of ``fn`` while the GPU is held busy (nothing waits on the device)."""
    big = Spinner.__new__(Spinner)
    big.cycles = spin.cycles * 20
    big()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    dt = (time.perf_counter() - t0) / calls
    _sync(device)
    return dt


class _Plain:
    """A bare zero-argument launch (the vendor GEMM): nothing to poison or check."""

    def __init__(self, fn: Callable):
        self.call = fn

    def poison(self):
        pass

    def result(self, res):
        return res


def _target(t):
    return t if hasattr(t, "call") else _Plain(t)


def _err(e: BaseException) -> str:
    msg = str(e).strip()
    return f"{type(e).__name__}: {msg.splitlines()[0] if msg else ''}"[:500]


Check = Callable[[str, object], "object | None"]  # (key, output) -> verify.Check or None


def _verify(check, k, t, res, when: str, errors: dict) -> bool:
    """Run ``check`` on a timed launch's output; record a failure in ``errors``."""
    if check is None or isinstance(t, _Plain):
        return True
    c = check(k, t.result(res))
    if c is not None and not c.ok:
        errors[k] = f"the {when} timed launch's output fails verification: {c.reason}"
        return False
    return True


def time_cold(launches: dict, cfg: TimingConfig, device, check: Check | None = None,
              errors: dict | None = None) -> dict[str, Stats]:
    """Interleaved cold-L2 timing of several launches of one case.

    Each entry is a zero-argument callable or an object with ``call()``, ``poison()`` and
    ``result(res)`` (``harness.verify.Launcher``): its output is poisoned before every sample, and
    ``check(key, output)`` verifies the first and the last timed launch. An entry whose launch
    raises or whose timed output fails is dropped with the reason in ``errors``; the others go on."""
    errors = {} if errors is None else errors
    targets = {k: _target(t) for k, t in launches.items()}
    gpu = _on_gpu(device)
    flush = Flusher(device) if gpu else (lambda: None)
    spin = Spinner() if gpu else Spinner.__new__(Spinner)
    if not gpu:
        spin.cycles = 0
    stats = {k: Stats() for k in targets}
    for k, t in targets.items():
        try:
            warmup(t.call, cfg.warmup_ms, device)
            stats[k].host_s = host_cost(t.call, spin, device=device)
        except Exception as e:
            errors[k] = f"raised while warming up for timing: {_err(e)}"
    active = [k for k in targets if k not in errors]
    started = {k: time.perf_counter() for k in targets}
    last: dict = {}
    first_round = True
    rounds = 0
    while active:
        pending = []
        # each round starts one place further along: no implementation always takes the slot
        # after the host's wait for the previous round (or after the same neighbour)
        shift = rounds % len(active)
        rounds += 1
        for k in active[shift:] + active[:shift]:
            t = targets[k]
            s, e = _event(device), _event(device)
            try:
                t.poison()
                flush()
                spin()
                s.record()
                res = t.call()
                e.record()
            except Exception as ex:
                errors[k] = f"raised during timing: {_err(ex)}"
                continue
            pending.append((k, s, e, res))
        _sync(device)
        now = time.perf_counter()
        still = []
        for k, s, e, res in pending:
            st = stats[k]
            st.samples.append(s.elapsed_time(e) * 1e-3)
            last[k] = res
            if first_round and not _verify(check, k, targets[k], res, "first", errors):
                continue
            st.wall_s = now - started[k]
            done = st.n >= cfg.max_samples or (st.n >= cfg.min_samples and (
                st.stable(cfg.rel_spread) or st.wall_s >= cfg.time_cap_s))
            if done:
                _verify(check, k, targets[k], res, "last", errors)
            else:
                still.append(k)
        first_round = False
        active = [k for k in active if k in still]     # the list's own order: only the start turns
    return {k: st for k, st in stats.items() if k not in errors and st.n}


def time_graph(launches: dict, cfg: TimingConfig, device, check: Check | None = None,
               errors: dict | None = None) -> dict[str, Stats]:
    """CUDA-graph replays: each sample is one replay of ``reps`` captured launches.

    Before timing, the output is poisoned and the graph replayed once: a launch that escaped the
    capture (another stream, work done at capture time) leaves the output unwritten and fails
    here; the output of the last timed replay is verified too."""
    errors = {} if errors is None else errors
    out = {}
    for k, t in ((k, _target(t)) for k, t in launches.items()):
        try:
            warmup(t.call, cfg.warmup_ms)
            # choose reps so that one replay lasts about 1 ms
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            t.call()
            e.record()
            torch.cuda.synchronize()
            one = max(s.elapsed_time(e) * 1e-3, 1e-6)
            reps = int(min(1000, max(1, 1e-3 / one)))
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            g = torch.cuda.CUDAGraph()
            with torch.cuda.stream(stream):
                t.call()  # side-stream warm-up, as graph capture requires
                torch.cuda.current_stream().synchronize()
                with torch.cuda.graph(g, stream=stream):
                    for _ in range(reps):
                        res = t.call()
            torch.cuda.current_stream().wait_stream(stream)
            torch.cuda.synchronize()
            t.poison()
            g.replay()
            torch.cuda.synchronize()
        except Exception as ex:
            errors[k] = f"raised during graph capture or replay: {_err(ex)}"
            continue
        if not _verify(check, k, t, res, "graph-replayed (did a kernel escape the capture?)", errors):
            continue
        st = Stats(reps=reps)
        t0 = time.perf_counter()
        while True:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t.poison()
            s.record()
            g.replay()
            e.record()
            torch.cuda.synchronize()
            st.samples.append(s.elapsed_time(e) * 1e-3 / reps)
            st.wall_s = time.perf_counter() - t0
            if st.n >= cfg.max_samples or (st.n >= cfg.min_samples and (
                    st.stable(cfg.rel_spread) or st.wall_s >= cfg.time_cap_s)):
                break
        if _verify(check, k, t, res, "last graph-replayed", errors):
            out[k] = st
        del g
    return out


def time_launches(launches, cfg: TimingConfig, device, check: Check | None = None,
                  errors: dict | None = None) -> dict[str, Stats]:
    if cfg.mode == "graph":
        return time_graph(launches, cfg, device, check, errors)
    return time_cold(launches, cfg, device, check, errors)
