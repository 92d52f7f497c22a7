"""The cumulative twins of the utilization gauges: process CPU time per
process and over the workload tree (real processes, psutil), GPU busy
time integrated from NVML's utilization samples (the fake NVML) and from
AMD SMI's readings, their window rates, and a post-run payload of a
CPU-bound workload under graphsignal-run."""
import os
import subprocess
import sys
import textwrap

import psutil
import pytest

from graphsignal.sources import amdsmi as amd
from graphsignal.sources.gpu import GpuTelemetry
from graphsignal.sources.host import HostSource
from graphsignal.sources.nvml import Nvml, NvmlBackend
from graphsignal.sources.twins import BusyTime, ProcessCpuTotals
from graphsignal.sidecar.store import COUNTER, MetricStore
from graphsignal.sidecar.windows import window_stats
from support.fakes.fake_amdsmi import FakeAmdGpu, FakeAmdSmi
from support.fakes.fake_nvml import FakeGpu, FakeNvml
from support.gsrun import metrics, run_wrapped

S = 1_000_000_000
STEP_US = 166_000  # the H200's sampling period


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


# -- GPU busy time ------------------------------------------------------------------
def test_busy_time_is_the_integral_of_the_samples():
    b = BusyTime()
    assert b.ns is None  # nothing measured yet
    b.samples([(1_000_000, 50)], now=1.0)  # the first sample only anchors
    assert b.ns == 0
    b.samples([(1_000_000 + STEP_US * i, v) for i, v in enumerate([100, 0, 25], start=1)], now=2.0)
    assert b.ns == (STEP_US * 1000) * (100 + 0 + 25) // 100
    # the driver stopped sampling for 10 s (idle), then one busy sample: it
    # covers its own period (1.5 at most), not the gap
    before = b.ns
    b.samples([(1_000_000 + STEP_US * 3 + 10_000_000, 100)], now=12.0)
    assert b.ns - before == int(1.5 * STEP_US * 1000)
    # samples already seen (or out of order) add nothing
    before = b.ns
    b.samples([(1_000_000, 100), (1_000_000 + STEP_US, 100)], now=13.0)
    assert b.ns == before


def test_busy_time_from_instant_readings_holds_each_for_the_time_since_the_last():
    b = BusyTime()
    b.reading(80.0, now=10.0)
    assert b.ns == 0
    b.reading(50.0, now=12.0)
    assert b.ns == 1 * S  # 50% of 2 s
    b.reading(None, now=13.0)  # unanswered: nothing added, the time passes
    b.reading(100.0, now=13.5)
    assert b.ns == 1 * S + S // 2


class NvRig:
    def __init__(self, gpus=None):
        self.nv = FakeNvml(gpus or [FakeGpu(0)])
        self.store = MetricStore()
        self.clock = Clock()
        self.src = GpuTelemetry(self.store, [NvmlBackend(Nvml(module=self.nv), slow_every=1, clock=self.clock)], {},
                                clock=self.clock)
        self.src.setup()

    def poll(self, seconds=1.0):
        self.clock.t += seconds
        self.src.poll()

    def busy(self, gpu=0):
        (s,) = self.store.lookup("gpu_busy_time_nanoseconds", COUNTER, {"device.index": str(gpu)})
        return s


def test_nvml_busy_time_integrates_the_same_samples_as_utilization():
    r = NvRig()
    g = r.nv.gpus[0]
    g.add_samples(1, 10_000_000, [100] * 6, step_us=STEP_US)
    r.poll()
    # the first read sets the start: the counter counts from the profiler's first look
    assert r.busy().total == 0
    assert r.busy().tags == {"device.uuid": g.uuid, "device.bus_id": g.bus_id, "device.index": "0"}
    last = max(t for t, _ in g.samples[1])
    g.add_samples(1, last + STEP_US, [100, 50, 0, 100, 100, 25], step_us=STEP_US)
    r.poll()
    assert r.store.lookup("gpu_utilization_percent")[0].value == 62.5
    assert r.busy().total == STEP_US * 1000 * (100 + 50 + 0 + 100 + 100 + 25) // 100
    # an idle second: the buffer runs dry, the instant reading (0) adds nothing
    g.values["util_gpu"] = 0
    before = r.busy().total
    r.poll()
    assert r.busy().total == before


def test_nvml_busy_time_without_samples_uses_the_instant_readings():
    r = NvRig()
    r.nv.fail("nvmlDeviceGetSamples", FakeNvml.NVML_ERROR_NOT_SUPPORTED)
    r.nv.gpus[0].values["util_gpu"] = 40
    for _ in range(4):
        r.poll(2.0)
    assert r.busy().total == 3 * int(0.4 * 2 * S)  # three intervals after the first reading


def test_nvml_busy_time_of_a_lost_gpu_keeps_its_total():
    r = NvRig()
    g = r.nv.gpus[0]
    g.add_samples(1, 10_000_000, [100] * 6, step_us=STEP_US)
    r.poll()
    g.add_samples(1, 10_000_000 + 6 * STEP_US, [100] * 6, step_us=STEP_US)
    r.poll()
    total = r.busy().total
    assert total == 6 * STEP_US * 1000
    r.nv.fail("nvmlDeviceGetUtilizationRates", FakeNvml.NVML_ERROR_GPU_IS_LOST)
    r.nv.fail("nvmlDeviceGetSamples", FakeNvml.NVML_ERROR_GPU_IS_LOST)
    r.poll()
    assert r.busy().total == total


def test_amd_busy_time_integrates_the_activity_readings():
    store = MetricStore()
    clock = Clock()
    smi = FakeAmdSmi([FakeAmdGpu(0)])
    src = GpuTelemetry(store, [amd.AmdSmiBackend(amd.AmdSmi(smi), clock=clock)], {}, clock=clock)
    src.setup()
    for _ in range(3):
        clock.t += 1.0
        src.poll()
    (s,) = store.lookup("gpu_busy_time_nanoseconds", COUNTER)
    assert s.total == 2 * int(0.42 * S)  # the fake MI300X is 42% busy


def test_a_window_gives_the_busy_fraction_as_rate():
    r = NvRig()
    g = r.nv.gpus[0]
    g.add_samples(1, 10_000_000, [0] * 6, step_us=STEP_US)
    r.poll()
    r.store.take_history(ts=r.store.start_ns + 1 * S)
    t = 10_000_000 + 6 * STEP_US
    for sec in range(2, 7):  # five seconds at 50%
        g.add_samples(1, t, [50] * 6, step_us=STEP_US)
        t += 6 * STEP_US
        r.poll()
        r.store.take_history(ts=r.store.start_ns + sec * S)
    w = {m["name"]: m for m in window_stats(r.store, 5)["metrics"]}
    busy = w["gpu_busy_time_nanoseconds"]["stats"]
    assert busy["delta"] == 5 * 6 * STEP_US * 1000 // 2
    assert busy["rate"] / 1e9 == pytest.approx(5 * 6 * 0.166 / 2 / 5)  # the busy fraction: 0.498


# -- process CPU time ---------------------------------------------------------------
def test_process_totals_keep_exited_processes_and_tell_reused_pids_apart():
    t = ProcessCpuTotals()
    t.update(10, 1.0, 5 * S)
    t.update(11, 1.5, 2 * S)
    assert t.total() == 7 * S
    t.retire({10})  # 11 exited: its last reading stays in the total
    t.update(10, 1.0, 6 * S)
    assert t.total() == 8 * S
    t.update(10, 9.0, 1 * S)  # pid 10 reused by a new process
    assert t.total() == 9 * S


SPIN = textwrap.dedent("""
    import os, sys, time
    def spin(seconds):
        t0 = time.process_time()
        while time.process_time() - t0 < seconds:
            pass
    done_r, done_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            os.close(hold_w)
            spin(0.4)
            os.write(done_w, b"k")
            os.read(hold_r, 1)  # alive until the parent lets go
            os._exit(0)
        pids.append(pid)
    os.close(hold_r)
    spin(0.6)
    os.read(done_r, 1), os.read(done_r, 1)
    print("spun", flush=True)
    sys.stdin.readline()
    os.close(hold_w)
    for p in pids:
        os.waitpid(p, 0)
    print("reaped", flush=True)
    sys.stdin.readline()
""")


def test_process_cpu_time_per_process_and_over_the_tree_survives_exits():
    child = subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        store = MetricStore()
        src = HostSource(store, lambda: child.pid)
        src.setup()
        assert child.stdout.readline() == b"spun\n"
        src.poll()
        assert len(src.tree.procs) == 3

        def per():
            return {s.tags["process.pid"]: s.total for s in store.lookup("process_cpu_time_nanoseconds", COUNTER)
                    if "process.pid" in s.tags}

        def tree():
            (t,) = store.lookup("process_cpu_time_nanoseconds", COUNTER, {"scope": "process_tree"})
            return t

        first = per()
        assert len(first) == 3
        own = psutil.Process(child.pid).cpu_times()
        assert first[str(child.pid)] == pytest.approx((own.user + own.system) * 1e9, abs=2e7)
        assert first[str(child.pid)] >= 0.57 * S
        assert all(v >= 0.37 * S for v in first.values())  # /proc counts in 10 ms ticks
        assert tree().tags == {"process.root_pid": str(child.pid), "scope": "process_tree"}
        assert tree().total == sum(first.values())
        child.stdin.write(b"\n")
        child.stdin.flush()
        assert child.stdout.readline() == b"reaped\n"  # the two children exited
        src.poll()
        assert len(src.tree.procs) == 1
        after = per()
        # the exited children keep their series and stay in the tree's total: it never goes down
        assert {k: v for k, v in after.items() if k != str(child.pid)} == \
            {k: v for k, v in first.items() if k != str(child.pid)}
        assert tree().total == sum(after.values()) >= sum(first.values())
    finally:
        child.stdin.close()
        child.wait(10)


def test_after_the_run_the_twin_still_shows_the_cpu_the_gauge_no_longer_does():
    # spin 1 s of CPU, then idle: read after the run, the gauge is the
    # idle tail and the counter still has the second
    code = ("import time\nt0 = time.process_time()\nwhile time.process_time() - t0 < 1.0:\n    pass\n"
            "time.sleep(2.5)\n")
    proc, signals = run_wrapped([sys.executable, "-c", code])
    assert proc.returncode == 0, proc.stderr
    (root,) = [r["tags"]["process.pid"] for r in signals["resources"] if r["kind"] == "process"
               and r["tags"]["process.pid"] == r["tags"]["process.root_pid"]]
    (cpu,) = metrics(signals, "process_cpu_time_nanoseconds", **{"process.pid": root})
    assert cpu["type"] == "counter" and 1.0 * S <= cpu["stats"]["total"] < 5 * S
    (tree,) = metrics(signals, "process_cpu_time_nanoseconds", scope="process_tree")
    assert tree["stats"]["total"] >= cpu["stats"]["total"]
    (gauge,) = metrics(signals, "process_cpu_usage_percent", **{"process.pid": root})
    assert gauge["stats"]["value"] is not None


def test_a_window_gives_cpu_cores_as_rate():
    store = MetricStore()
    tags = {"process.pid": "7"}
    for sec, total in enumerate([0, 2 * S, 4 * S, 6 * S]):
        store.set_counter("process_cpu_time_nanoseconds", tags, total)
        store.take_history(ts=store.start_ns + sec * S)
    (m,) = [m for m in window_stats(store, 3)["metrics"] if m["name"] == "process_cpu_time_nanoseconds"]
    assert m["stats"]["rate"] / 1e9 == 2.0  # two cores busy


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_cpu_time_is_the_processes_own_not_its_reaped_children():
    code = ("import os, time\npid = os.fork()\nif pid == 0:\n    t0 = time.process_time()\n"
            "    while time.process_time() - t0 < 0.5:\n        pass\n    os._exit(0)\nos.waitpid(pid, 0)\n"
            "print('reaped', flush=True)\nimport sys\nsys.stdin.readline()\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"reaped\n"
        store = MetricStore()
        src = HostSource(store, lambda: child.pid)
        src.setup()
        src.poll()
        (s,) = store.lookup("process_cpu_time_nanoseconds", COUNTER, {"process.pid": str(child.pid)})
        assert s.total < 0.45 * S  # the child's 0.5 s is in children_user, not here
    finally:
        child.stdin.write(b"\n")
        child.stdin.close()
        child.wait(10)
