"""NVML telemetry on a real NVIDIA GPU (skipped without one; see conftest).

Every field the GPU supports is present and plausible; utilization and
power rise under a torch GEMM loop in a subprocess and fall after it;
several GPUs are told apart; the workload's CUDA_VISIBLE_DEVICES scopes
them; graphsignal-run serves it all, with the GPU's own activity counters
(GPM, Hopper and newer) under a bf16 GEMM loop and on an idle GPU.
"""
import importlib.util
import json
import os
import queue
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest

from graphsignal import config
from graphsignal.sources.gpu import GpuTelemetry
from graphsignal.sources.nvml import Nvml, NvmlBackend
from graphsignal.sidecar.store import COUNTER, GAUGE, MetricStore

pytestmark = pytest.mark.gpu

ALL = {"GRAPHSIGNAL_ALL_GPUS": "1"}
BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")

GEMM = r"""
import sys, time, torch
seconds = float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(5):
    c = a @ b
torch.cuda.synchronize()
print("ready", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    for _ in range(50):
        c = a @ b
    torch.cuda.synchronize()
print("done", flush=True)
"""


class Telemetry:
    """The real thing: pynvml, one store, the telemetry source."""

    def __init__(self, environ):
        self.store = MetricStore()
        s = config.from_environ(environ)
        self.src = GpuTelemetry(self.store, [NvmlBackend(Nvml())], dict(s.visible_devices), all_gpus=s.all_gpus)
        self.src.setup()

    def devices(self):
        return self.src.devices()

    def gauge(self, name, dev, **tags):
        tags["device.uuid"] = dev.uuid
        found = self.store.lookup(name, GAUGE, tags)
        assert len(found) == 1, (name, tags, found)
        return found[0].value

    def counter(self, name, dev, **tags):
        tags["device.uuid"] = dev.uuid
        found = self.store.lookup(name, COUNTER, tags)
        assert len(found) == 1, (name, tags, found)
        return found[0].total

    def close(self):
        self.src.shutdown()


@pytest.fixture
def telemetry():
    t = Telemetry(ALL)
    yield t
    t.close()


def _pynvml_handle(dev):
    import pynvml

    return pynvml, pynvml.nvmlDeviceGetHandleByUUID(dev.uuid)


def refused(value, fn, *args):
    """True when `value` was measured; when it is null, NVML itself must
    refuse `fn(*args)` (null only for what the GPU cannot tell)."""
    if value is not None:
        return True
    import pynvml

    with pytest.raises(pynvml.NVMLError):
        fn(*args)
    return False


def test_every_supported_field_is_present_and_plausible(telemetry):
    from graphsignal.sources.nvml import SLOW_EVERY

    t = telemetry
    t.src.poll()
    for _ in range(SLOW_EVERY):  # up to the second read of the slow tier (rates need two)
        time.sleep(0.25)
        t.src.poll()
    dev = t.devices()[0]
    g = lambda name, **tags: t.gauge(name, dev, **tags)  # noqa: E731

    assert dev.uuid.startswith("GPU-") and BUS_ID.match(dev.bus_id), (dev.uuid, dev.bus_id)
    total, free, used = g("gpu_memory_total_bytes"), g("gpu_memory_free_bytes"), g("gpu_memory_used_bytes")
    assert total > 8 * 2 ** 30 and 0 <= used <= total and used + free == total
    pynvml, h = _pynvml_handle(dev)
    reserved = g("gpu_memory_reserved_bytes")
    if refused(reserved, pynvml.nvmlDeviceGetMemoryInfo, h, pynvml.nvmlMemory_v2):
        assert 0 <= reserved < total // 10
    assert 0 <= g("gpu_utilization_percent") <= 100
    assert 0 <= g("gpu_memory_busy_percent") <= 100
    limit = g("gpu_power_management_limit_watts")
    assert 100 <= limit <= 2000
    assert 10 < g("gpu_power_usage_watts") < limit * 1.5
    assert 5 <= g("gpu_temperature_celsius") <= 100
    mem_temp = g("gpu_memory_temperature_celsius")
    if mem_temp is None:
        (fv,) = pynvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_MEMORY_TEMP])
        assert fv.nvmlReturn != pynvml.NVML_SUCCESS
    else:
        assert 5 <= mem_temp <= 110
    fan = g("gpu_fan_speed_percent")  # null on passively cooled boards (H100/H200 SXM)
    if refused(fan, pynvml.nvmlDeviceGetFanSpeed, h):
        assert 0 <= fan <= 100
    max_sm, max_mem = g("gpu_max_clock_sm_megahertz"), g("gpu_max_clock_mem_megahertz")
    assert 500 <= max_sm <= 4000 and 500 <= max_mem <= 20000
    assert 0 < g("gpu_clock_sm_megahertz") <= max_sm
    assert 0 < g("gpu_clock_mem_megahertz") <= max_mem
    mask = g("gpu_clocks_throttle_reasons")
    assert isinstance(mask, int) and mask >= 0
    reasons = {s.tags["reason"]: s.value for s in t.store.lookup("gpu_clocks_throttle_reason_active", GAUGE,
                                                                 {"device.uuid": dev.uuid})}
    assert "gpu_idle" in reasons and set(reasons.values()) <= {0, 1}
    assert 0 <= g("gpu_performance_state") <= 15
    assert 1 <= g("gpu_pcie_link_generation") <= 6
    assert g("gpu_pcie_link_width") in (1, 2, 4, 8, 16, 32)
    assert g("gpu_pcie_throughput_tx_kilobytes_per_second") >= 0
    assert g("gpu_pcie_throughput_rx_kilobytes_per_second") >= 0
    assert t.counter("gpu_pcie_replay_counter", dev) >= 0
    energy = t.counter("gpu_energy_consumed_joules", dev)
    if refused(energy, pynvml.nvmlDeviceGetTotalEnergyConsumption, h):
        assert energy >= 0
    for kind, etype in (("corrected", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                        ("uncorrected", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
        ecc = t.counter("gpu_ecc_errors", dev, kind=kind)
        if refused(ecc, pynvml.nvmlDeviceGetTotalEccErrors, h, etype, pynvml.NVML_VOLATILE_ECC):
            assert ecc >= 0
    xid = t.counter("gpu_xid_errors", dev)
    if xid is None:  # then the driver refuses XID events to anyone here
        es = pynvml.nvmlEventSetCreate()
        try:
            with pytest.raises(pynvml.NVMLError):
                if not pynvml.nvmlDeviceGetSupportedEventTypes(h) & pynvml.nvmlEventTypeXidCriticalError:
                    raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
                pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
        finally:
            pynvml.nvmlEventSetFree(es)
    else:
        assert xid == 0

    if t.store.lookup("gpu_nvlink_active_links"):
        assert 0 <= g("gpu_nvlink_active_links") <= 36
        assert t.counter("gpu_nvlink_tx_bytes", dev) >= 0
        assert g("gpu_nvlink_throughput_tx_kilobytes_per_second") >= 0

    (res,) = [r for r in t.store.resources.values() if r["tags"]["device.uuid"] == dev.uuid]
    attrs = res["attributes"]
    assert attrs["device.name"].startswith("NVIDIA")
    if re.search(r"H100|H200|GH200", attrs["device.name"]):
        assert attrs["architecture"] == "Hopper" and attrs["compute_capability"] == "9.0"
    assert re.match(r"^\d+\.\d+$", attrs["compute_capability"])
    assert attrs["mem_total"] == str(total)
    assert attrs["driver_version"] == pynvml.nvmlSystemGetDriverVersion()
    assert re.match(r"^\d+\.\d+$", attrs["cuda_driver_version"])
    assert not [e for e in t.store.errors if e["level"] == "error"], list(t.store.errors)


class Gemm:
    """The GEMM loop in a subprocess; its stdout lines arrive on a queue
    (a reader thread, so a slow or silent child cannot hang the test)."""

    def __init__(self, uuid, seconds):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=uuid)  # the same physical GPU
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-c", GEMM, str(seconds)], env=env, stdout=subprocess.PIPE,
                                     stderr=self.err)
        self.lines = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line.decode(errors="replace").strip())
        self.lines.put(None)

    def wait_for(self, want, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            if line == want:
                return
        self.err.seek(0)
        raise AssertionError("GEMM subprocess never printed %r: %s" % (want, self.err.read()[-2000:]))

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.err.close()


def test_utilization_and_power_rise_under_gemm_and_fall_after(telemetry):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    t = telemetry
    dev = t.devices()[0]
    t.src.poll()
    time.sleep(1.5)
    t.src.poll()
    idle_power = t.gauge("gpu_power_usage_watts", dev)

    gemm = Gemm(dev.uuid, 12)
    try:
        gemm.wait_for("ready", 300)
        time.sleep(1.0)
        t.src.poll()  # drops the samples from before the loop started
        utils, powers = [], []
        for _ in range(4):
            time.sleep(1.0)
            t.src.poll()
            utils.append(t.gauge("gpu_utilization_percent", dev))
            powers.append(t.gauge("gpu_power_usage_watts", dev))
        gemm.wait_for("done", 60)
        assert gemm.proc.wait(60) == 0
    finally:
        gemm.close()
    assert sorted(utils)[len(utils) // 2] > 80, utils
    assert max(powers) > idle_power + 40, (idle_power, powers)

    time.sleep(2.0)
    t.src.poll()
    time.sleep(1.5)
    t.src.poll()
    after = t.gauge("gpu_utilization_percent", dev)
    assert after is not None and after <= 10, (utils, after)


def test_two_gpus_are_two_devices_with_distinct_uuids(telemetry):
    t = telemetry
    devs = t.devices()
    if len(devs) < 2:
        pytest.skip("one GPU here")
    t.src.poll()
    assert len({d.uuid for d in devs}) == len(devs)
    assert len({d.bus_id for d in devs}) == len(devs)
    device_resources = [r for r in t.store.resources.values() if r["kind"] == "device"]
    assert len(device_resources) == len(devs)
    for d in devs:
        assert t.gauge("gpu_memory_total_bytes", d) > 0
        assert t.gauge("gpu_utilization_percent", d) is not None


def test_the_workloads_visible_devices_scope_the_gpus():
    probe = Telemetry(ALL)
    devs = probe.devices()
    probe.close()
    last = devs[-1]
    n = 12  # "GPU-" and 8 hex digits, or longer until it names one GPU
    while sum(d.uuid.startswith(last.uuid[:n]) for d in devs) > 1:
        n += 1
    for visible in (str(last.index), last.uuid, last.uuid[:n]):
        t = Telemetry({"CUDA_VISIBLE_DEVICES": visible})
        try:
            assert [d.uuid for d in t.devices()] == [last.uuid], visible
        finally:
            t.close()


def test_graphsignal_run_serves_gpu_telemetry():
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    os.unlink(path)
    env = dict(os.environ, GRAPHSIGNAL_SIGNALS_FILE=path, CUDA_VISIBLE_DEVICES="0")
    env.pop("GRAPHSIGNAL_ALL_GPUS", None)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    cmd = [sys.executable, "-m", "graphsignal.cli.run", "--listen-port", str(port), sys.executable, "-c",
           "import time; time.sleep(3)"]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        with open(path) as f:
            signals = json.load(f)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    util = [m for m in signals["metrics"] if m["name"] == "gpu_utilization_percent"]
    assert len(util) == 1, util
    tags = util[0]["tags"]
    assert tags["device.uuid"].startswith("GPU-") and tags["device.index"] == "0" and BUS_ID.match(
        tags["device.bus_id"])
    assert util[0]["stats"]["value"] is not None
    names = {m["name"] for m in signals["metrics"]}
    for name in ("gpu_memory_used_bytes", "gpu_memory_free_bytes", "gpu_memory_total_bytes", "gpu_power_usage_watts",
                 "gpu_power_management_limit_watts", "gpu_temperature_celsius", "gpu_clock_sm_megahertz",
                 "gpu_clock_mem_megahertz", "gpu_max_clock_sm_megahertz", "gpu_clocks_throttle_reasons",
                 "gpu_performance_state", "gpu_pcie_link_generation", "gpu_pcie_link_width",
                 "gpu_pcie_throughput_rx_kilobytes_per_second", "gpu_pcie_throughput_tx_kilobytes_per_second",
                 "gpu_pcie_replay_counter"):
        assert name in names, name
    devices = [r for r in signals["resources"] if r["kind"] == "device"]
    assert len(devices) == 1 and devices[0]["tags"] == tags
    assert not [e for e in signals["errors"] if e["tags"].get("source") in ("gpu", "nvml") or
                "NVML" in e["message"]], signals["errors"]


# -- GPM: the GPU's own activity counters under graphsignal-run ---------------------------------
GPM_WORKLOAD = r"""
import sys, time, torch
idle, busy = float(sys.argv[1]), float(sys.argv[2])
torch.zeros(1, device="cuda")  # the context, before the idle phase: its setup is not what is measured
torch.cuda.synchronize()
print("idle", flush=True)
time.sleep(idle)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(5):
    c = a @ b
torch.cuda.synchronize()
print("busy", flush=True)
end = time.monotonic() + busy
while time.monotonic() < end:
    for _ in range(20):  # ~40 ms of GEMMs per sync on an H100: the gaps are noise
        c = a @ b
    torch.cuda.synchronize()
print("done", flush=True)
"""
GPM_SERIES = ("gpu_sm_active_percent", "gpu_sm_occupancy_percent", "gpu_tensor_active_percent",
              "gpu_dram_active_percent", "gpu_fp16_active_percent", "gpu_fp32_active_percent")
IDLE_S, BUSY_S = 9.0, 10.0
SETTLE_S = 2.5  # a value covers the poll before it (~1 s): wait past windows that straddle a phase change


def _free_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def _gpm_supported_on_gpu0():
    """(supported, why not) from NVML itself, before anything is started."""
    import pynvml

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        if not hasattr(pynvml, "nvmlGpmQueryDeviceSupport"):
            return False, "this nvidia-ml-py has no GPM"
        try:
            ok = pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice
        except pynvml.NVMLError as e:
            return False, "nvmlGpmQueryDeviceSupport on %s: %s" % (name, e)
        return bool(ok), "%s has no GPM (it needs Hopper or newer)" % name
    finally:
        pynvml.nvmlShutdown()


class RunUnder:
    """A workload under graphsignal-run, its stdout lines on a queue (a
    reader thread: a silent child cannot hang the test) and its /signals."""

    def __init__(self, argv, env):
        self.port = _free_port()
        self.err = tempfile.TemporaryFile()
        cmd = [sys.executable, "-m", "graphsignal.cli.run", "--listen-port", str(self.port)] + argv
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=self.err)
        self.lines = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line.decode(errors="replace").strip())
        self.lines.put(None)

    def stderr(self):
        self.err.seek(0)
        return self.err.read()[-3000:].decode(errors="replace")

    def wait_for(self, want, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            if line == want:
                return
        raise AssertionError("the workload never printed %r; graphsignal-run's stderr: %s" % (want, self.stderr()))

    def signals(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/signals" % self.port, timeout=5) as r:
            return json.loads(r.read())

    def gpm(self, seconds, every=0.25):
        """One reading per new GPM value over `seconds`: a list of {series:
        value} of the GPU-wide series (not a MIG instance's)."""
        out, seen = [], set()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                doc = self.signals()
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(every)
                continue
            found = [m for m in doc["metrics"] if m["name"] in GPM_SERIES and m["type"] == "gauge"
                     and "device.gpu_instance_id" not in m["tags"]]
            stamp = tuple(sorted((m["name"], m.get("updated_ns")) for m in found))
            if found and stamp not in seen:
                seen.add(stamp)
                out.append({m["name"]: m["stats"]["value"] for m in found})
            time.sleep(every)
        return out

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.err.close()


def _artifact(name, obj):
    folder = os.environ.get("GRAPHSIGNAL_TEST_ARTIFACTS")
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, name), "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True)


def _median(readings, name):
    values = [r.get(name) for r in readings]
    return statistics.median(values) if values and None not in values else None


def test_gpm_shows_tensor_and_dram_activity_under_a_bf16_gemm_loop_and_an_idle_gpu_near_zero():
    """Under graphsignal-run --cuda-trace off (nothing of ours in the
    workload): an idle GPU (a context, no kernels) below 5 % SM activity,
    then a bf16 8192^3 GEMM loop at 50 % tensor activity or more, with DRAM
    traffic, read from /signals while each phase runs."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    supported, why = _gpm_supported_on_gpu0()
    if not supported:
        pytest.skip(why)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0", GRAPHSIGNAL_LOG_LEVEL="info")
    env.pop("GRAPHSIGNAL_ALL_GPUS", None)
    run = RunUnder(["--cuda-trace", "off", sys.executable, "-c", GPM_WORKLOAD, str(IDLE_S), str(BUSY_S)], env)
    idle, busy, errors = [], [], []
    try:
        run.wait_for("idle", 300)  # torch's import and CUDA's start can take a while on a cold host
        time.sleep(SETTLE_S)
        idle = run.gpm(IDLE_S - SETTLE_S - 1.0)
        run.wait_for("busy", 120)
        time.sleep(SETTLE_S)
        busy = run.gpm(BUSY_S - SETTLE_S - 2.0)
        errors = [e for e in run.signals()["errors"] if "GPM" in e["message"]]
        run.wait_for("done", 60)
        assert run.proc.wait(60) == 0, run.stderr()
        stderr = run.stderr()
    finally:
        run.close()
    _artifact("gpm_gemm.json", {"idle": idle, "busy": busy, "errors": errors})
    seen = "idle readings %s; GEMM readings %s; graphsignal-run's stderr: %s" % (idle, busy, stderr[-1500:])
    assert not errors, "GPM errors in /signals: %s; %s" % (errors, seen)
    assert len(idle) >= 2 and len(busy) >= 3, "too few GPM readings (absent series?): " + seen
    sm_idle = [r.get("gpu_sm_active_percent") for r in idle]
    assert None not in sm_idle and max(sm_idle) < 5, "idle GPU: SM activity %s %% (want < 5): %s" % (sm_idle, seen)
    tensor = _median(busy, "gpu_tensor_active_percent")
    dram = _median(busy, "gpu_dram_active_percent")
    sm = _median(busy, "gpu_sm_active_percent")
    assert tensor is not None and tensor >= 50, "bf16 GEMM loop: median tensor activity %s %% (want >= 50): %s" % (
        tensor, seen)
    assert dram is not None and dram > 0, "bf16 GEMM loop: median DRAM activity %s %% (want > 0): %s" % (dram, seen)
    assert sm is not None and sm > max(sm_idle), "bf16 GEMM loop: median SM activity %s %% not above idle: %s" % (
        sm, seen)
