"""Cumulative twins of the utilization gauges.

A gauge such as `process_cpu_usage_percent` or `gpu_utilization_percent`
says what happened in the last second; read after the run, it says 0.
Its twin is a counter of the time the resource was busy since the
profiler started watching, so a payload read after the run, a window, or
a diff of two runs still tells busy from idle:

  process_cpu_time_nanoseconds   user + system CPU time (ProcessCpuTotals
                                 sums it over the workload's process tree)
  gpu_busy_time_nanoseconds      time a kernel was running (BusyTime
                                 integrates the utilization samples)

Their window rate divided by 1e9 is CPU cores used and the GPU's busy
fraction over the window.
"""
from typing import Container, Dict, Iterable, Optional, Tuple

NS_PER_US = 1000


class BusyTime:
    """Busy nanoseconds of one GPU: the integral of utilization percent
    over time.

    samples() takes the driver's timestamped samples (NVML: each sample is
    the percent of time a kernel ran since the sample before it), so the
    integral follows the driver's own clock. reading() takes one
    instantaneous percent per poll (no samples on this GPU) and holds it
    for the time since the previous reading."""

    __slots__ = ("total", "last_ts", "period", "last_t", "measured")

    def __init__(self) -> None:
        self.total = 0.0  # ns
        self.last_ts: Optional[float] = None  # microseconds of the last sample integrated (the driver's clock)
        self.period: Optional[float] = None  # the driver's sampling period, microseconds
        self.last_t: Optional[float] = None  # seconds (monotonic) of the last reading
        self.measured = False

    def samples(self, pairs: Iterable[Tuple[float, float]], now: float) -> None:
        """pairs: [(timestamp_us, percent)], percent within 0..100. The
        first sample ever only anchors the next. A sample covers the
        driver's sampling period before it, so a longer gap (the driver
        stops sampling an idle GPU) counts as 1.5 periods at most: a
        period plus room for the driver's jitter."""
        ordered = sorted(pairs)
        gaps = [b[0] - a[0] for a, b in zip(ordered, ordered[1:]) if b[0] > a[0]]
        if len(gaps) >= 2:
            self.period = sorted(gaps)[len(gaps) // 2]
        elif gaps and self.period is None:
            self.period = gaps[0]
        cap = 1.5 * self.period if self.period else None
        for ts, pct in ordered:
            if self.last_ts is not None and ts > self.last_ts:
                dt = ts - self.last_ts
                if cap is not None and dt > cap:
                    dt = cap
                self.total += pct / 100.0 * dt * NS_PER_US
            if self.last_ts is None or ts > self.last_ts:
                self.last_ts = ts
        self.last_t = now
        self.measured = True

    def reading(self, percent: Optional[float], now: float) -> None:
        """One instantaneous percent at `now` (seconds), or None when the
        driver answered nothing."""
        if percent is not None:
            if self.last_t is not None and now > self.last_t:
                self.total += percent / 100.0 * (now - self.last_t) * 1e9
            self.measured = True
        self.last_t = now
        # samples after this reading only anchor: the time up to now is counted
        self.last_ts = None

    @property
    def ns(self) -> Optional[int]:
        """Busy nanoseconds so far, or None before anything was measured."""
        return int(round(self.total)) if self.measured else None


class ProcessCpuTotals:
    """CPU time summed over a process tree, cumulative: a process that
    exits keeps the CPU time it had at its last reading (processes that
    live less than a poll interval are missed), and a reused pid (another
    start time) counts as a new process."""

    def __init__(self) -> None:
        self.live: Dict[int, Tuple[Optional[float], int]] = {}  # pid -> (start time, ns)
        self.gone_ns = 0

    def update(self, pid: int, started: Optional[float], ns: int) -> None:
        prev = self.live.get(pid)
        if prev is not None and prev[0] != started:
            self.gone_ns += prev[1]
            prev = None
        self.live[pid] = (started, max(ns, prev[1]) if prev is not None else ns)

    def retire(self, alive: Container[int]) -> None:
        """Folds the processes not in `alive` (pids) into the total."""
        for pid in [p for p in self.live if p not in alive]:
            self.gone_ns += self.live.pop(pid)[1]

    def total(self) -> int:
        return self.gone_ns + sum(ns for _, ns in self.live.values())
