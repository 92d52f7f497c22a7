"""NVML GPM through a fake pynvml: the GPU's own activity counters per GPU
and per MIG GPU instance, each value over the time between two polls;
where GPM is not supported or refused, one line and no series (never 0);
sample buffers allocated once and freed at shutdown; the fake's GPM
structs are nvml.h's."""
import ctypes
import logging

import pytest

from graphsignal.naming.metrics import BY_NAME, label_of
from graphsignal.sidecar.store import GAUGE, MetricStore
from graphsignal.sources import gpm
from graphsignal.sources.gpu import GpuTelemetry
from graphsignal.sources.nvml import Nvml, NvmlBackend
from support.fakes.fake_nvml import LAYOUTS, FakeGpu, FakeNvml

NV = FakeNvml
BUSY = dict(graphics=90, sm=80, occupancy=40, tensor=60, dram=25, fp64=0, fp32=12, fp16=3)
SERIES = {"graphics": "gpu_gr_engine_active_percent", "sm": "gpu_sm_active_percent",
          "occupancy": "gpu_sm_occupancy_percent", "tensor": "gpu_tensor_active_percent",
          "dram": "gpu_dram_active_percent", "fp64": "gpu_fp64_active_percent", "fp32": "gpu_fp32_active_percent",
          "fp16": "gpu_fp16_active_percent"}


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class Rig:
    """A fake NVML, a store and the telemetry source, all on one clock (the
    fake's GPM counters run on it too)."""

    def __init__(self, gpus=None):
        self.clock = Clock()
        self.nv = FakeNvml(gpus if gpus is not None else [FakeGpu(0)], clock=self.clock)
        self.store = MetricStore()
        self.nvml = Nvml(module=self.nv, on_error=lambda m: self.store.add_error("warning", m))
        self.src = GpuTelemetry(self.store, [NvmlBackend(self.nvml, slow_every=1, clock=self.clock)], {},
                                all_gpus=True, clock=self.clock)

    def start(self):
        self.src.setup()
        return self

    def run(self, gpu=0, **percents):
        """From now on, GPU `gpu` (a FakeGpu, FakeGpuInstance or index) runs at these percents."""
        target = self.nv.gpus[gpu] if isinstance(gpu, int) else gpu
        target.gpm.set(self.clock(), **percents)

    def poll(self, seconds=1.0):
        self.clock.t += seconds
        self.src.poll()

    def gpm(self, gpu=0, gi=None):
        """{short name: value} of the GPM series of one GPU (or GPU instance)."""
        out = {}
        for short, name in SERIES.items():
            tags = {"device.index": str(gpu)}
            found = [s for s in self.store.lookup(name, GAUGE, tags)
                     if s.tags.get(gpm.TAG) == (None if gi is None else str(gi))]
            assert len(found) <= 1, found
            if found:
                out[short] = found[0].value
        return out

    def gpm_names(self):
        return {s.name for s in self.store.series.values() if s.name in gpm.SERIES}

    def errors(self):
        return list(self.store.errors)


def gpm_lines(caplog):
    return [r.getMessage() for r in caplog.records if "GPM" in r.getMessage()]


# -- values -----------------------------------------------------------------------------------
def test_every_gpm_series_is_the_share_of_the_time_since_the_last_poll():
    r = Rig().start()
    r.run(sm=20, tensor=10)
    r.poll()
    r.run(**BUSY)
    r.poll()
    # the second window only: not 50 (since the first sample) and not a window of one sample
    assert r.gpm() == {k: pytest.approx(v) for k, v in BUSY.items()}
    assert r.gpm()["fp64"] == 0.0  # measured zero stays zero
    r.run(sm=5)
    r.poll(2.0)
    got = r.gpm()
    assert got["sm"] == pytest.approx(5.0) and got["tensor"] == 0.0
    assert r.errors() == []


def test_a_window_that_changes_midway_is_its_time_weighted_average():
    r = Rig().start()
    r.poll()
    r.run(tensor=100)
    r.clock.t += 0.25
    r.run(tensor=0)
    r.poll(0.75)
    assert r.gpm()["tensor"] == pytest.approx(25.0)


def test_the_first_poll_takes_a_sample_and_emits_nothing():
    r = Rig().start()
    r.run(**BUSY)
    r.poll()
    # one sample is no window: no series yet, and no placeholder 0 or null
    assert r.gpm_names() == set()
    assert r.nv.count("nvmlGpmSampleGet") == 1 and r.nv.count("nvmlGpmMetricsGet") == 0
    assert r.store.lookup("gpu_temperature_celsius")  # the rest of the poll went on


def test_each_gpu_has_its_own_series():
    r = Rig([FakeGpu(0), FakeGpu(1)]).start()
    r.run(0, sm=70, tensor=50)
    r.run(1, sm=10, dram=40)
    r.poll()
    r.poll()
    assert r.gpm(0)["sm"] == 70 and r.gpm(0)["tensor"] == 50 and r.gpm(0)["dram"] == 0
    assert r.gpm(1)["sm"] == 10 and r.gpm(1)["tensor"] == 0 and r.gpm(1)["dram"] == 40
    uuids = {s.tags["device.uuid"] for s in r.store.lookup("gpu_sm_active_percent")}
    assert uuids == {g.uuid for g in r.nv.gpus}


def test_each_mig_gpu_instance_has_its_own_series_beside_the_gpus():
    g = FakeGpu(0)
    a = g.add_gpu_instance(gi=1)
    b = g.add_gpu_instance(gi=5, compute_instances=2)  # two MIG devices, one GPU instance, one series set
    r = Rig([g]).start()
    r.run(g, sm=60)
    r.run(a, sm=90, tensor=80)
    r.run(b, sm=30, dram=15)
    r.poll()
    r.poll()
    assert r.gpm(0)["sm"] == 60
    assert r.gpm(0, gi=1)["sm"] == 90 and r.gpm(0, gi=1)["tensor"] == 80
    assert r.gpm(0, gi=5)["sm"] == 30 and r.gpm(0, gi=5)["dram"] == 15
    gis = sorted(s.tags.get(gpm.TAG, "-") for s in r.store.lookup("gpu_sm_active_percent"))
    assert gis == ["-", "1", "5"]
    # the instance's series keep the GPU's tags, so they join with the rest of the GPU
    (s,) = [s for s in r.store.lookup("gpu_sm_active_percent") if s.tags.get(gpm.TAG) == "5"]
    assert s.tags["device.uuid"] == g.uuid and s.tags["device.bus_id"] == g.bus_id
    migs = [args for name, args in r.nv.calls if name == "nvmlGpmMigSampleGet"]
    assert sorted({a[1] for a in migs}) == [1, 5] and len(migs) == 4
    assert label_of(gpm.TAG) == "GPU_I_ID"  # DCGM exporter's label on /metrics


def test_a_mig_gpu_without_a_gpu_wide_sample_keeps_its_instances(caplog):
    caplog.set_level(logging.DEBUG, logger="graphsignal")
    g = FakeGpu(0)
    g.add_gpu_instance(gi=2)
    r = Rig([g]).start()
    r.nv.fail("nvmlGpmSampleGet", NV.NVML_ERROR_NOT_SUPPORTED)
    r.run(g.mig_devices[0], sm=40)
    for _ in range(4):
        r.poll()
    assert r.gpm(0) == {}
    assert r.gpm(0, gi=2)["sm"] == 40
    (line,) = gpm_lines(caplog)
    assert "GPU 0" in line and "MIG" in line and "absent" in line
    assert r.nv.count("nvmlGpmSampleGet") == 1  # not asked again
    assert r.errors() == []


def test_values_are_rounded_and_never_above_100():
    r = Rig().start()
    r.run(sm=100)
    r.poll()
    r.poll(1.0 / 3)  # a window whose float arithmetic overshoots
    assert r.gpm()["sm"] == 100.0


def test_a_value_outside_0_100_is_null_and_said_once(caplog):
    r = Rig().start()
    r.run(sm=150, tensor=30)
    for _ in range(4):
        r.poll()
    assert r.gpm()["sm"] is None and r.gpm()["tensor"] == 30
    assert len([m for m in gpm_lines(caplog) if "outside 0-100" in m]) == 1


# -- not supported, refused -------------------------------------------------------------------
def test_a_gpu_without_gpm_says_so_once_and_has_no_gpm_series(caplog):
    caplog.set_level(logging.INFO, logger="graphsignal")
    g = FakeGpu(0)
    g.gpm_supported = False  # before Hopper
    g.values.update(name="NVIDIA A100-SXM4-80GB", architecture=7)
    r = Rig([g]).start()
    for _ in range(5):
        r.poll()
    assert r.gpm_names() == set()
    (line,) = gpm_lines(caplog)
    assert "not supported on GPU 0 (NVIDIA A100-SXM4-80GB)" in line and "absent" in line
    assert r.nv.count("nvmlGpmSampleAlloc") == 0 and r.nv.count("nvmlGpmSampleGet") == 0
    assert r.errors() == []  # a fact of the hardware, not a problem
    assert r.store.lookup("gpu_utilization_percent")


def test_a_refused_support_query_is_one_line_one_entry_and_no_series(caplog):
    r = Rig()
    r.nv.fail("nvmlGpmQueryDeviceSupport", NV.NVML_ERROR_NO_PERMISSION)
    r.start()
    r.run(**BUSY)
    for _ in range(5):
        r.poll()
    assert r.gpm_names() == set()
    (line,) = gpm_lines(caplog)
    assert "refused on GPU 0" in line and "no permission" in line and "absent" in line
    assert len(r.errors()) == 1 and "GPM refused" in r.errors()[0]["message"]
    assert r.nv.count("nvmlGpmQueryDeviceSupport") == 1 and r.nv.count("nvmlGpmSampleGet") == 0


def test_a_refused_sample_is_one_line_and_no_series(caplog):
    r = Rig()
    r.nv.fail("nvmlGpmSampleGet", NV.NVML_ERROR_NO_PERMISSION)
    r.start()
    r.run(**BUSY)
    for _ in range(5):
        r.poll()
    assert r.gpm_names() == set()
    assert len(gpm_lines(caplog)) == 1 and len(r.errors()) == 1
    assert r.nv.count("nvmlGpmSampleGet") == 1  # refused for good: not asked again


def test_gpm_refused_mid_run_turns_its_series_null_not_zero(caplog):
    r = Rig().start()
    r.run(**BUSY)
    r.poll()
    r.poll()
    assert r.gpm()["tensor"] == 60
    r.nv.fail("nvmlGpmMetricsGet", NV.NVML_ERROR_NO_PERMISSION)
    r.poll()
    r.poll()
    # the last values would be stale and 0 would be a measurement: null says "not measured"
    assert set(r.gpm().values()) == {None} and len(r.gpm()) == len(SERIES)
    assert len(gpm_lines(caplog)) == 1
    assert r.nv.count("nvmlGpmMetricsGet") == 2


def test_a_metric_the_driver_does_not_answer_is_absent_the_rest_present(caplog):
    caplog.set_level(logging.INFO, logger="graphsignal")
    r = Rig()
    r.nv.gpus[0].gpm.unanswered = {NV.NVML_GPM_METRIC_FP64_UTIL}
    r.start()
    r.run(**BUSY)
    for _ in range(4):
        r.poll()
    got = r.gpm()
    assert "fp64" not in got and got["fp32"] == 12
    assert len([m for m in gpm_lines(caplog) if "NVML_GPM_METRIC_FP64_UTIL" in m]) == 1
    assert r.errors() == []


def test_an_nvidia_ml_py_without_gpm_is_one_line_and_no_series(caplog):
    caplog.set_level(logging.INFO, logger="graphsignal")
    r = Rig([FakeGpu(0), FakeGpu(1)])
    r.nv.remove("nvmlGpmMetricsGet")
    r.start()
    for _ in range(3):
        r.poll()
    assert r.gpm_names() == set()
    (line,) = gpm_lines(caplog)
    assert "nvidia-ml-py" in line and "nvmlGpmMetricsGet" in line
    assert r.errors() == [] and r.nv.gpm_live() == 0


# -- failures on the way -----------------------------------------------------------------------
def test_a_failed_metrics_read_is_null_once_and_the_next_window_has_values():
    r = Rig().start()
    r.run(**BUSY)
    r.poll()
    r.poll()
    r.nv.fail("nvmlGpmMetricsGet", NV.NVML_ERROR_UNKNOWN)
    r.poll()
    assert set(r.gpm().values()) == {None}
    r.nv.heal("nvmlGpmMetricsGet")
    r.run(sm=33)
    r.poll()
    assert r.gpm()["sm"] == 33  # the sample of the failed poll starts this window
    assert len(r.errors()) == 1 and "nvmlGpmMetricsGet" in r.errors()[0]["message"]


def test_a_failed_sample_starts_the_window_again():
    r = Rig().start()
    r.run(sm=50)
    r.poll()
    r.poll()
    r.nv.fail("nvmlGpmSampleGet", NV.NVML_ERROR_UNKNOWN)
    r.poll()
    assert r.gpm()["sm"] is None
    r.nv.heal("nvmlGpmSampleGet")
    r.run(sm=10)
    r.poll()  # the first sample after the gap: no window yet
    assert r.gpm()["sm"] is None
    r.poll()
    assert r.gpm()["sm"] == 10  # not the 3 s back to the last good sample


def test_a_poll_too_soon_after_the_last_takes_no_sample_and_keeps_the_values():
    r = Rig().start()
    r.run(sm=50)
    r.poll()
    r.poll()
    n = r.nv.count("nvmlGpmSampleGet")
    r.poll(0.05)  # nvml.h: samples under 100 ms apart are not apart
    assert r.nv.count("nvmlGpmSampleGet") == n and r.gpm()["sm"] == 50
    r.run(sm=90)
    r.poll(1.0)
    # the next window reaches back to the last sample taken: no time is lost
    assert r.gpm()["sm"] == pytest.approx((50 * 0.05 + 90 * 1.0) / 1.05, abs=0.005)  # rounded to 0.01
    assert r.errors() == []


def test_the_final_poll_at_shutdown_right_after_a_poll_is_harmless():
    r = Rig().start()
    r.run(sm=50)
    r.poll()
    r.poll()
    r.src.shutdown()  # polls once more at the same instant
    assert r.gpm()["sm"] == 50 and r.errors() == []


# -- sample buffers --------------------------------------------------------------------------------
def test_two_buffers_per_target_allocated_once_and_freed_at_shutdown():
    g = FakeGpu(0)
    g.add_gpu_instance(gi=1)
    r = Rig([g, FakeGpu(1)]).start()
    for _ in range(10):
        r.poll()
    # targets: GPU 0, its GPU instance 1, GPU 1
    assert r.nv.count("nvmlGpmSampleAlloc") == 6 and r.nv.gpm_live() == 6
    r.src.shutdown()
    assert r.nv.gpm_live() == 0 and r.nv.count("nvmlGpmSampleFree") == 6
    # freed while NVML was still up, before its shutdown
    names = [n for n, _ in r.nv.calls]
    assert max(i for i, n in enumerate(names) if n == "nvmlGpmSampleFree") < names.index("nvmlShutdown")
    assert r.errors() == []


def test_buffers_are_freed_after_a_gpu_was_lost():
    r = Rig([FakeGpu(0), FakeGpu(1)]).start()
    r.poll()
    r.poll()
    r.nv.gpus[1].lost = True
    r.poll()
    assert r.nv.gpm_live() == 4
    r.src.shutdown()
    assert r.nv.gpm_live() == 0 and r.nv.shutdown_count == 1


def test_the_samples_alternate_between_the_two_buffers():
    r = Rig().start()
    for _ in range(5):
        r.poll()
    bufs = [ctypes.cast(args[1], ctypes.c_void_p).value for name, args in r.nv.calls if name == "nvmlGpmSampleGet"]
    assert len(set(bufs)) == 2 and all(a != b for a, b in zip(bufs, bufs[1:]))


# -- the names and the fake ---------------------------------------------------------------------
def test_every_gpm_series_is_in_the_metric_table_with_its_dcgm_field():
    for name, _, _, dcgm in gpm.METRICS:
        m = BY_NAME[name]
        assert m.type == "gauge" and m.ucum == "%" and m.scale == 0.01 and m.prom.endswith("_ratio")
        assert dcgm in m.help and gpm.TAG in m.tags


def test_gpm_ids_and_versions_are_pynvmls():
    pynvml = pytest.importorskip("pynvml")
    for _, mid, header_name, _ in gpm.METRICS:
        assert getattr(pynvml, header_name) == mid, header_name
        assert getattr(FakeNvml, header_name) == mid, header_name
    assert pynvml.NVML_GPM_METRICS_GET_VERSION == gpm.METRICS_GET_VERSION == FakeNvml.NVML_GPM_METRICS_GET_VERSION
    assert pynvml.NVML_GPM_SUPPORT_VERSION == gpm.SUPPORT_VERSION == FakeNvml.NVML_GPM_SUPPORT_VERSION
    assert pynvml.NVML_DEVICE_MIG_ENABLE == gpm.MIG_ENABLE


def test_the_fakes_gpm_structs_are_laid_out_as_pynvmls():
    pynvml = pytest.importorskip("pynvml")
    for name in LAYOUTS:
        fake, real = getattr(FakeNvml, name), getattr(pynvml, name)
        assert ctypes.sizeof(fake) == ctypes.sizeof(real), name
        ff = [(f[0], getattr(fake, f[0]).offset, getattr(fake, f[0]).size) for f in fake._fields_]
        rf = [(f[0], getattr(real, f[0]).offset, getattr(real, f[0]).size) for f in real._fields_]
        assert ff == rf, name
    # nvml.h on x86-64: 4+4+8+3*8 bytes per metric; 4+4+8+8 + NVML_GPM_METRIC_MAX metrics
    assert ctypes.sizeof(FakeNvml.c_nvmlGpmMetric_t) == 40
    assert ctypes.sizeof(FakeNvml.c_nvmlGpmMetricsGet_t) == 24 + 40 * FakeNvml.NVML_GPM_METRIC_MAX
    assert FakeNvml.NVML_GPM_METRIC_MAX == pynvml.NVML_GPM_METRIC_MAX
