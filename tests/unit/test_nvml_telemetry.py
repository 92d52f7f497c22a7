"""NVML telemetry through a fake pynvml: every metric, null versus 0, the
one-door rules (lazy init, not supported, lost GPU, missing library), XID
events, counters since start, NVLink, and which GPUs are watched."""
import inspect
import logging
import sys

import pytest

from graphsignal import config
from graphsignal.sources import SourceThread, SourceUnavailable
from graphsignal.sources.gpu import GpuTelemetry, parse_visible, select_devices, Device
from graphsignal.sources.nvml import Nvml, NvmlBackend, NvmlUnavailable
from graphsignal.sidecar.store import COUNTER, GAUGE, MetricStore
from support.fakes.fake_nvml import CONSTANTS, FUNCTIONS, STRUCTS, FakeGpu, FakeNvml

H200_TAGS = {"device.uuid": "GPU-2c44f54a-9fd0-dfe6-9927-372066286000", "device.bus_id": "00000000:18:00.0",
             "device.index": "0"}


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class Rig:
    """A fake NVML, a store and the telemetry source over them."""

    def __init__(self, gpus=None, environ=None, slow_every=1, **kw):
        self.nv = FakeNvml(gpus if gpus is not None else [FakeGpu(0)], **kw)
        self.store = MetricStore()
        self.nvml = Nvml(module=self.nv, on_error=lambda m: self.store.add_error("warning", m))
        self.clock = Clock()
        # slow_every=1: every field on every poll, so each test sees each read
        s = config.from_environ(environ or {})
        self.src = GpuTelemetry(self.store, [NvmlBackend(self.nvml, slow_every=slow_every)], dict(s.visible_devices),
                                all_gpus=s.all_gpus, clock=self.clock)

    def start(self):
        self.src.setup()
        return self

    def poll(self, seconds=1.0):
        self.clock.t += seconds
        self.src.poll()

    def series(self, name, type_=None, **tags):
        found = self.store.lookup(name, type_, tags)
        assert len(found) == 1, (name, tags, [s.tags for s in found])
        return found[0]

    def gauge(self, name, gpu=0, **tags):
        tags["device.index"] = str(gpu)
        return self.series(name, GAUGE, **tags).value

    def counter(self, name, gpu=0, **tags):
        tags["device.index"] = str(gpu)
        return self.series(name, COUNTER, **tags).total

    def names(self):
        return {s.name for s in self.store.series.values()}

    def errors(self):
        return list(self.store.errors)


@pytest.fixture
def rig():
    return Rig().start()


# -- every metric -------------------------------------------------------------------------
def test_a_healthy_h200_reports_every_reference_metric_with_its_value(rig):
    rig.poll()
    g = rig.gauge
    assert g("gpu_memory_total_bytes") == 150754820096
    assert g("gpu_memory_free_bytes") == 149427453952
    assert g("gpu_memory_used_bytes") == 150754820096 - 149427453952  # used + free = total, as the reference
    assert g("gpu_memory_reserved_bytes") == 566231040
    assert g("gpu_power_usage_watts") == pytest.approx(122.16)
    assert g("gpu_power_management_limit_watts") == 700.0
    assert g("gpu_temperature_celsius") == 39
    assert g("gpu_memory_temperature_celsius") == 45
    assert g("gpu_fan_speed_percent") == 30
    assert g("gpu_clock_sm_megahertz") == 1980
    assert g("gpu_clock_mem_megahertz") == 3201
    assert g("gpu_max_clock_sm_megahertz") == 1980
    assert g("gpu_max_clock_mem_megahertz") == 3201
    assert g("gpu_clocks_throttle_reasons") == 1
    assert g("gpu_performance_state") == 0
    assert g("gpu_pcie_link_generation") == 5
    assert g("gpu_pcie_link_width") == 16
    assert g("gpu_pcie_throughput_tx_kilobytes_per_second") == 596
    assert g("gpu_pcie_throughput_rx_kilobytes_per_second") == 445
    assert g("gpu_utilization_percent") == 7.0  # no samples yet: the instantaneous reading
    assert g("gpu_memory_busy_percent") == 3.0
    assert rig.counter("gpu_pcie_replay_counter") == 0  # since start
    assert rig.counter("gpu_ecc_errors", kind="corrected") == 0
    assert rig.counter("gpu_ecc_errors", kind="uncorrected") == 0
    assert rig.counter("gpu_energy_consumed_joules") == 0
    assert rig.counter("gpu_xid_errors") == 0


def test_gpu_series_carry_uuid_bus_id_and_index_tags(rig):
    rig.poll()
    s = rig.series("gpu_utilization_percent")
    assert s.tags == H200_TAGS
    assert {tuple(sorted(x.tags)) for x in rig.store.series.values() if x.name.startswith("gpu_")} >= {
        tuple(sorted(H200_TAGS))}
    for x in rig.store.series.values():
        for k, v in H200_TAGS.items():
            assert x.tags[k] == v


def test_the_device_resource_names_model_architecture_memory_and_driver(rig):
    rig.poll()
    (res,) = [r for r in rig.store.resources.values() if r["kind"] == "device"]
    assert res["tags"] == H200_TAGS
    assert res["attributes"] == {
        "device.name": "NVIDIA H200", "architecture": "Hopper", "compute_capability": "9.0",
        "mem_total": "150754820096", "driver_version": "580.65.06", "cuda_driver_version": "13.0",
        "vendor": "nvidia", "cuda_index": "0", "pcie_max_link_generation": "5", "pcie_max_link_width": "16",
    }


def test_throttle_reasons_give_the_bitmask_and_one_gauge_per_decoded_reason():
    r = Rig()
    r.nv.gpus[0].values["reasons"] = 0x4 | 0x40  # software power cap + hardware thermal slowdown
    r.start().poll()
    assert r.gauge("gpu_clocks_throttle_reasons") == 0x44
    assert r.gauge("gpu_clocks_throttle_reason_active", reason="sw_power_cap") == 1
    assert r.gauge("gpu_clocks_throttle_reason_active", reason="hw_thermal_slowdown") == 1
    assert r.gauge("gpu_clocks_throttle_reason_active", reason="gpu_idle") == 0
    reasons = {s.tags["reason"] for s in r.store.lookup("gpu_clocks_throttle_reason_active")}
    assert reasons == {"gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
                       "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                       "display_clock_setting"}


def test_only_the_reasons_a_gpu_supports_are_decoded():
    r = Rig()
    r.nv.gpus[0].values["supported_reasons"] = 0x1 | 0x4
    r.start().poll()
    assert {s.tags["reason"] for s in r.store.lookup("gpu_clocks_throttle_reason_active")} == {
        "gpu_idle", "sw_power_cap"}


def test_an_unknown_performance_state_is_null():
    r = Rig()
    r.nv.gpus[0].values["pstate"] = 32  # NVML_PSTATE_UNKNOWN
    r.start().poll()
    assert r.gauge("gpu_performance_state") is None


# -- utilization from samples --------------------------------------------------------------
def test_utilization_averages_the_samples_since_the_last_read():
    r = Rig()
    g = r.nv.gpus[0]
    # the driver's buffer holds old samples: only the last second counts on the first read
    g.add_samples(1, 1_000_000, [0] * 30)
    g.add_samples(1, 10_000_000, [90, 100, 80, 90, 100, 80])
    g.add_samples(2, 10_000_000, [40, 60])
    r.start().poll()
    assert r.gauge("gpu_utilization_percent") == 90.0
    assert r.gauge("gpu_memory_busy_percent") == 50.0
    last = max(t for t, _ in g.samples[1])
    g.add_samples(1, last + 1, [10, 20])
    g.add_samples(2, 20_000_000, [5])
    r.poll()
    assert r.gauge("gpu_utilization_percent") == 15.0
    assert r.gauge("gpu_memory_busy_percent") == 5.0
    stamps = [args[2] for name, args in r.nv.calls if name == "nvmlDeviceGetSamples" and args[1] == 1]
    assert stamps == [0, last]  # each read asks only for what is newer than the last one seen
    assert r.nv.count("nvmlDeviceGetUtilizationRates") == 0


def test_utilization_reads_the_instant_value_when_no_sample_arrived():
    r = Rig()
    g = r.nv.gpus[0]
    g.add_samples(1, 10_000_000, [100, 100])
    g.add_samples(2, 10_000_000, [60])
    r.start().poll()
    assert r.gauge("gpu_utilization_percent") == 100.0
    g.values["util_gpu"], g.values["util_mem"] = 0, 0  # idle: the sample buffer runs dry
    r.poll()
    assert r.gauge("gpu_utilization_percent") == 0.0  # measured zero, not null
    assert r.gauge("gpu_memory_busy_percent") == 0.0
    assert r.nv.count("nvmlDeviceGetUtilizationRates") == 1  # one instant read serves both


def test_utilization_falls_back_to_rates_for_good_when_samples_are_not_supported():
    r = Rig()
    r.nv.fail("nvmlDeviceGetSamples", FakeNvml.NVML_ERROR_NOT_SUPPORTED)
    r.start()
    for _ in range(3):
        r.poll()
    assert r.gauge("gpu_utilization_percent") == 7.0
    assert r.nv.count("nvmlDeviceGetSamples") == 2  # once per sample kind, never again
    assert r.nv.count("nvmlDeviceGetUtilizationRates") == 3


def test_utilization_out_of_range_samples_are_not_reported():
    r = Rig()
    r.nv.gpus[0].add_samples(1, 10_000_000, [5000, 7000])
    r.start().poll()
    assert r.gauge("gpu_utilization_percent") == 7.0


# -- null versus zero, the one door ---------------------------------------------------------
def test_not_supported_is_null_asked_once_and_logged_once(caplog):
    r = Rig()
    r.nv.fail("nvmlDeviceGetFanSpeed", FakeNvml.NVML_ERROR_NOT_SUPPORTED)  # a passively cooled H200
    r.start()
    with caplog.at_level(logging.DEBUG, logger="graphsignal"):
        for _ in range(3):
            r.poll()
    assert r.gauge("gpu_fan_speed_percent") is None
    assert r.nv.count("nvmlDeviceGetFanSpeed") == 1
    assert len([m for m in caplog.messages if "nvmlDeviceGetFanSpeed" in m]) == 1
    assert r.errors() == []  # not supported is not an error


def test_measured_zero_stays_zero():
    r = Rig()
    v = r.nv.gpus[0].values
    v.update(pcie_tx_kbs=0, pcie_rx_kbs=0, util_gpu=0, fan=0, reasons=0)
    r.start().poll()
    assert r.gauge("gpu_pcie_throughput_tx_kilobytes_per_second") == 0
    assert r.gauge("gpu_pcie_throughput_rx_kilobytes_per_second") == 0
    assert r.gauge("gpu_utilization_percent") == 0
    assert r.gauge("gpu_fan_speed_percent") == 0
    assert r.gauge("gpu_clocks_throttle_reasons") == 0
    assert r.gauge("gpu_clocks_throttle_reason_active", reason="gpu_idle") == 0


def test_every_field_not_supported_gives_nulls_and_no_errors():
    r = Rig()
    for fn in FUNCTIONS:
        if fn.startswith("nvmlDeviceGet") and fn not in ("nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
                                                         "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo"):
            r.nv.fail(fn, FakeNvml.NVML_ERROR_NOT_SUPPORTED)
    r.start().poll()
    r.poll()
    gauges = [s for s in r.store.series.values() if s.type == GAUGE]
    assert gauges and all(s.value is None for s in gauges)
    counters = [s for s in r.store.series.values() if s.type == COUNTER]
    assert counters and all(s.total is None for s in counters)
    assert r.errors() == []


def test_an_unexpected_failure_is_null_reported_once_and_retried(caplog):
    r = Rig()
    r.nv.fail("nvmlDeviceGetTemperature", FakeNvml.NVML_ERROR_UNKNOWN)
    r.start()
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        r.poll()
        r.poll()
    assert r.gauge("gpu_temperature_celsius") is None
    assert len([m for m in caplog.messages if "nvmlDeviceGetTemperature" in m]) == 1
    (err,) = r.errors()
    assert "nvmlDeviceGetTemperature" in err["message"] and "GPU 0" in err["message"]
    r.nv.heal("nvmlDeviceGetTemperature")
    r.poll()
    assert r.gauge("gpu_temperature_celsius") == 39  # a transient failure is asked again


def test_a_function_missing_from_nvidia_ml_py_is_null():
    r = Rig()
    r.nv.remove("nvmlDeviceGetTotalEnergyConsumption")
    r.start().poll()
    assert r.counter("gpu_energy_consumed_joules") is None


def test_memory_falls_back_to_v1_without_reserved():
    r = Rig()
    r.nv.gpus[0].values["mem_free"] = 100
    real = r.nv.nvmlDeviceGetMemoryInfo

    def v1_only(handle, version=None):
        if version:
            raise r.nv.NVMLError(FakeNvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return real(handle)

    r.nv.nvmlDeviceGetMemoryInfo = v1_only
    r.start().poll()
    r.poll()
    assert r.gauge("gpu_memory_used_bytes") == 150754820096 - 100
    assert r.gauge("gpu_memory_reserved_bytes") is None


def test_nvml_is_initialized_lazily_and_shut_down_once():
    r = Rig()
    assert r.nv.init_count == 0  # constructing the source touches nothing
    r.start()
    assert r.nv.init_count == 1
    r.poll()
    r.src.shutdown()
    assert r.nv.shutdown_count == 1
    assert all(es.freed for es in r.nv.event_sets)
    calls = len(r.nv.calls)
    r.src.poll()  # the sidecar's final poll after shutdown does nothing
    r.src.shutdown()
    assert len(r.nv.calls) == calls and r.nv.shutdown_count == 1


def test_shutdown_takes_a_last_reading_first():
    r = Rig().start()
    r.poll()
    r.nv.gpus[0].values["temperature"] = 77
    r.src.shutdown()
    assert r.gauge("gpu_temperature_celsius") == 77


def test_nvml_reinitializes_when_shut_down_under_it():
    r = Rig().start()
    r.nv.initialized = False  # someone else's nvmlShutdown
    r.poll()
    assert r.gauge("gpu_temperature_celsius") == 39
    assert r.nv.init_count == 2


# -- missing library or driver --------------------------------------------------------------
@pytest.mark.parametrize("code,line", [
    (FakeNvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver here (libnvidia-ml.so.1 not found)"),
    (FakeNvml.NVML_ERROR_DRIVER_NOT_LOADED, "the NVIDIA driver is not loaded"),
    (FakeNvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVIDIA driver and library versions differ"),
    (FakeNvml.NVML_ERROR_UNKNOWN, "NVML init failed: Unknown Error"),
])
def test_a_missing_driver_is_one_clear_line(code, line):
    r = Rig(init_error=code)
    with pytest.raises(SourceUnavailable) as e:
        r.src.setup()
    assert line in str(e.value) and "no NVIDIA GPU telemetry" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_missing_driver_under_the_source_thread_is_one_entry_and_no_metrics(caplog):
    # no driver at all (a CPU host): an info entry and an info line, not a warning on every run
    r = Rig(init_error=FakeNvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    t = SourceThread(r.src, r.store)
    with caplog.at_level(logging.INFO, logger="graphsignal"):
        t.start()
        t.join(5)
        t.stop(final_poll=True)
    assert not t.is_alive() and t.available is False
    assert len(r.errors()) == 1 and "libnvidia-ml.so.1 not found" in r.errors()[0]["message"]
    assert r.errors()[0]["level"] == "info"
    said = [rec for rec in caplog.records if "libnvidia-ml" in rec.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    assert not [n for n in r.names() if n.startswith("gpu_")]
    assert r.nv.init_count == 1


def test_without_nvidia_ml_py_the_line_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    nvml = Nvml()
    with pytest.raises(NvmlUnavailable) as e:
        NvmlBackend(nvml).open()
    assert "nvidia-ml-py" in str(e.value)


def test_no_gpus_on_the_host_is_one_line():
    r = Rig(gpus=[])
    with pytest.raises(SourceUnavailable) as e:
        r.src.setup()
    assert "nvidia found no GPU" in str(e.value)


# -- lost GPUs ------------------------------------------------------------------------------
def test_a_lost_gpu_gives_one_error_nulls_and_is_not_polled_again():
    r = Rig(gpus=[FakeGpu(0), FakeGpu(1)]).start()
    r.poll()
    r.nv.gpus[0].lost = True
    r.poll()
    r.poll()
    errs = r.errors()
    assert len(errs) == 1 and errs[0]["level"] == "error"
    assert "GPU 0 (GPU-2c44f54a-9fd0-dfe6-9927-372066286000) is lost" in errs[0]["message"]
    assert errs[0]["tags"] == H200_TAGS
    assert r.gauge("gpu_temperature_celsius") is None  # no longer measured
    assert r.counter("gpu_pcie_replay_counter") == 0  # counters keep their totals
    assert r.gauge("gpu_temperature_celsius", gpu=1) == 39  # the other GPU goes on
    calls = r.nv.count("nvmlDeviceGetTemperature", gpu=0)
    r.poll()
    assert r.nv.count("nvmlDeviceGetTemperature", gpu=0) == calls
    (res,) = [x for x in r.store.resources.values() if x["tags"]["device.index"] == "0"]
    assert res["attributes"]["status"] == "lost"


def test_a_gpu_lost_before_start_is_reported_and_skipped():
    r = Rig(gpus=[FakeGpu(0), FakeGpu(1)])
    r.nv.gpus[1].lost = True
    r.start().poll()
    (err,) = r.errors()
    assert "GPU 1" in err["message"] and "lost" in err["message"]
    assert r.gauge("gpu_temperature_celsius", gpu=0) == 39
    assert not r.store.lookup("gpu_temperature_celsius", GAUGE, {"device.index": "1"})


def test_a_gpu_lost_while_waiting_for_events_is_lost():
    r = Rig().start()
    r.nv.fail("nvmlEventSetWait", FakeNvml.NVML_ERROR_GPU_IS_LOST)
    r.poll()
    assert len(r.errors()) == 1 and "is lost" in r.errors()[0]["message"]


# -- XID events -----------------------------------------------------------------------------
def test_an_xid_is_an_error_entry_with_its_code_and_device_and_counts():
    r = Rig().start()
    r.poll()
    assert r.counter("gpu_xid_errors") == 0
    r.nv.gpus[0].pending += [79, 31]
    r.poll()
    assert r.counter("gpu_xid_errors") == 2
    e79, e31 = r.errors()
    assert e79["level"] == "error" and e79["message"].startswith("XID 79 on GPU 0 (GPU-2c44f54a")
    assert "fallen off the bus" in e79["message"]
    assert e79["tags"] == dict(H200_TAGS, xid="79")
    assert e31["tags"]["xid"] == "31"
    r.poll()
    assert r.counter("gpu_xid_errors") == 2


def test_xid_events_are_waited_for_without_blocking():
    r = Rig().start()
    r.poll()
    waits = [args for name, args in r.nv.calls if name == "nvmlEventSetWait"]
    assert waits and all(a[1] == 0 for a in waits)
    assert r.nv.count("nvmlDeviceRegisterEvents") == 1


def test_without_xid_events_the_counter_is_null():
    r = Rig(gpus=[FakeGpu(0, events=False)]).start()
    r.poll()
    assert r.counter("gpu_xid_errors") is None
    assert r.nv.count("nvmlEventSetWait") == 0


# -- counters since start ------------------------------------------------------------------
def test_counters_count_from_the_profilers_start():
    r = Rig().start()
    v = r.nv.gpus[0].values
    r.poll()
    v.update(pcie_replay=5, ecc_corrected=3, energy_mj=5000000 + 250000)
    r.poll()
    assert r.counter("gpu_pcie_replay_counter") == 3
    assert r.counter("gpu_ecc_errors", kind="corrected") == 3
    assert r.counter("gpu_energy_consumed_joules") == pytest.approx(250.0)
    v["pcie_replay"] = 1  # the driver's counter restarted
    r.poll()
    assert r.counter("gpu_pcie_replay_counter") == 4


def test_slow_fields_are_read_every_fifth_poll_and_keep_their_value_between():
    r = Rig(slow_every=5).start()
    v = r.nv.gpus[0].values
    r.poll()  # poll 0 reads everything
    v.update(pcie_replay=9)
    for _ in range(4):
        r.poll()
        assert r.counter("gpu_pcie_replay_counter") == 0  # not read on polls 1-4
        assert r.gauge("gpu_pcie_link_width") is not None  # the last value stays
    r.poll()  # poll 5
    assert r.counter("gpu_pcie_replay_counter") == 7


def test_a_failed_counter_read_keeps_its_total():
    r = Rig().start()
    r.poll()
    r.nv.gpus[0].values["pcie_replay"] = 4
    r.poll()
    r.nv.fail("nvmlDeviceGetPcieReplayCounter", FakeNvml.NVML_ERROR_UNKNOWN)
    r.poll()
    assert r.counter("gpu_pcie_replay_counter") == 2


# -- NVLink ---------------------------------------------------------------------------------
def test_nvlink_links_throughput_and_errors():
    r = Rig(gpus=[FakeGpu(0, nvlinks=4)])
    g = r.nv.gpus[0]
    g.fields[(165, 3)] = 0  # one link down
    r.start().poll()
    assert r.gauge("gpu_nvlink_active_links") == 3
    assert r.counter("gpu_nvlink_tx_bytes") == 0
    assert r.gauge("gpu_nvlink_throughput_tx_kilobytes_per_second") is None  # no interval yet
    for link in range(4):
        g.fields[(138, link)] += 2048  # KiB
        g.fields[(139, link)] += 1024
    g.fields[(45, 0)] = 7  # CRC data errors
    r.poll(seconds=2.0)
    assert r.counter("gpu_nvlink_tx_bytes") == 4 * 2048 * 1024
    assert r.counter("gpu_nvlink_rx_bytes") == 4 * 1024 * 1024
    assert r.gauge("gpu_nvlink_throughput_tx_kilobytes_per_second") == 4096.0
    assert r.gauge("gpu_nvlink_throughput_rx_kilobytes_per_second") == 2048.0
    assert r.counter("gpu_nvlink_errors", kind="crc_data") == 7
    assert r.counter("gpu_nvlink_errors", kind="replay") == 0
    (res,) = [x for x in r.store.resources.values() if x["kind"] == "device"]
    assert res["attributes"]["nvlink_links"] == "4"


def test_nvlink_rates_span_the_polls_between_slow_reads():
    r = Rig(gpus=[FakeGpu(0, nvlinks=1)], slow_every=5)
    g = r.nv.gpus[0]
    r.start().poll()  # poll 0: a slow read
    g.fields[(138, 0)] += 5 * 1000  # KiB sent over the next five 1-second polls
    for _ in range(4):
        r.poll(seconds=1.0)
        assert r.counter("gpu_nvlink_tx_bytes") == 0  # not read in between
    r.poll(seconds=1.0)  # poll 5
    assert r.counter("gpu_nvlink_tx_bytes") == 5 * 1000 * 1024
    assert r.gauge("gpu_nvlink_throughput_tx_kilobytes_per_second") == 1000.0  # 5000 KiB over 5 s, not 1 s


def test_nvlink_state_falls_back_to_per_link_calls():
    r = Rig(gpus=[FakeGpu(0, nvlinks=2)])
    real = r.nv.nvmlDeviceGetFieldValues

    def without_state_field(handle, ids):
        out = real(handle, ids)
        for fv in out:
            if fv.fieldId == 165:
                fv.nvmlReturn = FakeNvml.NVML_ERROR_NOT_SUPPORTED
        return out

    r.nv.nvmlDeviceGetFieldValues = without_state_field
    r.start().poll()
    assert r.gauge("gpu_nvlink_active_links") == 2
    assert r.nv.count("nvmlDeviceGetNvLinkState") == 2


def test_a_gpu_without_nvlink_has_no_nvlink_series(rig):
    rig.poll()
    assert not [n for n in rig.names() if "nvlink" in n]


# -- scoping --------------------------------------------------------------------------------
def _devices(n=4):
    return [Device(i, "GPU-dev%d-1111-2222" % i, "0000:%02x:00.0" % i) for i in range(n)]


@pytest.mark.parametrize("value,expected", [
    (None, None), ("", []), (" ", []), ("0", [0]), ("1,0", [1, 0]), ("0, 2", [0, 2]), ("0,,1", [0]),
    ("-1", []), ("0,-1,1", [0]), ("GPU-abc,1", ["GPU-abc", 1]), ("MIG-xyz", ["MIG-xyz"]),
])
def test_parse_visible_reads_cuda_visible_devices_like_cuda(value, expected):
    assert parse_visible(value) == expected


@pytest.mark.parametrize("value,indices", [
    ("2", [2]), ("3,1", [3, 1]), ("0,7,1", [0]), ("1,1", [1]), ("GPU-dev2", [2]), ("gpu-DEV3", [3]),
    ("dev1", [1]), ("GPU-dev1-1111-2222", [1]), ("GPU-dev9", []), ("", []),
])
def test_select_devices_follows_the_visible_list(value, indices):
    picked = select_devices(_devices(), parse_visible(value))
    assert [d.index for d in picked] == indices
    assert [d.cuda_index for d in picked] == list(range(len(indices)))


def test_an_ambiguous_uuid_prefix_ends_the_list():
    devs = _devices()
    assert select_devices(devs, parse_visible("GPU-dev")) == []
    assert [d.index for d in select_devices(devs, parse_visible("2,GPU-dev"))] == [2]


def test_the_workloads_visible_gpus_are_watched_by_default():
    r = Rig(gpus=[FakeGpu(0), FakeGpu(1), FakeGpu(2)], environ={"CUDA_VISIBLE_DEVICES": "2,0"}).start()
    r.poll()
    assert [d.index for d in r.src.devices()] == [2, 0]
    assert {s.tags["device.index"] for s in r.store.lookup("gpu_utilization_percent")} == {"2", "0"}
    res = {x["tags"]["device.index"]: x["attributes"]["cuda_index"] for x in r.store.resources.values()}
    assert res == {"2": "0", "0": "1"}
    assert r.nv.count("nvmlDeviceGetTemperature", gpu=1) == 0


def test_gpus_named_by_uuid_are_watched():
    gpus = [FakeGpu(0), FakeGpu(1)]
    r = Rig(gpus=gpus, environ={"CUDA_VISIBLE_DEVICES": gpus[1].uuid}).start()
    assert [d.index for d in r.src.devices()] == [1]


def test_a_mig_instance_watches_its_gpu():
    gpus = [FakeGpu(0), FakeGpu(1)]
    gpus[1].mig_uuids = ["MIG-aaaa-bbbb", "MIG-cccc-dddd"]
    r = Rig(gpus=gpus, environ={"CUDA_VISIBLE_DEVICES": "MIG-aaaa-bbbb,MIG-cccc-dddd"}).start()
    assert [d.index for d in r.src.devices()] == [1]


def test_an_empty_visible_list_watches_nothing_and_says_how_to_watch_all():
    r = Rig(gpus=[FakeGpu(0), FakeGpu(1)], environ={"CUDA_VISIBLE_DEVICES": ""})
    with pytest.raises(SourceUnavailable) as e:
        r.src.setup()
    assert "no nvidia GPU is visible to the workload (CUDA_VISIBLE_DEVICES='')" in str(e.value)
    assert "GRAPHSIGNAL_ALL_GPUS=1" in str(e.value)
    assert r.nv.shutdown_count == 1


def test_graphsignal_all_gpus_watches_every_gpu():
    r = Rig(gpus=[FakeGpu(0), FakeGpu(1)],
            environ={"CUDA_VISIBLE_DEVICES": "", "GRAPHSIGNAL_ALL_GPUS": "1"}).start()
    r.poll()
    assert [d.index for d in r.src.devices()] == [0, 1]
    uuids = {s.tags["device.uuid"] for s in r.store.lookup("gpu_temperature_celsius")}
    assert len(uuids) == 2


# -- wiring ---------------------------------------------------------------------------------
def _Sup(environ):
    from graphsignal.sources import SourceContext

    return SourceContext(store=MetricStore(), settings=config.from_environ(environ))


def test_the_registry_gets_one_gpu_source(monkeypatch):
    from graphsignal.sources import amdsmi, registry

    monkeypatch.setattr(amdsmi, "load_module", lambda: None)
    names = [s.name for s in registry.make_sources(_Sup({}))]
    assert names.count("gpu") == 1
    (gpu,) = [s for s in registry.make_sources(_Sup({})) if s.name == "gpu"]
    assert [b.vendor for b in gpu.backends] == ["nvidia"]


def test_source_thread_runs_the_telemetry_and_stops_cleanly():
    r = Rig()
    t = SourceThread(r.src, r.store)
    t.start()
    deadline = 50
    while deadline and not r.store.lookup("gpu_temperature_celsius"):
        t.join(0.05)
        deadline -= 1
    t.stop(final_poll=True)
    assert t.available and not t.is_alive()
    assert r.store.lookup("gpu_temperature_celsius")[0].value == 39
    assert r.nv.shutdown_count == 1 and r.errors() == []


# -- the fake is pynvml --------------------------------------------------------------------
def test_the_fake_has_pynvmls_names_signatures_constants_and_structs():
    pynvml = pytest.importorskip("pynvml")
    fake = FakeNvml([])
    for fn in FUNCTIONS:
        real = getattr(pynvml, fn, None)
        assert real is not None, fn
        rp = [p for p in inspect.signature(real).parameters.values()]
        fp = [p for p in inspect.signature(getattr(fake, fn)).parameters.values()]
        assert [p.default is p.empty for p in fp] == [p.default is p.empty for p in rp], fn
    for name in CONSTANTS:
        assert getattr(pynvml, name) == getattr(FakeNvml, name), name
    for struct, members in STRUCTS.items():
        fields = {f[0] for f in getattr(pynvml, struct)._fields_}
        assert set(members) <= fields, struct
    assert issubclass(pynvml.NVMLError_NotSupported, pynvml.NVMLError)
    assert pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED).value == FakeNvml.NVML_ERROR_NOT_SUPPORTED


def test_the_backend_calls_only_functions_that_pynvml_has():
    pynvml = pytest.importorskip("pynvml")
    r = Rig(gpus=[FakeGpu(0, nvlinks=2), FakeGpu(1)], environ={"CUDA_VISIBLE_DEVICES": "MIG-x,0"})
    r.nv.gpus[0].mig_uuids = ["MIG-x"]
    r.start()
    r.nv.gpus[0].pending.append(13)
    r.poll()
    r.src.shutdown()
    called = {name for name, _ in r.nv.calls}
    assert called and all(hasattr(pynvml, n) for n in called)


def test_shutdown_after_a_gpu_was_lost_still_releases_nvml():
    r = Rig(gpus=[FakeGpu(0), FakeGpu(1)]).start()
    r.poll()
    r.nv.gpus[1].lost = True
    r.src.shutdown()
    assert r.nv.shutdown_count == 1
    assert [e["tags"]["device.index"] for e in r.errors()] == ["1"]
