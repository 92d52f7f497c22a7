"""The GPU's own activity counters through NVML GPM (GPU Performance
Monitoring; Hopper and newer), read by the sidecar: nothing runs in the
workload. On Hopper, DCGM's profiling fields come from the same counters;
each series below names the DCGM field it corresponds to.

  series (gauge, percent 0-100)  NVML metric (nvml.h)               DCGM field
  gpu_gr_engine_active_percent   NVML_GPM_METRIC_GRAPHICS_UTIL      DCGM_FI_PROF_GR_ENGINE_ACTIVE
  gpu_sm_active_percent          NVML_GPM_METRIC_SM_UTIL            DCGM_FI_PROF_SM_ACTIVE
  gpu_sm_occupancy_percent       NVML_GPM_METRIC_SM_OCCUPANCY       DCGM_FI_PROF_SM_OCCUPANCY
  gpu_tensor_active_percent      NVML_GPM_METRIC_ANY_TENSOR_UTIL    DCGM_FI_PROF_PIPE_TENSOR_ACTIVE
  gpu_dram_active_percent        NVML_GPM_METRIC_DRAM_BW_UTIL       DCGM_FI_PROF_DRAM_ACTIVE
  gpu_fp64_active_percent        NVML_GPM_METRIC_FP64_UTIL          DCGM_FI_PROF_PIPE_FP64_ACTIVE
  gpu_fp32_active_percent        NVML_GPM_METRIC_FP32_UTIL          DCGM_FI_PROF_PIPE_FP32_ACTIVE
  gpu_fp16_active_percent        NVML_GPM_METRIC_FP16_UTIL          DCGM_FI_PROF_PIPE_FP16_ACTIVE

Percent as NVML gives it and as /signals keeps every share
(gpu_utilization_percent); DCGM and /metrics say the same as a 0-1 ratio.
Tags: the GPU's (device.uuid, device.bus_id, device.index); on a GPU in
MIG mode, one more set per GPU instance with `device.gpu_instance_id`
(nvidia-smi's GI ID), beside the GPU-wide set where the driver gives one.

How: the driver computes a metric from two samples of the counters. Each
target (a GPU, or one of its GPU instances) owns two sample buffers,
allocated once and freed at shutdown; every poll takes a sample into the
spare one, asks nvmlGpmMetricsGet for (previous, current) and swaps. So a
value covers exactly the time since the previous poll, and consecutive
values tile time without a gap. One sample per telemetry poll (about a
second), not two: the store keeps a gauge's last value and the history one
point a second, so a value over half a second would hide the other half,
and averaging two halves gives back the value over the second, at twice
the driver calls.

Where GPM is not supported (before Hopper, some vGPU profiles, an
nvidia-ml-py without GPM) or refused (NVML_ERROR_NO_PERMISSION: profiling
restricted to administrators): one line, and the series are absent, never
0. A metric the driver does not answer on a target is absent there; once
answered, a failed read is null (not measured then).
"""
import logging
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

from graphsignal.sources.gpu import Device, DeviceLost, Reading

if TYPE_CHECKING:
    from graphsignal.sources.nvml_library import Nvml

logger = logging.getLogger("graphsignal")

# (series, NVML_GPM_METRIC_* value in nvml.h, its name there, the DCGM field)
METRICS = (
    ("gpu_gr_engine_active_percent", 1, "NVML_GPM_METRIC_GRAPHICS_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
    ("gpu_sm_active_percent", 2, "NVML_GPM_METRIC_SM_UTIL", "DCGM_FI_PROF_SM_ACTIVE"),
    ("gpu_sm_occupancy_percent", 3, "NVML_GPM_METRIC_SM_OCCUPANCY", "DCGM_FI_PROF_SM_OCCUPANCY"),
    ("gpu_tensor_active_percent", 5, "NVML_GPM_METRIC_ANY_TENSOR_UTIL", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
    ("gpu_dram_active_percent", 10, "NVML_GPM_METRIC_DRAM_BW_UTIL", "DCGM_FI_PROF_DRAM_ACTIVE"),
    ("gpu_fp64_active_percent", 11, "NVML_GPM_METRIC_FP64_UTIL", "DCGM_FI_PROF_PIPE_FP64_ACTIVE"),
    ("gpu_fp32_active_percent", 12, "NVML_GPM_METRIC_FP32_UTIL", "DCGM_FI_PROF_PIPE_FP32_ACTIVE"),
    ("gpu_fp16_active_percent", 13, "NVML_GPM_METRIC_FP16_UTIL", "DCGM_FI_PROF_PIPE_FP16_ACTIVE"),
)
SERIES = tuple(m[0] for m in METRICS)

METRICS_GET_VERSION = 1  # NVML_GPM_METRICS_GET_VERSION (nvml.h), where pynvml lacks the name
SUPPORT_VERSION = 1  # NVML_GPM_SUPPORT_VERSION
MIG_ENABLE = 1  # NVML_DEVICE_MIG_ENABLE
TAG = "device.gpu_instance_id"

# nvml.h: two samples closer than 100 ms are not apart (the counters
# refresh every 100 ms). Only the final poll at shutdown comes this close;
# it keeps the last values instead. A margin over 100 ms covers the time
# between reading the clock and the driver taking the sample.
MIN_INTERVAL = 0.2

_FUNCTIONS = ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree", "nvmlGpmSampleGet",
              "nvmlGpmMetricsGet")


class _Target:
    """A GPU (gi None) or one of its MIG GPU instances: its two sample
    buffers, the one holding the previous sample, and what it answered."""

    __slots__ = ("gi", "mig", "tags", "buffers", "spare", "prev", "prev_t", "answered", "off")

    def __init__(self, gi: Optional[int], buffers: List[Any], mig: bool = False) -> None:
        self.gi = gi
        self.mig = mig  # the GPU is in MIG mode
        self.tags = {TAG: str(gi)} if gi is not None else None
        self.buffers = buffers
        self.spare = 0  # index of the buffer the next sample goes into
        self.prev: Any = None  # the buffer holding the last sample, or None
        self.prev_t: Optional[float] = None  # backend clock (s) when it was taken
        self.answered: Set[str] = set()  # series this target has given a value for (null after that, never absent)
        self.off = False  # refused or not supported: not asked again

    def where(self, k: int) -> str:
        return "GPU %s" % k if self.gi is None else "GPU %s GPU instance %s" % (k, self.gi)


class Gpm:
    """GPM for one NvmlBackend: `nvml` is its door (graphsignal.sources.nvml.Nvml),
    `clock` monotonic seconds."""

    def __init__(self, nvml: "Nvml", clock: Callable[[], float]) -> None:
        self.nvml = nvml
        self.clock = clock
        self._query: Any = None  # one nvmlGpmMetricsGet_t, reused by every read (~19 KB)
        self._targets: List[Tuple[_Target, int]] = []  # (target, device index): what close() frees

    # -- setup -------------------------------------------------------------------
    def prepare(self, d: Device) -> None:
        """Finds whether device `d` has GPM and its GPU instances, and
        allocates their sample buffers. d.state["gpm"]: the targets."""
        d.state["gpm"] = []
        nv, call, h, k = self.nvml.nv, self.nvml.call, d.handle, d.index
        missing = [fn for fn in _FUNCTIONS + ("c_nvmlGpmMetricsGet_t",) if getattr(nv, fn, None) is None]
        if missing:
            self.nvml.log_once(("gpm", "module"), logging.INFO,
                               "this nvidia-ml-py has no NVML GPM (%s missing; upgrade nvidia-ml-py): no SM, tensor "
                               "or DRAM activity series" % missing[0])
            return
        try:
            support = call("nvmlGpmQueryDeviceSupport", h, device=k, expect=self._refusals())
        except nv.NVMLError as e:
            self._say_off(_Target(None, []), k, e)
            return
        if support is None:
            return  # an unexpected failure, said by the door
        if not support.isSupportedDevice:
            name = d.attributes.get("device.name")
            self._say_unsupported("GPU %s%s" % (k, " (%s)" % name if name else ""))
            return
        gis = self._gpu_instances(d)
        for gi in [None] + gis:
            buffers = [call("nvmlGpmSampleAlloc", device=k, variant=("gpm", gi)) for _ in range(2)]
            t = _Target(gi, [b for b in buffers if b is not None], mig=bool(gis))
            self._targets.append((t, k))  # freed at close, whatever was allocated
            if len(t.buffers) == 2:
                d.state["gpm"].append(t)

    def _gpu_instances(self, d: Device) -> List[int]:
        """The GPU instance ids of a GPU in MIG mode (sorted), else []."""
        nv, call, h, k = self.nvml.nv, self.nvml.call, d.handle, d.index
        mode = call("nvmlDeviceGetMigMode", h, device=k)
        if not mode or mode[0] != getattr(nv, "NVML_DEVICE_MIG_ENABLE", MIG_ENABLE):
            return []
        gis: Set[int] = set()
        for i in range(call("nvmlDeviceGetMaxMigDeviceCount", h, device=k) or 0):
            try:
                mig = call("nvmlDeviceGetMigDeviceHandleByIndex", h, i, device=k, variant=(i,),
                           expect=(nv.NVML_ERROR_NOT_FOUND, nv.NVML_ERROR_INVALID_ARGUMENT))
            except nv.NVMLError:
                continue  # an empty slot
            if mig is not None:
                gi = call("nvmlDeviceGetGpuInstanceId", mig, device=k, variant=(i,))
                if gi is not None:
                    gis.add(int(gi))  # compute instances of one GPU instance share its counters
        return sorted(gis)

    def _refusals(self) -> Tuple[int, ...]:
        nv = self.nvml.nv
        return (nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_NO_PERMISSION, nv.NVML_ERROR_FUNCTION_NOT_FOUND)

    def _say_unsupported(self, where: str, why: str = "it needs Hopper or newer") -> None:
        self.nvml.log_once(("gpm-unsupported", where), logging.INFO,
                           "NVML GPM is not supported on %s (%s): its SM, tensor and DRAM activity series are "
                           "absent" % (where, why))

    def _say_off(self, t: _Target, k: int, e: Exception) -> None:
        """One line for a GPM call the driver refuses or cannot answer: a
        refusal is also an `errors` entry (someone can lift it), the rest
        a fact of the hardware or driver."""
        nv, where = self.nvml.nv, t.where(k)
        code = getattr(e, "value", None)
        if code == nv.NVML_ERROR_NO_PERMISSION:
            self.nvml.reporter.once(("gpm-refused", where), "NVML GPM refused on %s (no permission: profiling "
                                    "counters may be restricted to administrators, "
                                    "NVreg_RestrictProfilingToAdminUsers=1): its SM, tensor and DRAM activity "
                                    "series are absent" % where)
        elif code == nv.NVML_ERROR_FUNCTION_NOT_FOUND:
            self._say_unsupported(where, "this driver's NVML has no GPM functions")
        elif t.gi is None and t.mig:
            self._say_unsupported(where, "not GPU-wide in MIG mode; per GPU instance only")
        else:
            self._say_unsupported(where)

    # -- polling -------------------------------------------------------------------
    def read(self, d: Device, r: Reading) -> None:
        """Takes a sample of each target of `d`; where a previous one is
        kept, puts the metrics over the two into reading `r`."""
        targets = d.state.get("gpm")
        if not targets:
            return
        nv, call, h, k = self.nvml.nv, self.nvml.call, d.handle, d.index
        for t in targets:
            if t.off:
                continue
            now = self.clock()
            if t.prev_t is not None and now - t.prev_t < MIN_INTERVAL:
                continue  # too soon for a new sample: the series keep the values they have
            cur = t.buffers[t.spare]
            try:
                if t.gi is None:
                    got = call("nvmlGpmSampleGet", h, cur, device=k, variant=("gpm",), expect=self._refusals())
                else:
                    got = call("nvmlGpmMigSampleGet", h, t.gi, cur, device=k, variant=("gpm", t.gi),
                               expect=self._refusals())
                values = self._metrics(t, k, t.prev, cur) if got is not None and t.prev is not None else None
            except nv.NVMLError as e:
                t.off = True
                self._say_off(t, k, e)
                self._emit(t, r, {})
                continue
            if got is None:
                # no sample (the door said why): the next window starts at the next sample
                t.prev = t.prev_t = None
                self._emit(t, r, {})
                continue
            if t.prev is not None:
                self._emit(t, r, values or {})
            t.prev, t.prev_t, t.spare = cur, now, 1 - t.spare

    def _metrics(self, t: _Target, k: int, s1: Any, s2: Any) -> Optional[Dict[str, Optional[float]]]:
        """{series: percent} of the metrics the driver answered over
        samples (s1, s2); None when the call failed."""
        nv = self.nvml.nv
        q = self._query
        if q is None:
            q = self._query = nv.c_nvmlGpmMetricsGet_t()
        q.version = getattr(nv, "NVML_GPM_METRICS_GET_VERSION", METRICS_GET_VERSION)
        q.numMetrics = len(METRICS)
        q.sample1, q.sample2 = s1, s2
        for i, m in enumerate(METRICS):
            q.metrics[i].metricId = m[1]
            q.metrics[i].nvmlReturn = 0
            q.metrics[i].value = 0.0
        if self.nvml.call("nvmlGpmMetricsGet", q, device=k, variant=("gpm", t.gi), expect=self._refusals()) is None:
            return None
        out: Dict[str, Optional[float]] = {}
        for i, m in enumerate(METRICS):
            got = q.metrics[i]
            if got.nvmlReturn != nv.NVML_SUCCESS:
                if m[0] not in t.answered:
                    self.nvml.log_once(("gpm", t.where(k), m[0]), logging.INFO,
                                       "NVML GPM does not answer %s on %s (return code %d): %s is absent there"
                                       % (m[2], t.where(k), got.nvmlReturn, m[0]))
                continue
            v = got.value
            if not 0.0 <= v <= 100.5:  # NaN too
                self.nvml.log_once(("gpm-range", t.where(k), m[0]), logging.WARNING,
                                   "NVML GPM gave %s = %r on %s, outside 0-100; reported as null"
                                   % (m[2], v, t.where(k)))
                out[m[0]] = None
                continue
            out[m[0]] = round(min(v, 100.0), 2)  # float rounding may overshoot 100 by a hair
        return out

    def _emit(self, t: _Target, r: Reading, values: Mapping[str, Optional[float]]) -> None:
        """The answered series into the reading; a series answered before
        but not now is null (not measured this time), never 0 and never
        dropped while the store still holds its last value."""
        for name in SERIES:
            if name in values:
                r.gauge(name, values[name], t.tags)
                t.answered.add(name)
            elif name in t.answered:
                r.gauge(name, None, t.tags)

    # -- shutdown ------------------------------------------------------------------------
    def close(self) -> None:
        """Frees every sample buffer (before NVML shuts down)."""
        for t, k in self._targets:
            for b in t.buffers:
                try:
                    self.nvml.call("nvmlGpmSampleFree", b, device=k, variant=("gpm", t.gi))
                except DeviceLost:
                    pass  # the GPU is gone with its samples; NVML's shutdown releases what is left
            t.buffers = []
        self._targets = []
        self._query = None
