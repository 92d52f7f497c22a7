"""AMD SMI telemetry through a fake amdsmi: the same metric names and tags
as NVML, null for what AMD SMI cannot say, the one-door rules, scoping by
the ROCm/HIP visible-device lists, and nothing at all without amdsmi."""
import logging
import sys

import pytest

from graphsignal import config
from graphsignal.sources import SourceContext, SourceUnavailable, amdsmi as amd
from graphsignal.sources.gpu import GpuTelemetry
from graphsignal.sources.registry import gpu_source as make_source
from graphsignal.sources.nvml import Nvml, NvmlBackend
from graphsignal.sidecar.store import COUNTER, GAUGE, MetricStore
from support.fakes.fake_amdsmi import FUNCTIONS, FakeAmdGpu, FakeAmdSmi, amdsmi_wrapper
from support.fakes.fake_nvml import FakeGpu, FakeNvml

NOT_SUPPORTED = amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED
MI300X_TAGS = {"device.uuid": "1fff74a1-0000-1000-8000-c5d3c7cbe8a1", "device.bus_id": "0000:0c:00.0",
               "device.index": "0"}


class Rig:
    def __init__(self, gpus=None, environ=None, init_error=None):
        self.smi = FakeAmdSmi(gpus if gpus is not None else [FakeAmdGpu(0)], init_error=init_error)
        self.store = MetricStore()
        door = amd.AmdSmi(self.smi, on_error=lambda m: self.store.add_error("warning", m))
        s = config.from_environ(environ or {})
        self.src = GpuTelemetry(self.store, [amd.AmdSmiBackend(door)], dict(s.visible_devices), all_gpus=s.all_gpus)

    def start(self):
        self.src.setup()
        return self

    def series(self, name, type_, gpu=0, **tags):
        tags["device.index"] = str(gpu)
        (s,) = self.store.lookup(name, type_, tags)
        return s

    def gauge(self, name, gpu=0, **tags):
        return self.series(name, GAUGE, gpu, **tags).value

    def counter(self, name, gpu=0, **tags):
        return self.series(name, COUNTER, gpu, **tags).total


@pytest.fixture
def rig():
    return Rig().start()


def test_an_mi300x_reports_under_the_nvml_metric_names(rig):
    rig.src.poll()
    g = rig.gauge
    assert g("gpu_utilization_percent") == 42.0
    assert g("gpu_memory_busy_percent") == 17.0
    assert g("gpu_memory_total_bytes") == 206141652992
    assert g("gpu_memory_used_bytes") == 294133760
    assert g("gpu_memory_free_bytes") == 206141652992 - 294133760
    assert g("gpu_power_usage_watts") == 134.0
    assert g("gpu_power_management_limit_watts") == 750.0
    assert g("gpu_temperature_celsius") == 41  # hotspot: MI300 has no edge sensor
    assert g("gpu_memory_temperature_celsius") == 35
    assert g("gpu_clock_sm_megahertz") == 132
    assert g("gpu_clock_mem_megahertz") == 900
    assert g("gpu_max_clock_sm_megahertz") == 2100
    assert g("gpu_max_clock_mem_megahertz") == 1300
    assert g("gpu_pcie_link_generation") == 5
    assert g("gpu_pcie_link_width") == 16
    assert rig.counter("gpu_pcie_replay_counter") == 0
    assert rig.counter("gpu_ecc_errors", kind="corrected") == 0
    assert rig.counter("gpu_ecc_errors", kind="uncorrected") == 0
    assert rig.counter("gpu_energy_consumed_joules") == 0
    assert rig.series("gpu_utilization_percent", GAUGE).tags == MI300X_TAGS


def test_what_amd_smi_cannot_say_is_null(rig):
    rig.src.poll()
    for name in ("gpu_fan_speed_percent", "gpu_memory_reserved_bytes", "gpu_clocks_throttle_reasons",
                 "gpu_performance_state", "gpu_pcie_throughput_tx_kilobytes_per_second",
                 "gpu_pcie_throughput_rx_kilobytes_per_second"):
        assert rig.gauge(name) is None, name
    assert rig.counter("gpu_xid_errors") is None  # AMD has no XIDs
    assert list(rig.store.errors) == []


def test_n_a_values_are_null_and_zero_is_zero():
    r = Rig()
    v = r.smi.gpus[0].values
    v["activity"] = {"gfx_activity": 0, "umc_activity": "N/A", "mm_activity": "N/A"}
    v["power"] = dict(v["power"], socket_power="N/A", current_socket_power="N/A", average_socket_power=88)
    r.start().src.poll()
    assert r.gauge("gpu_utilization_percent") == 0.0
    assert r.gauge("gpu_memory_busy_percent") is None
    assert r.gauge("gpu_power_usage_watts") == 88.0


def test_counters_count_from_start_and_energy_is_in_joules(rig):
    rig.src.poll()
    v = rig.smi.gpus[0].values
    v["energy"] = dict(v["energy"], energy_accumulator=1000000 + 65536)
    v["pcie"]["pcie_metric"]["pcie_replay_count"] = 5
    v["ecc"] = dict(v["ecc"], correctable_count=2)
    rig.src.poll()
    assert rig.counter("gpu_energy_consumed_joules") == pytest.approx(65536 * 15.259 / 1e6)
    assert rig.counter("gpu_pcie_replay_counter") == 2
    assert rig.counter("gpu_ecc_errors", kind="corrected") == 2


def test_not_supported_is_asked_once_and_not_an_error(caplog):
    r = Rig()
    r.smi.fail("amdsmi_get_gpu_activity", NOT_SUPPORTED)  # e.g. a VM guest
    r.start()
    with caplog.at_level(logging.DEBUG, logger="graphsignal"):
        for _ in range(3):
            r.src.poll()
    assert r.gauge("gpu_utilization_percent") is None
    assert r.smi.count("amdsmi_get_gpu_activity") == 1
    assert len([m for m in caplog.messages if "amdsmi_get_gpu_activity" in m]) == 1
    assert list(r.store.errors) == []


def test_an_unexpected_failure_is_null_and_reported_once():
    r = Rig()
    r.smi.fail("amdsmi_get_clock_info", amdsmi_wrapper.AMDSMI_STATUS_DRM_ERROR)
    r.start()
    r.src.poll()
    r.src.poll()
    assert r.gauge("gpu_clock_sm_megahertz") is None
    (err,) = r.store.errors
    assert "amdsmi_get_clock_info" in err["message"] and "\n" not in err["message"]


def test_init_failure_is_one_line():
    r = Rig(init_error=amdsmi_wrapper.AMDSMI_STATUS_INIT_ERROR)
    with pytest.raises(SourceUnavailable) as e:
        r.src.setup()
    assert str(e.value).startswith("AMD SMI init failed") and "\n" not in str(e.value)


def test_hip_visible_devices_scope_the_gpus():
    r = Rig(gpus=[FakeAmdGpu(0), FakeAmdGpu(1)], environ={"HIP_VISIBLE_DEVICES": "1"}).start()
    assert [d.index for d in r.src.devices()] == [1]
    r = Rig(gpus=[FakeAmdGpu(0), FakeAmdGpu(1)], environ={"ROCR_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "1"})
    assert [d.index for d in r.start().src.devices()] == [0]


def test_device_resource_names_the_amd_gpu(rig):
    rig.src.poll()
    (res,) = rig.store.resources.values()
    assert res["tags"] == MI300X_TAGS
    assert res["attributes"] == {"device.name": "AMD Instinct MI300X", "architecture": "gfx942",
                                 "driver_version": "6.10.5", "mem_total": "206141652992", "vendor": "amd",
                                 "cuda_index": "0"}


def test_shutdown_releases_amd_smi_once(rig):
    rig.src.poll()
    rig.src.shutdown()
    rig.src.poll()
    assert rig.smi.shutdown_count == 1


def test_nvidia_and_amd_gpus_in_one_source():
    nv = FakeNvml([FakeGpu(0)])
    smi = FakeAmdSmi([FakeAmdGpu(0, uuid="amd-uuid")])
    store = MetricStore()
    src = GpuTelemetry(store, [NvmlBackend(Nvml(module=nv)), amd.AmdSmiBackend(amd.AmdSmi(smi))], {})
    src.setup()
    src.poll()
    uuids = {s.tags["device.uuid"] for s in store.lookup("gpu_utilization_percent")}
    assert uuids == {nv.gpus[0].uuid, "amd-uuid"}


def test_without_nvidia_driver_an_amd_host_still_gets_telemetry():
    nv = FakeNvml([], init_error=FakeNvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    store = MetricStore()
    amd_backend = amd.AmdSmiBackend(amd.AmdSmi(FakeAmdSmi([FakeAmdGpu(0)])))
    src = GpuTelemetry(store, [NvmlBackend(Nvml(module=nv)), amd_backend], {})
    src.setup()
    src.poll()
    assert store.lookup("gpu_utilization_percent")[0].value == 42.0


# -- without amdsmi nothing happens -------------------------------------------------------
def _Sup():
    return SourceContext(store=MetricStore())


def test_without_amdsmi_installed_nothing_happens(monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # import amdsmi -> ImportError
    assert amd.load_module() is None
    sup = _Sup()
    src = make_source(sup)
    assert [b.vendor for b in src.backends] == ["nvidia"]


def test_amdsmi_without_its_library_is_skipped(monkeypatch):
    def boom(name):
        raise OSError("Could not load libamd_smi.so")

    monkeypatch.setattr(amd.importlib, "import_module", boom)
    assert amd.load_module() is None


def test_with_amdsmi_importable_the_backend_joins(monkeypatch):
    fake = FakeAmdSmi([FakeAmdGpu(0)])
    monkeypatch.setattr(amd, "load_module", lambda: fake)
    sup = _Sup()
    assert [b.vendor for b in make_source(sup).backends] == ["nvidia", "amd"]


def test_the_fake_matches_amdsmi_when_it_is_installed():
    try:
        import amdsmi
    except (ImportError, OSError):
        pytest.skip("amdsmi (and libamd_smi.so) not installed here")
    import inspect

    for fn in FUNCTIONS:
        real = getattr(amdsmi, fn)
        assert len(inspect.signature(real).parameters) == len(inspect.signature(getattr(FakeAmdSmi([]), fn))
                                                              .parameters), fn
