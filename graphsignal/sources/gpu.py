"""GPU telemetry: one Source for every vendor backend (NVML, AMD SMI).

A backend reads its vendor library and fills a `Reading` per device under
the shared metric names below; this module turns readings into series,
counters since start, rates, errors and device resources, so NVIDIA and
AMD GPUs look the same to an agent. `null` means the GPU or driver cannot
measure that field; `0` means measured zero.

Metrics (tags `device.uuid`, `device.bus_id`, `device.index`; gauges
unless marked):

  gpu_utilization_percent            time a kernel was running, averaged over
                                     the driver's samples since the last read
  gpu_memory_busy_percent            time device memory was being read or
                                     written (nvidia-smi's utilization.memory;
                                     not capacity: see gpu_memory_used_bytes)
  gpu_memory_used_bytes / _free_bytes / _total_bytes / _reserved_bytes
                                     used = total - free (includes reserved)
  gpu_power_usage_watts, gpu_power_management_limit_watts
  gpu_energy_consumed_joules         counter
  gpu_temperature_celsius, gpu_memory_temperature_celsius
  gpu_fan_speed_percent
  gpu_clock_sm_megahertz, gpu_clock_mem_megahertz,
  gpu_max_clock_sm_megahertz, gpu_max_clock_mem_megahertz
  gpu_clocks_throttle_reasons        the driver's bitmask (NVML clock event reasons)
  gpu_clocks_throttle_reason_active  1/0 per decoded reason the GPU supports (tag
                                     `reason`): sw_power_cap, hw_slowdown,
                                     hw_power_brake_slowdown = power-bound;
                                     sw_thermal_slowdown, hw_thermal_slowdown =
                                     heat-bound; gpu_idle = nothing running (not a
                                     slowdown); applications_clocks_setting,
                                     sync_boost, display_clock_setting
  gpu_performance_state              0 (P0, fastest) .. 15
  gpu_pcie_link_generation, gpu_pcie_link_width
  gpu_pcie_throughput_rx_kilobytes_per_second, ..._tx_...
  gpu_pcie_replay_counter            counter
  gpu_nvlink_active_links            only on GPUs with NVLink, as are the next
  gpu_nvlink_rx_bytes, gpu_nvlink_tx_bytes            counters (payload data)
  gpu_nvlink_throughput_rx_kilobytes_per_second, ..._tx_...   over the last poll
  gpu_nvlink_errors                  counter, tag `kind`
  gpu_ecc_errors                     counter, tag `kind`: corrected, uncorrected
  gpu_xid_errors                     counter; each XID is also an `errors` entry
  gpu_sm_active_percent, gpu_sm_occupancy_percent, gpu_tensor_active_percent,
  gpu_dram_active_percent, gpu_fp16/fp32/fp64_active_percent,
  gpu_gr_engine_active_percent       NVIDIA Hopper and newer: the GPU's own
                                     activity counters over the last poll, also
                                     per MIG GPU instance (gpm.py; absent where
                                     not supported)

Counters are cumulative since the profiler started (the driver's own
totals since boot are differenced), like every other counter here.

Scoping: the GPUs the workload can see, from its CUDA_VISIBLE_DEVICES
(indices, `GPU-` UUIDs or UUID prefixes, `MIG-` UUIDs map to their GPU;
an empty value means none); indices are read in PCI bus order, which is
CUDA's order whenever the GPUs are of one model or CUDA_DEVICE_ORDER is
PCI_BUS_ID. GRAPHSIGNAL_ALL_GPUS=1 watches every GPU on the host.
"""
import logging
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Union

from graphsignal import config
from graphsignal.sources import Source, SourceUnavailable

logger = logging.getLogger("graphsignal")

ENV_ALL_GPUS = config.ALL_GPUS_ENV
MAX_EVENTS_PER_POLL = 64  # an XID storm must not stall the telemetry thread

Num = Union[int, float]
Value = Optional[Num]  # None: not measured
TKey = Tuple[Tuple[str, str], ...]  # extra tags, sorted

# Counters whose per-poll delta also makes a rate gauge: KiB/s from bytes.
RATES = {
    "gpu_nvlink_tx_bytes": "gpu_nvlink_throughput_tx_kilobytes_per_second",
    "gpu_nvlink_rx_bytes": "gpu_nvlink_throughput_rx_kilobytes_per_second",
}

# Short descriptions of XIDs that an agent meets most (NVIDIA's XID
# catalogue); the code is always reported, the text only helps.
XID_TEXT = {
    13: "graphics engine exception (often an illegal memory access or a device assert in a kernel)",
    31: "GPU memory page fault (usually an illegal address in application code)",
    32: "invalid or corrupted push buffer stream",
    43: "GPU stopped processing (an application fault)",
    45: "preemptive cleanup after earlier errors (a context was torn down)",
    48: "double-bit ECC error (uncorrectable memory error)",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (the affected application must restart)",
    95: "uncontained ECC error (the GPU needs a reset)",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
}


class BackendUnavailable(Exception):
    """The vendor library or driver cannot be used here; the message is the
    one line users see. absent: the vendor's driver is not on this host at
    all (not broken, just not there)."""

    def __init__(self, message: str = "", absent: bool = False) -> None:
        Exception.__init__(self, message)
        self.absent = absent


class DeviceLost(Exception):
    """The GPU stopped answering (fell off the bus, needs a reset)."""


class Device:
    """One physical GPU as a backend found it. `handle` and `state` belong
    to the backend; `index` is the vendor library's index (nvidia-smi's)."""

    __slots__ = ("index", "uuid", "bus_id", "handle", "attributes", "cuda_index", "lost", "state", "tags")

    def __init__(self, index: int, uuid: Optional[str], bus_id: Optional[str], handle: Any = None,
                 lost: Optional[str] = None) -> None:
        self.index = index
        self.uuid = uuid or ""
        self.bus_id = bus_id or ""
        self.handle = handle
        self.attributes: Dict[str, Any] = {}
        self.cuda_index: Optional[int] = None
        self.lost = lost  # None, or why the device cannot be read
        self.state: Dict[Any, Any] = {}
        self.tags = {"device.uuid": self.uuid, "device.bus_id": self.bus_id, "device.index": str(index)}

    def label(self) -> str:
        return "GPU %d (%s)" % (self.index, self.uuid or "uuid unknown")


class Reading:
    """What a backend measured on one device in one poll: gauges and raw
    cumulative counters by (name, extra tags). None = not measured."""

    __slots__ = ("gauges", "counters")

    def __init__(self) -> None:
        self.gauges: Dict[Tuple[str, TKey], Value] = {}
        self.counters: Dict[Tuple[str, TKey], Value] = {}

    def gauge(self, name: str, value: Value, tags: Optional[Mapping[str, str]] = None) -> None:
        self.gauges[(name, _tkey(tags))] = value

    def counter(self, name: str, raw_total: Value, tags: Optional[Mapping[str, str]] = None) -> None:
        self.counters[(name, _tkey(tags))] = raw_total


def _tkey(tags: Optional[Mapping[str, str]]) -> TKey:
    return tuple(sorted(tags.items())) if tags else ()


class Backend:
    """The interface a vendor backend implements (see nvml.py, amdsmi.py)."""

    vendor = "unknown"
    visible_env: Tuple[str, ...] = ("CUDA_VISIBLE_DEVICES",)

    def open(self) -> List[Device]:
        """Every GPU on the host as a list of Device; raises BackendUnavailable."""
        raise NotImplementedError

    def resolve(self, token: str) -> Optional[str]:
        """The GPU UUID behind a visible-devices entry that is neither an
        index nor a GPU UUID (e.g. a MIG UUID), or None."""
        return None

    def prepare(self, dev: Device) -> None:
        """One-time setup of a selected device: static attributes, events."""

    def read(self, dev: Device, reading: Reading) -> None:
        """Fills `reading`; raises DeviceLost."""
        raise NotImplementedError

    def events_supported(self, dev: Device) -> bool:
        return False

    def events(self, dev: Device) -> List[int]:
        """XID codes seen since the last call; raises DeviceLost."""
        return []

    def close(self) -> None:
        pass


# -- scoping --------------------------------------------------------------------
def parse_visible(value: Optional[str]) -> Optional[List[Union[int, str]]]:
    """A CUDA_VISIBLE_DEVICES value as a list of entries (int indices or
    UUID strings), or None when unset (everything is visible). Like CUDA,
    the list ends at the first entry that is not valid."""
    if value is None:
        return None
    out: List[Union[int, str]] = []
    for raw in value.split(","):
        tok = raw.strip()
        if not tok:
            break
        if tok.lstrip("-").isdigit():
            idx = int(tok)
            if idx < 0:
                break
            out.append(idx)
        else:
            out.append(tok)
    return out


def _bare(uuid: str) -> str:
    u = uuid.lower()
    return u[4:] if u.startswith("gpu-") else u


def _match_uuid(devices: Sequence[Device], token: str,
                resolve: Optional[Callable[[str], Optional[str]]]) -> Optional[Device]:
    low = token.lower()
    if low.startswith("mig-"):
        parent = resolve(token) if resolve is not None else None
        if not parent:
            return None
        low = parent.lower()
    prefix = _bare(low)
    hits = [d for d in devices if d.uuid and _bare(d.uuid).startswith(prefix)]
    return hits[0] if len(hits) == 1 else None


def select_devices(devices: Sequence[Device], entries: Optional[Sequence[Union[int, str]]],
                   resolve: Optional[Callable[[str], Optional[str]]] = None) -> List[Device]:
    """The devices named by `entries` (from parse_visible), in that order,
    each with its CUDA ordinal; all devices when entries is None. An entry
    that names no device, or a device twice, ends the list (CUDA's rule);
    MIG entries watch their parent GPU once."""
    if entries is None:
        for i, dev in enumerate(devices):
            dev.cuda_index = i
        return list(devices)
    by_index = {d.index: d for d in devices}
    out: List[Device] = []
    seen: Set[int] = set()
    for entry in entries:
        d = by_index.get(entry) if isinstance(entry, int) else _match_uuid(devices, entry, resolve)
        if d is None:
            logger.info("graphsignal: visible-devices entry %r names no GPU here; the list ends there", entry)
            break
        if id(d) in seen:
            if isinstance(entry, str) and entry.lower().startswith("mig-"):
                continue  # two MIG instances of one GPU: one GPU to watch
            break
        seen.add(id(d))
        d.cuda_index = len(out)
        out.append(d)
    return out


def scope(devices: Sequence[Device], backend: Backend, visible: Mapping[str, str],
          all_gpus: bool = False) -> Tuple[List[Device], Optional[str]]:
    """(selected devices, one-line note when none). visible: the
    workload's device-selection variables (config.VISIBLE_DEVICES_ENVS)
    that are set; all_gpus: GRAPHSIGNAL_ALL_GPUS."""
    if all_gpus:
        return select_devices(devices, None), None
    for name in backend.visible_env:
        if name in visible:
            picked = select_devices(devices, parse_visible(visible[name]), backend.resolve)
            note = None
            if not picked:
                note = "no %s GPU is visible to the workload (%s=%r); set %s=1 to watch all %d" % (
                    backend.vendor, name, visible[name], ENV_ALL_GPUS, len(devices))
            return picked, note
    return select_devices(devices, None), None


# -- the source -----------------------------------------------------------------
class _Counter:
    __slots__ = ("last", "total", "t")

    def __init__(self) -> None:
        self.last: Value = None
        self.total: Value = None
        self.t: Optional[float] = None  # monotonic seconds of the last reading (rates span two readings)

    def advance(self, raw: Value) -> Value:
        """Adds the growth since the last raw reading; a reading below the
        last one means the driver's counter restarted (reset, reload)."""
        if raw is None:
            return self.total
        if self.last is None or self.total is None:
            self.total = 0
        elif raw >= self.last:
            self.total += raw - self.last
        else:
            self.total += raw
        self.last = raw
        return self.total


class GpuTelemetry(Source):
    """Polls every selected GPU of every backend about once a second.

    `backends`: Backend instances (pass fakes in tests); `visible`: the
    workload's device-selection variables that are set (name -> value,
    config.Settings.visible_devices); `all_gpus`: every GPU, whatever the
    workload sees (GRAPHSIGNAL_ALL_GPUS); `clock`: monotonic seconds (rates).
    """

    name = "gpu"
    interval = 1.0

    def __init__(self, store: Any, backends: Iterable[Backend], visible: Optional[Mapping[str, str]] = None,
                 all_gpus: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.backends = list(backends)
        self.visible = dict(visible or {})
        self.all_gpus = all_gpus
        self.clock = clock
        self.active: List[Tuple[Backend, List[Device]]] = []
        self._counters: Dict[Tuple[int, Tuple[str, TKey]], _Counter] = {}  # (id(dev), key) -> _Counter
        self._tags: Dict[Tuple[int, TKey], Dict[str, str]] = {}  # (id(dev), tkey) -> merged tags
        self._xid_totals: Dict[int, int] = {}
        self._emitted: Dict[int, Set[Tuple[str, TKey]]] = {}  # id(dev) -> gauge keys (nulled if the GPU is lost)
        self._closed = False

    def setup(self) -> None:
        reasons = []
        absent = True  # every vendor's driver is missing: a host without GPUs, nothing to warn about
        for b in self.backends:
            try:
                devices = b.open()
            except BackendUnavailable as e:
                reasons.append(str(e))
                absent = absent and e.absent
                continue
            absent = False
            picked, note = scope(devices, b, self.visible, self.all_gpus)
            if not picked:
                reasons.append(note or "%s found no GPU" % b.vendor)
                b.close()
                continue
            for d in picked:
                if d.lost is None:
                    try:
                        b.prepare(d)
                    except DeviceLost as e:
                        d.lost = str(e)
                if d.cuda_index is not None:
                    d.attributes["cuda_index"] = str(d.cuda_index)
                self._xid_totals[id(d)] = 0
                self._emitted[id(d)] = set()
            self.active.append((b, picked))
            for d in picked:
                if d.lost is not None:
                    self._lose(d, d.lost)
        if not self.active:
            raise SourceUnavailable("; ".join(reasons) or "no GPU found", quiet=absent and bool(reasons))
        for why in reasons:  # e.g. no NVIDIA driver on an AMD host: not worth an error entry
            logger.info("graphsignal: %s", why)

    def devices(self) -> List[Device]:
        return [d for _, devs in self.active for d in devs]

    def poll(self) -> None:
        if self._closed:
            return
        store = self.store
        for b, devs in self.active:
            for d in devs:
                if d.lost is not None:
                    continue
                reading = Reading()
                try:
                    b.read(d, reading)
                    xids = b.events(d) if b.events_supported(d) else None
                except DeviceLost as e:
                    self._lose(d, str(e))
                    continue
                now = self.clock()
                ts = store.clock()
                self._emit(d, reading, xids, now, ts)
                store.set_resource("device", d.tags, d.attributes, ts)

    def _tags_for(self, d: Device, tkey: TKey) -> Dict[str, str]:
        k = (id(d), tkey)
        t = self._tags.get(k)
        if t is None:
            t = self._tags[k] = dict(d.tags, **dict(tkey)) if tkey else d.tags
        return t

    def _emit(self, d: Device, reading: Reading, xids: Optional[List[int]], now: float, ts: int) -> None:
        store = self.store
        emitted = self._emitted[id(d)]
        for key, value in reading.gauges.items():
            store.set_gauge(key[0], self._tags_for(d, key[1]), value, ts)
            emitted.add(key)
        for key, raw in reading.counters.items():
            c = self._counters.get((id(d), key))
            if c is None:
                c = self._counters[(id(d), key)] = _Counter()
            before = c.total
            tags = self._tags_for(d, key[1])
            rate_name = RATES.get(key[0])
            if raw is None and before is not None:
                # a failed read keeps the last total rather than erasing it;
                # the rate over this poll is unknown
                if rate_name is not None:
                    store.set_gauge(rate_name, tags, None, ts)
                continue
            prev_t, c.t = c.t, now
            total = c.advance(raw)
            if isinstance(total, float):
                total = round(total, 6)  # differences of large float totals carry noise
            store.set_counter(key[0], tags, total, ts)
            if rate_name is not None:
                rate = None
                # over the time between this reading and the last one, which
                # is several polls apart for fields read on the slow tier
                dt = (now - prev_t) if prev_t is not None else None
                if before is not None and total is not None and dt and dt > 0:
                    rate = round((total - before) / 1024.0 / dt, 1)
                store.set_gauge(rate_name, tags, rate, ts)
                emitted.add((rate_name, key[1]))
        if xids is None:
            store.set_counter("gpu_xid_errors", d.tags, None, ts)
        else:
            for code in xids:
                self._xid(d, code)
            self._xid_totals[id(d)] += len(xids)
            store.set_counter("gpu_xid_errors", d.tags, self._xid_totals[id(d)], ts)

    def _xid(self, d: Device, code: int) -> None:
        text = XID_TEXT.get(code)
        msg = "XID %d on %s%s" % (code, d.label(), (": " + text) if text else "")
        logger.warning("graphsignal: %s", msg)
        self.store.add_error("error", msg, tags=dict(d.tags, xid=str(code)))

    def _lose(self, d: Device, why: str) -> None:
        """One error entry; the device is not polled again and its gauges
        turn null (no longer measured); counters keep their totals."""
        d.lost = why
        msg = "%s is lost (%s); its telemetry stopped" % (d.label(), why)
        logger.warning("graphsignal: %s", msg)
        store = self.store
        store.add_error("error", msg, tags=d.tags)
        ts = store.clock()
        for key in self._emitted.get(id(d), ()):
            store.set_gauge(key[0], self._tags_for(d, key[1]), None, ts)
        d.attributes["status"] = "lost"
        store.set_resource("device", d.tags, d.attributes, ts)

    def shutdown(self) -> None:
        """Takes one last reading, then releases the vendor libraries.

        The sidecar polls once more after shutdown() so that a short run
        keeps its last second; the libraries are gone by then, so the last
        reading happens here and later polls do nothing."""
        if self._closed:
            return
        try:
            self.poll()
        finally:
            self._closed = True
            for b, _ in self.active:
                b.close()
