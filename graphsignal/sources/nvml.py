"""NVIDIA GPU telemetry through NVML (the `pynvml` module of nvidia-ml-py).

`NvmlBackend` reads a device through the one door every NVML call goes
through (graphsignal.sources.nvml_library.Nvml) into the shared metric
names of gpu.py, and the GPU's own activity counters (GPM) through gpm.py,
by the same door.
"""
import logging
import time
from typing import Any, Callable, List, Optional, Tuple, Union

from graphsignal.sources.gpm import Gpm
from graphsignal.sources.gpu import MAX_EVENTS_PER_POLL, Backend, Device, DeviceLost, Reading, Value
from graphsignal.sources.nvml_library import Nvml as Nvml
from graphsignal.sources.nvml_library import NvmlUnavailable as NvmlUnavailable
from graphsignal.sources.nvml_library import one_call_samples, sample_value, text_of
from graphsignal.sources.twins import BusyTime

logger = logging.getLogger("graphsignal")

XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError (nvml.h); pynvml's own name is preferred when present

# NVML clock event ("throttle") reason bits -> names an agent can act on.
REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)

# NVML_DEVICE_ARCH_* -> name
ARCHITECTURES = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere", 8: "Ada",
                 9: "Hopper", 10: "Blackwell", 13: "Rubin"}

# NVLink error totals (field id names in pynvml) -> `kind` tag
_NVLINK_ERROR_FIELDS = (
    ("NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "crc_flit"),
    ("NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "crc_data"),
    ("NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "replay"),
    ("NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "recovery"),
    ("NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL", "ecc_data"),
)

_NVLINK_UP = (1, 2)  # NVML_NVLINK_STATE_ACTIVE, _SLEEP (a low-power link is still up)


SLOW_EVERY = 5  # polls between reads of slow-changing, costly fields


class NvmlBackend(Backend):
    """NVIDIA GPUs through `nvml` (an Nvml door)."""

    vendor = "nvidia"
    visible_env = ("CUDA_VISIBLE_DEVICES",)

    def __init__(self, nvml: Nvml, interval: float = 1.0, slow_every: int = SLOW_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.nvml = nvml
        self.interval = interval
        self.slow_every = slow_every
        self.clock = clock  # monotonic seconds: busy time where the GPU has no samples
        self._event_sets: List[Tuple[Any, int]] = []
        # one_call_samples(nv) once NVML is up (False: not looked for yet)
        self._samples_fn: Union[bool, None, Callable[[Any, int, int], Any]] = False
        self.gpm = Gpm(nvml, clock)  # SM, tensor, DRAM activity (Hopper and newer)

    @property
    def _sampler(self) -> Optional[Callable[[Any, int, int], Any]]:
        if self._samples_fn is False:
            self._samples_fn = one_call_samples(self.nv)
        return self._samples_fn if callable(self._samples_fn) else None

    @property
    def nv(self) -> Any:
        return self.nvml.nv

    # -- discovery -----------------------------------------------------------
    def open(self) -> List[Device]:
        self.nvml.init()  # raises NvmlUnavailable with the one line
        call = self.nvml.call
        count = call("nvmlDeviceGetCount")
        if count is None:
            raise NvmlUnavailable("NVML could not count the GPUs; no NVIDIA GPU telemetry")
        driver = text_of(call("nvmlSystemGetDriverVersion"))
        cuda = call("nvmlSystemGetCudaDriverVersion")
        cuda = "%d.%d" % (cuda // 1000, (cuda % 1000) // 10) if cuda else None
        devices = []
        for i in range(count):
            try:
                h = call("nvmlDeviceGetHandleByIndex", i, device=i, variant=())
                if h is None:
                    continue  # not ours to read (e.g. another container's GPU): logged by the door
                uuid = text_of(call("nvmlDeviceGetUUID", h, device=i))
                pci = call("nvmlDeviceGetPciInfo", h, device=i)
                d = Device(i, uuid, text_of(pci.busId) if pci is not None else None, h)
            except DeviceLost as e:
                d = Device(i, None, None, None, lost=str(e))
            d.attributes["vendor"] = "nvidia"
            d.attributes.update({k: v for k, v in (("driver_version", driver), ("cuda_driver_version", cuda))
                                 if v is not None})
            devices.append(d)
        return devices

    def resolve(self, token: str) -> Optional[str]:
        """A MIG device UUID -> its parent GPU's UUID."""
        call, nv = self.nvml.call, self.nv
        try:
            mig = call("nvmlDeviceGetHandleByUUID", token, expect=(nv.NVML_ERROR_NOT_FOUND,
                                                                  nv.NVML_ERROR_INVALID_ARGUMENT))
        except nv.NVMLError:
            return None
        if mig is None:
            return None
        parent = call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig)
        return text_of(call("nvmlDeviceGetUUID", parent)) if parent is not None else None

    def prepare(self, d: Device) -> None:
        """Static attributes, maxima, NVLink layout and XID events."""
        call, nv, h, k = self.nvml.call, self.nv, d.handle, d.index
        name = text_of(call("nvmlDeviceGetName", h, device=k))
        arch = call("nvmlDeviceGetArchitecture", h, device=k)
        cc = call("nvmlDeviceGetCudaComputeCapability", h, device=k)
        mem = self._memory(d)
        st = d.state
        st["max_sm"] = call("nvmlDeviceGetMaxClockInfo", h, nv.NVML_CLOCK_SM, device=k)
        st["max_mem"] = call("nvmlDeviceGetMaxClockInfo", h, nv.NVML_CLOCK_MEM, device=k)
        st["reasons_fn"] = ("nvmlDeviceGetCurrentClocksEventReasons"
                            if hasattr(nv, "nvmlDeviceGetCurrentClocksEventReasons")
                            else "nvmlDeviceGetCurrentClocksThrottleReasons")
        supported_fn = ("nvmlDeviceGetSupportedClocksEventReasons"
                        if hasattr(nv, "nvmlDeviceGetSupportedClocksEventReasons")
                        else "nvmlDeviceGetSupportedClocksThrottleReasons")
        mask = call(supported_fn, h, device=k)
        st["reasons"] = [(bit, n) for bit, n in REASONS if mask is None or mask & bit]
        attrs = {
            "device.name": name,
            "architecture": ARCHITECTURES.get(arch) if arch is not None else None,
            "compute_capability": "%d.%d" % tuple(cc) if cc is not None else None,
            "mem_total": str(mem.total) if mem is not None else None,
            "pcie_max_link_generation": call("nvmlDeviceGetMaxPcieLinkGeneration", h, device=k),
            "pcie_max_link_width": call("nvmlDeviceGetMaxPcieLinkWidth", h, device=k),
        }
        self._prepare_fields(d)
        if st["nvlinks"]:
            attrs["nvlink_links"] = len(st["nvlinks"])
        # attributes are strings, as in the reference payload
        d.attributes.update({a: str(v) for a, v in attrs.items() if v is not None})
        self._prepare_events(d)
        self.gpm.prepare(d)  # last: its one line names the model

    def _prepare_fields(self, d: Device) -> None:
        """One nvmlDeviceGetFieldValues request per poll carries memory
        temperature and, with NVLink, each link's state and data counters
        plus the error totals (one driver round trip instead of ~60)."""
        nv, st = self.nv, d.state
        fields: List[Tuple[int, int]] = []  # (field id, scope id)
        # what each field is: ("mem_temp",), ("state", link), ("tx", link), ("rx", link), ("err", kind)
        slots: List[Tuple[Any, ...]] = []
        mem_temp = getattr(nv, "NVML_FI_DEV_MEMORY_TEMP", None)
        if mem_temp is not None:
            fields.append((mem_temp, 0))
            slots.append(("mem_temp",))
        links = []
        count_id = getattr(nv, "NVML_FI_DEV_NVLINK_LINK_COUNT", None)
        if count_id is not None:
            vals = self._fields(d, [(count_id, 0)], "link_count")
            n = vals[0] if vals else None
            links = list(range(int(n))) if n else []
        st["nvlinks"] = links
        state_id = getattr(nv, "NVML_FI_DEV_NVLINK_GET_STATE", None)
        tx_id = getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None)
        rx_id = getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None)
        for link in links:
            for fid, tag in ((state_id, "state"), (tx_id, "tx"), (rx_id, "rx")):
                if fid is not None:
                    fields.append((fid, link))
                    slots.append((tag, link))
        if links:
            for attr, kind in _NVLINK_ERROR_FIELDS:
                fid = getattr(nv, attr, None)
                if fid is not None:
                    fields.append((fid, 0))
                    slots.append(("err", kind))
        st["fields"], st["slots"] = fields, slots

    def _prepare_events(self, d: Device) -> None:
        call, nv, h, k = self.nvml.call, self.nv, d.handle, d.index
        xid = getattr(nv, "nvmlEventTypeXidCriticalError", XID_EVENT)
        d.state["event_set"] = None
        supported = call("nvmlDeviceGetSupportedEventTypes", h, device=k)
        if not supported or not supported & xid:
            return
        es = call("nvmlEventSetCreate", device=k)
        if es is None:
            return
        if call("nvmlDeviceRegisterEvents", h, xid, es, device=k, default=False) is False:
            call("nvmlEventSetFree", es, device=k)
            return
        d.state["event_set"] = es
        self._event_sets.append((es, k))

    # -- polling -------------------------------------------------------------
    def read(self, d: Device, r: Reading) -> None:
        """One poll of device `d` into reading `r` under gpu.py's names.
        NVML's milliwatts and millijoules become watts and joules; PCIe
        throughput stays in NVML's KB/s; NVLink KiB become bytes."""
        call, nv, h, k = self.nvml.call, self.nv, d.handle, d.index
        st = d.state
        # First, so that the time between two GPM samples is the time
        # between two polls, whatever the slow tier's reads below cost.
        self.gpm.read(d, r)
        # Fields that change slowly or cost the most CPU in the driver (energy,
        # PCIe throughput, link state, limits, ECC) are read every
        # SLOW_EVERY-th poll; between reads their series keep the last value.
        st["polls"] = st.get("polls", -1) + 1
        slow = st["polls"] % self.slow_every == 0
        rates: List[Any] = []  # nvmlDeviceGetUtilizationRates, read at most once per poll
        r.gauge("gpu_utilization_percent", self._utilization(d, "gpu", rates))
        # its cumulative twin, from the same samples (see _utilization)
        r.counter("gpu_busy_time_nanoseconds", st["busy"].ns if "busy" in st else None)
        if slow:
            # averaged over the samples since the last read, like utilization;
            # read on the slow tier because each sample read costs ~2.7 ms of
            # CPU in the driver (H200, driver 580)
            r.gauge("gpu_memory_busy_percent", self._utilization(d, "memory", rates))

        mem = self._memory(d)
        if mem is not None:
            r.gauge("gpu_memory_total_bytes", int(mem.total))
            r.gauge("gpu_memory_free_bytes", int(mem.free))
            r.gauge("gpu_memory_used_bytes", int(mem.total - mem.free))
            reserved = getattr(mem, "reserved", None)
            r.gauge("gpu_memory_reserved_bytes", int(reserved) if reserved is not None else None)
        else:
            for n in ("total", "free", "used", "reserved"):
                r.gauge("gpu_memory_%s_bytes" % n, None)

        r.gauge("gpu_power_usage_watts", _scale(call("nvmlDeviceGetPowerUsage", h, device=k), 1000.0))
        if slow:
            r.gauge("gpu_power_management_limit_watts",
                    _scale(call("nvmlDeviceGetPowerManagementLimit", h, device=k), 1000.0))
            r.counter("gpu_energy_consumed_joules",
                      _scale(call("nvmlDeviceGetTotalEnergyConsumption", h, device=k), 1000.0))
            r.gauge("gpu_fan_speed_percent", call("nvmlDeviceGetFanSpeed", h, device=k))
        r.gauge("gpu_temperature_celsius", call("nvmlDeviceGetTemperature", h, nv.NVML_TEMPERATURE_GPU, device=k))

        r.gauge("gpu_clock_sm_megahertz", call("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM, device=k))
        r.gauge("gpu_clock_mem_megahertz", call("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_MEM, device=k))
        r.gauge("gpu_max_clock_sm_megahertz", st.get("max_sm"))
        r.gauge("gpu_max_clock_mem_megahertz", st.get("max_mem"))

        mask = call(st["reasons_fn"], h, device=k)
        r.gauge("gpu_clocks_throttle_reasons", mask)
        for bit, reason in st["reasons"]:
            r.gauge("gpu_clocks_throttle_reason_active", None if mask is None else int(bool(mask & bit)),
                    {"reason": reason})

        pstate = call("nvmlDeviceGetPerformanceState", h, device=k)
        r.gauge("gpu_performance_state", pstate if pstate is not None and 0 <= pstate <= 15 else None)

        if slow:
            r.gauge("gpu_pcie_link_generation", call("nvmlDeviceGetCurrPcieLinkGeneration", h, device=k))
            r.gauge("gpu_pcie_link_width", call("nvmlDeviceGetCurrPcieLinkWidth", h, device=k))
            # each throughput read samples the link for ~20 ms inside the driver
            r.gauge("gpu_pcie_throughput_tx_kilobytes_per_second",
                    call("nvmlDeviceGetPcieThroughput", h, nv.NVML_PCIE_UTIL_TX_BYTES, device=k))
            r.gauge("gpu_pcie_throughput_rx_kilobytes_per_second",
                    call("nvmlDeviceGetPcieThroughput", h, nv.NVML_PCIE_UTIL_RX_BYTES, device=k))
            r.counter("gpu_pcie_replay_counter", call("nvmlDeviceGetPcieReplayCounter", h, device=k))
            for kind, etype in (("corrected", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                                ("uncorrected", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
                r.counter("gpu_ecc_errors", call("nvmlDeviceGetTotalEccErrors", h, etype, nv.NVML_VOLATILE_ECC,
                                                 device=k), {"kind": kind})

        if slow:
            # NVLink counters and errors: one batched read that cost ~17 ms of
            # CPU per GPU on an NVLink H200; rates span the two reads
            self._read_fields(d, r)

    def _utilization(self, d: Device, kind: str, rates: List[Any]) -> Optional[float]:
        """Percent, averaged over NVML's samples since the last read (the
        driver samples several times a second; one instantaneous read would
        alias). Falls back to nvmlDeviceGetUtilizationRates when samples are
        not supported, when none arrived (the buffer runs dry on an idle
        GPU) or when they make no sense."""
        call, nv, h, k = self.nvml.call, self.nv, d.handle, d.index
        stype = nv.NVML_GPU_UTILIZATION_SAMPLES if kind == "gpu" else nv.NVML_MEMORY_UTILIZATION_SAMPLES
        busy = d.state.setdefault("busy", BusyTime()) if kind == "gpu" else None
        last_key = "last_ts_" + kind
        last = d.state.get(last_key, 0)
        res = None
        sampler = self._sampler if self._sampler is not None else "nvmlDeviceGetSamples"
        try:
            res = call(sampler, h, stype, last, device=k, variant=stype, expect=(nv.NVML_ERROR_NOT_FOUND,))
        except nv.NVMLError:
            res = None  # NOT_FOUND: no sample since `last`
        if res:
            vtype, samples = res
            if samples:
                newest = max(s.timeStamp for s in samples)
                if not last:
                    # The first read returns the driver's whole buffer (many
                    # seconds): keep the last interval, like later reads.
                    floor = newest - int(self.interval * 1e6)
                    samples = [s for s in samples if s.timeStamp >= floor]
                d.state[last_key] = newest
                pairs = [(s.timeStamp, sample_value(vtype, s.sampleValue)) for s in samples]
                values = [v for _, v in pairs if v is not None]
                if values:
                    avg = sum(values) / float(len(values))
                    if 0 <= avg <= 100:
                        if busy is not None:
                            busy.samples([(t, v) for t, v in pairs if v is not None and 0 <= v <= 100],
                                         self.clock())
                        return float(round(avg, 1))
                    self.nvml.log_once(("samples-range", k), logging.WARNING,
                                       "NVML utilization samples out of range on GPU %s (%s); "
                                       "using instantaneous readings" % (k, avg))
        if not rates:
            rates.append(call("nvmlDeviceGetUtilizationRates", h, device=k))
        u = rates[0]
        value = None if u is None else float(u.gpu if kind == "gpu" else u.memory)
        if busy is not None:
            # no usable sample: the instant reading stands for the time since the last one
            busy.reading(value if value is not None and 0 <= value <= 100 else None, self.clock())
        return value

    def _memory(self, d: Device) -> Any:
        """nvmlMemory_v2 (with `reserved`) where the driver has it, else v1."""
        call, nv, h, k = self.nvml.call, self.nv, d.handle, d.index
        version = getattr(nv, "nvmlMemory_v2", None)
        if version is not None and not d.state.get("mem_v1"):
            m = call("nvmlDeviceGetMemoryInfo", h, version, device=k)
            if m is not None:
                return m
            d.state["mem_v1"] = True
        return call("nvmlDeviceGetMemoryInfo", h, device=k)

    def _fields(self, d: Device, fields: List[Tuple[int, int]], variant: str) -> List[Any]:
        """Values of (field id, scope id) pairs; None where not answered.
        `variant` names the request (the door remembers refusals per name)."""
        nv = self.nv
        vals = self.nvml.call("nvmlDeviceGetFieldValues", d.handle, fields, device=d.index, variant=variant)
        if vals is None:
            return [None] * len(fields)
        out = []
        for fv in vals:
            if fv.nvmlReturn == nv.NVML_SUCCESS:
                out.append(sample_value(fv.valueType, fv.value))
            elif fv.nvmlReturn == nv.NVML_ERROR_GPU_IS_LOST:
                raise DeviceLost("NVML nvmlDeviceGetFieldValues: GPU is lost")
            else:
                out.append(None)
        return out

    def _read_fields(self, d: Device, r: Reading) -> None:
        st = d.state
        fields, slots = st["fields"], st["slots"]
        vals = self._fields(d, fields, "poll") if fields else []
        mem_temp = None
        up, tx, rx, states = 0, None, None, 0
        errors = {}
        for slot, v in zip(slots, vals):
            tag = slot[0]
            if tag == "mem_temp":
                mem_temp = v
            elif tag == "state":
                if v is not None:
                    states += 1
                    up += v in _NVLINK_UP
            elif tag == "tx":
                if v is not None:
                    tx = (tx or 0) + v
            elif tag == "rx":
                if v is not None:
                    rx = (rx or 0) + v
            else:
                errors[slot[1]] = v
        r.gauge("gpu_memory_temperature_celsius", mem_temp)
        links = st["nvlinks"]
        if not links:
            return
        r.gauge("gpu_nvlink_active_links", up if states else self._link_states(d, links))
        # NVML counts NVLink data in KiB
        r.counter("gpu_nvlink_tx_bytes", tx * 1024 if tx is not None else None)
        r.counter("gpu_nvlink_rx_bytes", rx * 1024 if rx is not None else None)
        for _, kind in _NVLINK_ERROR_FIELDS:
            if kind in errors:
                r.counter("gpu_nvlink_errors", errors[kind], {"kind": kind})

    def _link_states(self, d: Device, links: List[int]) -> Optional[int]:
        """Active links the old way (one call per link), when the driver
        does not answer the link-state field."""
        call, k = self.nvml.call, d.index
        answered, up = 0, 0
        for link in links:
            s = call("nvmlDeviceGetNvLinkState", d.handle, link, device=k)
            if s is not None:
                answered += 1
                up += bool(s)
        return up if answered else None

    # -- XID events ----------------------------------------------------------
    def events_supported(self, d: Device) -> bool:
        return d.state.get("event_set") is not None

    def events(self, d: Device) -> List[int]:
        """XIDs since the last call: a 0 ms wait per pending event."""
        nv, es = self.nv, d.state.get("event_set")
        xid = getattr(nv, "nvmlEventTypeXidCriticalError", XID_EVENT)
        out = []
        for _ in range(MAX_EVENTS_PER_POLL):
            try:
                data = self.nvml.call("nvmlEventSetWait", es, 0, device=d.index, variant=(),
                                      expect=(nv.NVML_ERROR_TIMEOUT,))
            except nv.NVMLError:
                break  # TIMEOUT: nothing pending
            if data is None:
                break
            if data.eventType & xid:
                out.append(int(data.eventData))
        return out

    def close(self) -> None:
        for es, k in self._event_sets:
            try:
                self.nvml.call("nvmlEventSetFree", es, device=k)
            except DeviceLost:
                pass  # the GPU went away with its events; NVML frees the set at shutdown
        self._event_sets = []
        self.gpm.close()  # its sample buffers, while NVML is still up
        self.nvml.shutdown()


def _scale(value: Value, divisor: float) -> Value:
    return value / divisor if value is not None else None
