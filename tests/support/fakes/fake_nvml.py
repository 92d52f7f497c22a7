"""A fake of the `pynvml` module: the functions graphsignal calls, with the
same names and positional signatures, and the constants it reads, with
NVML's values. GPUs are scripted (values, errors, samples, XID events); a
contract test checks every name and struct member against real pynvml.

    nv = FakeNvml([FakeGpu(0), FakeGpu(1)])
    nv.gpus[0].values["temperature"] = 80
    nv.fail("nvmlDeviceGetFanSpeed", nv.NVML_ERROR_NOT_SUPPORTED)      # every GPU
    nv.fail("nvmlDeviceGetTemperature", nv.NVML_ERROR_UNKNOWN, gpu=1)  # one GPU
    nv.gpus[0].lost = True                                             # GPU_IS_LOST from now on

GPM (Hopper's activity counters): each GPU, and each GPU instance of one
in MIG mode, runs at scripted percentages that hold until changed; a
sample records the busy time integrated so far on the fake's clock, and
nvmlGpmMetricsGet divides the difference of two samples by the time
between them, as the driver does. The GPM structs are ctypes structures
laid out as in nvml.h (a contract test holds them to pynvml's).

    nv = FakeNvml([FakeGpu(0)], clock=clock)
    nv.gpus[0].gpm.set(clock(), sm=80, tensor=60)         # from now on
    nv.gpus[0].gpm_supported = False                      # an Ampere
    mig = nv.gpus[0].add_gpu_instance(gi=1)               # MIG mode, one GPU instance
"""
import ctypes
import functools
import time
from types import SimpleNamespace


class NVMLError(Exception):
    """Like pynvml.NVMLError: `value` is the NVML return code."""

    _strings = {1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions",
                6: "Not Found", 9: "Driver Not Loaded", 10: "Timeout", 12: "NVML Shared Library Not Found",
                13: "Function Not Found", 15: "GPU is lost", 16: "GPU requires restart",
                18: "RM has detected an NVML/RM version mismatch.", 999: "Unknown Error"}

    def __init__(self, value):
        Exception.__init__(self, value)
        self.value = value

    def __str__(self):
        return self._strings.get(self.value, "NVML Error with code %d" % self.value)


def _value(value_type, v):
    """An nvmlValue_t-like union holding v in the member for value_type."""
    u = SimpleNamespace(dVal=0.0, uiVal=0, ulVal=0, ullVal=0, sllVal=0, siVal=0, usVal=0)
    setattr(u, {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}[value_type], v)
    return u


# -- nvml.h's GPM structs ------------------------------------------------------------------
NVML_GPM_METRIC_MAX = 477  # nvml.h (CUDA 13); sizes nvmlGpmMetricsGet_t.metrics


class struct_c_nvmlGpmSample_t(ctypes.Structure):
    pass  # opaque: struct nvmlGpmSample_st


c_nvmlGpmSample_t = ctypes.POINTER(struct_c_nvmlGpmSample_t)  # nvmlGpmSample_t


class c_metricInfo_t(ctypes.Structure):
    _fields_ = [("shortName", ctypes.c_char_p), ("longName", ctypes.c_char_p), ("unit", ctypes.c_char_p)]


class c_nvmlGpmMetric_t(ctypes.Structure):
    """nvmlGpmMetric_t: metricId IN; nvmlReturn, value, metricInfo OUT."""
    _fields_ = [("metricId", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint), ("value", ctypes.c_double),
                ("metricInfo", c_metricInfo_t)]


class c_nvmlGpmMetricsGet_t(ctypes.Structure):
    """nvmlGpmMetricsGet_t (version NVML_GPM_METRICS_GET_VERSION)."""
    _fields_ = [("version", ctypes.c_uint), ("numMetrics", ctypes.c_uint), ("sample1", c_nvmlGpmSample_t),
                ("sample2", c_nvmlGpmSample_t), ("metrics", c_nvmlGpmMetric_t * NVML_GPM_METRIC_MAX)]


class c_nvmlGpmSupport_t(ctypes.Structure):
    """nvmlGpmSupport_t (version NVML_GPM_SUPPORT_VERSION)."""
    _fields_ = [("version", ctypes.c_uint), ("isSupportedDevice", ctypes.c_uint)]


# GPM metric ids (nvml.h's NVML_GPM_METRIC_*) by the short names tests script
GPM_IDS = {"graphics": 1, "sm": 2, "occupancy": 3, "integer": 4, "tensor": 5, "dram": 10, "fp64": 11, "fp32": 12,
           "fp16": 13}


class FakeGpm:
    """The activity counters of a GPU or GPU instance: percent per metric
    id, held until set again, integrated over the fake's clock."""

    def __init__(self):
        self.levels = {}  # metric id -> percent now
        self.busy = {}  # metric id -> percent-seconds so far
        self.t = None  # clock of the last integration
        self.unanswered = set()  # metric ids answered with NVML_ERROR_NOT_SUPPORTED

    def advance(self, now):
        if self.t is not None and now > self.t:
            for mid, pct in self.levels.items():
                self.busy[mid] = self.busy.get(mid, 0.0) + pct * (now - self.t)
        self.t = now if self.t is None else max(self.t, now)

    def set(self, now, **percents):
        """From `now` on, the named metrics (GPM_IDS) run at these percents;
        the others at 0."""
        self.advance(now)
        self.levels = {GPM_IDS[n]: float(v) for n, v in percents.items()}

    def snapshot(self, now):
        self.advance(now)
        return now, dict(self.busy)


class FakeGpuInstance:
    """A MIG device (a compute instance) of one GPU instance: also its own
    NVML handle (nvmlDeviceGetMigDeviceHandleByIndex)."""

    def __init__(self, parent, gi, uuid):
        self.mig_of = parent
        self.gi = gi
        self.uuid = uuid
        self.gpm = FakeGpm()


class FakeGpu:
    """One scripted GPU (an H200 unless told otherwise). It is also its own
    NVML handle."""

    def __init__(self, index, uuid=None, bus_id=None, nvlinks=0, events=True):
        self.index = index
        self.uuid = uuid or "GPU-2c44f54a-9fd0-dfe6-9927-3720662860%02d" % index
        self.bus_id = bus_id or "00000000:%02X:00.0" % (0x18 + index)
        self.lost = False
        self.mig_uuids = []
        self.values = {
            "name": "NVIDIA H200", "architecture": 9, "cc": (9, 0),
            "mem_total": 150754820096, "mem_reserved": 566231040, "mem_free": 149427453952,
            "power_mw": 122160, "power_limit_mw": 700000, "energy_mj": 5000000,
            "temperature": 39, "fan": 30,
            "clock_sm": 1980, "clock_mem": 3201, "max_clock_sm": 1980, "max_clock_mem": 3201,
            "reasons": 0x1, "supported_reasons": 0x1FF, "pstate": 0,
            "pcie_gen": 5, "pcie_width": 16, "pcie_max_gen": 5, "pcie_max_width": 16,
            "pcie_tx_kbs": 596, "pcie_rx_kbs": 445, "pcie_replay": 2,
            "ecc_corrected": 0, "ecc_uncorrected": 0,
            "util_gpu": 7, "util_mem": 3,
            "event_types": 0x8 | 0x2 | 0x1,
        }
        if not events:
            self.values["event_types"] = 0
        # sampling type -> [(timestamp us, value)]; NVML keeps a rolling buffer
        self.samples = {1: [], 2: []}
        # (field id, scope id) -> value; what is missing answers NOT_SUPPORTED
        self.fields = {(82, 0): 45, (91, 0): nvlinks}
        for link in range(nvlinks):
            self.fields[(165, link)] = 1  # NVML_FI_DEV_NVLINK_GET_STATE: active
            self.fields[(138, link)] = 1000 * (link + 1)  # THROUGHPUT_DATA_TX, KiB
            self.fields[(139, link)] = 2000 * (link + 1)  # THROUGHPUT_DATA_RX, KiB
        if nvlinks:
            for fid in (38, 45, 52, 59, 160):  # the error totals
                self.fields[(fid, 0)] = 0
        self.pending = []  # XID codes waiting for nvmlEventSetWait
        self.gpm = FakeGpm()
        self.gpm_supported = True  # Hopper
        self.mig_mode = None  # None: not MIG-capable (NOT_SUPPORTED); 0 off; 1 on
        self.mig_devices = []  # FakeGpuInstance, by MIG device index
        self.mig_slots = 7  # nvmlDeviceGetMaxMigDeviceCount

    def add_gpu_instance(self, gi, compute_instances=1):
        """Turns MIG mode on and adds GPU instance `gi` with its compute
        instances (MIG devices; they share the instance's counters)."""
        self.mig_mode = 1
        first = None
        for ci in range(compute_instances):
            m = FakeGpuInstance(self, gi, "MIG-%08x-0000-4000-8000-%012x" % (self.index, gi * 16 + ci))
            if first is None:
                first = m
            else:
                m.gpm = first.gpm
            self.mig_devices.append(m)
            self.mig_uuids.append(m.uuid)
        return first

    def add_samples(self, kind, start_us, values, step_us=166000):
        """Appends samples (kind: 1 gpu, 2 memory) every step_us from start_us."""
        for i, v in enumerate(values):
            self.samples[kind].append((start_us + i * step_us, v))


def api(func):
    """Records the call and applies the GPU's scripted failures first."""
    name = func.__name__

    @functools.wraps(func)
    def wrapper(self, *args):
        self.calls.append((name, args))
        if not self.initialized and name not in ("nvmlInit", "nvmlInitWithFlags"):
            raise NVMLError(self.NVML_ERROR_UNINITIALIZED)
        gpu = next((a for a in args if isinstance(a, FakeGpu)), None)
        if gpu is not None and gpu.lost:
            raise NVMLError(self.NVML_ERROR_GPU_IS_LOST)
        code = self._failures.get((name, gpu.index if gpu is not None else None), self._failures.get((name, "*")))
        if code is not None:
            raise NVMLError(code)
        return func(self, *args)

    return wrapper


class _Sample:
    """What a sample buffer holds: (target's FakeGpm, (time, busy)) once taken."""

    def __init__(self):
        self.buf = ctypes.create_string_buffer(64)  # the address the handle points to
        self.freed = False
        self.taken = None


class FakeEventSet:
    def __init__(self):
        self.gpus = []
        self.freed = False


class FakeNvml:
    """Module-like: pass an instance wherever pynvml is expected."""

    NVMLError = NVMLError

    NVML_SUCCESS = 0
    NVML_ERROR_UNINITIALIZED = 1
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_TIMEOUT = 10
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_ERROR_RESET_REQUIRED = 16
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
    NVML_ERROR_UNKNOWN = 999

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_GPU_UTILIZATION_SAMPLES = 1
    NVML_MEMORY_UTILIZATION_SAMPLES = 2
    NVML_VALUE_TYPE_UNSIGNED_INT = 1
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
    nvmlMemory_v2 = 0x02000028
    nvmlEventTypeXidCriticalError = 0x8
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1

    NVML_GPM_METRIC_GRAPHICS_UTIL = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3
    NVML_GPM_METRIC_INTEGER_UTIL = 4
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    NVML_GPM_METRIC_FP64_UTIL = 11
    NVML_GPM_METRIC_FP32_UTIL = 12
    NVML_GPM_METRIC_FP16_UTIL = 13
    NVML_GPM_METRIC_MAX = NVML_GPM_METRIC_MAX
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_SUPPORT_VERSION = 1
    c_nvmlGpmSample_t = c_nvmlGpmSample_t
    c_nvmlGpmMetric_t = c_nvmlGpmMetric_t
    c_nvmlGpmMetricsGet_t = c_nvmlGpmMetricsGet_t
    c_nvmlGpmSupport_t = c_nvmlGpmSupport_t

    NVML_FI_DEV_MEMORY_TEMP = 82
    NVML_FI_DEV_NVLINK_LINK_COUNT = 91
    NVML_FI_DEV_NVLINK_GET_STATE = 165
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
    NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL = 38
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL = 45
    NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL = 52
    NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL = 59
    NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL = 160

    def __init__(self, gpus, driver="580.65.06", cuda=13000, init_error=None, clock=time.monotonic):
        self.gpus = list(gpus)
        self.clock = clock  # seconds: when GPM samples are taken
        self.gpm_samples = {}  # address -> _Sample (allocated, freed or not)
        self.driver = driver
        self.cuda = cuda
        self.init_error = init_error
        self.initialized = False
        self.init_count = 0
        self.shutdown_count = 0
        self.calls = []
        self.event_sets = []
        self._failures = {}

    # -- scripting ---------------------------------------------------------------
    def fail(self, fn, code, gpu="*"):
        """Makes fn raise NVMLError(code) (on one GPU index, or on all)."""
        self._failures[(fn, gpu)] = code

    def heal(self, fn, gpu="*"):
        self._failures.pop((fn, gpu), None)

    def remove(self, fn):
        """As if this nvidia-ml-py had no such function."""
        setattr(self, fn, None)

    def gpm_live(self):
        """GPM sample buffers allocated and not freed."""
        return sum(1 for smp in self.gpm_samples.values() if not smp.freed)

    def count(self, fn, gpu=None):
        """How often fn was called (on one GPU when given)."""
        return sum(1 for name, args in self.calls if name == fn and
                   (gpu is None or any(isinstance(a, FakeGpu) and a.index == gpu for a in args)))

    # -- init ------------------------------------------------------------------------
    @api
    def nvmlInit(self):
        self.init_count += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialized = True

    @api
    def nvmlShutdown(self):
        self.shutdown_count += 1
        self.initialized = False

    @api
    def nvmlSystemGetDriverVersion(self):
        return self.driver

    @api
    def nvmlSystemGetCudaDriverVersion(self):
        return self.cuda

    # -- discovery -------------------------------------------------------------------
    @api
    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    @api
    def nvmlDeviceGetHandleByIndex(self, index):
        g = self.gpus[index]
        if g.lost:
            raise NVMLError(self.NVML_ERROR_GPU_IS_LOST)
        return g

    @api
    def nvmlDeviceGetHandleByUUID(self, uuid):
        for g in self.gpus:
            if uuid in g.mig_uuids:
                return SimpleNamespace(mig_of=g)
            if g.uuid == uuid:
                return g
        raise NVMLError(self.NVML_ERROR_NOT_FOUND)

    @api
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice):
        return migDevice.mig_of

    @api
    def nvmlDeviceGetUUID(self, handle):
        return handle.uuid

    @api
    def nvmlDeviceGetPciInfo(self, handle):
        return SimpleNamespace(busId=handle.bus_id, busIdLegacy=handle.bus_id[4:], domain=0, bus=0, device=0,
                               pciDeviceId=0x233510DE, pciSubSystemId=0)

    @api
    def nvmlDeviceGetName(self, handle):
        return handle.values["name"]

    @api
    def nvmlDeviceGetArchitecture(self, device):
        return device.values["architecture"]

    @api
    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return handle.values["cc"]

    @api
    def nvmlDeviceGetMaxClockInfo(self, handle, type):
        return handle.values["max_clock_sm" if type == self.NVML_CLOCK_SM else "max_clock_mem"]

    @api
    def nvmlDeviceGetSupportedClocksEventReasons(self, handle):
        return handle.values["supported_reasons"]

    @api
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return handle.values["pcie_max_gen"]

    @api
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return handle.values["pcie_max_width"]

    # -- telemetry -------------------------------------------------------------------
    @api
    def nvmlDeviceGetSamples(self, device, sampling_type, timeStamp):
        newer = [(t, v) for t, v in device.samples.get(sampling_type, []) if t > timeStamp]
        if not newer:
            raise NVMLError(self.NVML_ERROR_NOT_FOUND)
        vt = self.NVML_VALUE_TYPE_UNSIGNED_INT
        return vt, [SimpleNamespace(timeStamp=t, sampleValue=_value(vt, v)) for t, v in newer]

    @api
    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=handle.values["util_gpu"], memory=handle.values["util_mem"])

    @api
    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        v = handle.values
        used_v2 = v["mem_total"] - v["mem_reserved"] - v["mem_free"]
        if version:
            return SimpleNamespace(version=version, total=v["mem_total"], reserved=v["mem_reserved"],
                                   free=v["mem_free"], used=used_v2)
        return SimpleNamespace(total=v["mem_total"], free=v["mem_free"], used=v["mem_total"] - v["mem_free"])

    @api
    def nvmlDeviceGetPowerUsage(self, handle):
        return handle.values["power_mw"]

    @api
    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return handle.values["power_limit_mw"]

    @api
    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return handle.values["energy_mj"]

    @api
    def nvmlDeviceGetTemperature(self, handle, sensor):
        return handle.values["temperature"]

    @api
    def nvmlDeviceGetFanSpeed(self, handle):
        return handle.values["fan"]

    @api
    def nvmlDeviceGetClockInfo(self, handle, type):
        return handle.values["clock_sm" if type == self.NVML_CLOCK_SM else "clock_mem"]

    @api
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return handle.values["reasons"]

    @api
    def nvmlDeviceGetPerformanceState(self, handle):
        return handle.values["pstate"]

    @api
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return handle.values["pcie_gen"]

    @api
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return handle.values["pcie_width"]

    @api
    def nvmlDeviceGetPcieThroughput(self, device, counter):
        return device.values["pcie_tx_kbs" if counter == self.NVML_PCIE_UTIL_TX_BYTES else "pcie_rx_kbs"]

    @api
    def nvmlDeviceGetPcieReplayCounter(self, handle):
        return handle.values["pcie_replay"]

    @api
    def nvmlDeviceGetTotalEccErrors(self, handle, errorType, counterType):
        return handle.values["ecc_corrected" if errorType == self.NVML_MEMORY_ERROR_TYPE_CORRECTED
                             else "ecc_uncorrected"]

    @api
    def nvmlDeviceGetFieldValues(self, handle, fieldIds):
        out = []
        for f in fieldIds:
            fid, scope = f if isinstance(f, tuple) else (f, 0)
            v = handle.fields.get((fid, scope))
            vt = self.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            ret = self.NVML_SUCCESS if v is not None else self.NVML_ERROR_NOT_SUPPORTED
            out.append(SimpleNamespace(fieldId=fid, scopeId=scope, timestamp=0, latencyUsec=0, valueType=vt,
                                       nvmlReturn=ret, value=_value(vt, v or 0)))
        return out

    @api
    def nvmlDeviceGetNvLinkState(self, device, link):
        v = device.fields.get((165, link))
        if v is None:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return int(v == 1)

    # -- events ------------------------------------------------------------------------
    @api
    def nvmlDeviceGetSupportedEventTypes(self, handle):
        return handle.values["event_types"]

    @api
    def nvmlEventSetCreate(self):
        es = FakeEventSet()
        self.event_sets.append(es)
        return es

    @api
    def nvmlDeviceRegisterEvents(self, handle, eventTypes, eventSet):
        if not handle.values["event_types"] & eventTypes:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        eventSet.gpus.append(handle)

    @api
    def nvmlEventSetWait(self, eventSet, timeoutms):
        for g in eventSet.gpus:
            if g.lost:
                raise NVMLError(self.NVML_ERROR_GPU_IS_LOST)
            if g.pending:
                code = g.pending.pop(0)
                return SimpleNamespace(device=g, eventType=self.nvmlEventTypeXidCriticalError, eventData=code,
                                       gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
        raise NVMLError(self.NVML_ERROR_TIMEOUT)

    @api
    def nvmlEventSetFree(self, eventSet):
        eventSet.freed = True


    # -- MIG ------------------------------------------------------------------------------
    @api
    def nvmlDeviceGetMigMode(self, device):
        if device.mig_mode is None:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return [device.mig_mode, device.mig_mode]

    @api
    def nvmlDeviceGetMaxMigDeviceCount(self, device):
        if device.mig_mode is None:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return device.mig_slots

    @api
    def nvmlDeviceGetMigDeviceHandleByIndex(self, device, index):
        if not device.mig_mode:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(device.mig_devices):
            raise NVMLError(self.NVML_ERROR_NOT_FOUND)
        return device.mig_devices[index]

    @api
    def nvmlDeviceGetGpuInstanceId(self, device):
        if not isinstance(device, FakeGpuInstance):
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return device.gi

    # -- GPM ------------------------------------------------------------------------------
    def _sample(self, handle):
        """The _Sample behind a c_nvmlGpmSample_t, or INVALID_ARGUMENT."""
        addr = ctypes.cast(handle, ctypes.c_void_p).value if handle else None
        smp = self.gpm_samples.get(addr)
        if smp is None or smp.freed:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return smp

    @api
    def nvmlGpmQueryDeviceSupport(self, device):
        s = c_nvmlGpmSupport_t()
        s.version = self.NVML_GPM_SUPPORT_VERSION
        s.isSupportedDevice = int(bool(device.gpm_supported))
        return s

    @api
    def nvmlGpmSampleAlloc(self):
        smp = _Sample()
        addr = ctypes.addressof(smp.buf)
        self.gpm_samples[addr] = smp
        return ctypes.cast(addr, c_nvmlGpmSample_t)

    @api
    def nvmlGpmSampleFree(self, gpmSample):
        self._sample(gpmSample).freed = True

    @api
    def nvmlGpmSampleGet(self, device, gpmSample):
        smp = self._sample(gpmSample)
        if not device.gpm_supported:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        smp.taken = (device.gpm, device.gpm.snapshot(self.clock()))
        return gpmSample

    @api
    def nvmlGpmMigSampleGet(self, device, gpuInstanceId, gpmSample):
        smp = self._sample(gpmSample)
        if not device.gpm_supported or not device.mig_mode:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        mig = next((m for m in device.mig_devices if m.gi == gpuInstanceId), None)
        if mig is None:
            raise NVMLError(self.NVML_ERROR_NOT_FOUND)
        smp.taken = (mig.gpm, mig.gpm.snapshot(self.clock()))
        return gpmSample

    @api
    def nvmlGpmMetricsGet(self, metricsGet):
        q = metricsGet
        if q.version != self.NVML_GPM_METRICS_GET_VERSION:
            raise NVMLError(self.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if not 0 < q.numMetrics <= NVML_GPM_METRIC_MAX:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        s1, s2 = self._sample(q.sample1), self._sample(q.sample2)
        if s1 is s2 or s1.taken is None or s2.taken is None or s1.taken[0] is not s2.taken[0]:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)  # one buffer twice, empty, or two targets
        gpm, (t1, busy1), (t2, busy2) = s1.taken[0], s1.taken[1], s2.taken[1]
        if t2 <= t1:
            raise NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)  # the fake's rule: samples in order, time apart
        for i in range(q.numMetrics):
            m = q.metrics[i]
            if m.metricId in gpm.unanswered or m.metricId not in GPM_IDS.values():
                m.nvmlReturn, m.value = self.NVML_ERROR_NOT_SUPPORTED, 0.0
            else:
                m.nvmlReturn = self.NVML_SUCCESS
                m.value = (busy2.get(m.metricId, 0.0) - busy1.get(m.metricId, 0.0)) / (t2 - t1)
        return q


# Names a contract test checks against the real pynvml.
FUNCTIONS = sorted(n for n, v in vars(FakeNvml).items() if n.startswith("nvml") and callable(v))
CONSTANTS = sorted(n for n, v in vars(FakeNvml).items()
                   if (n.startswith("NVML_") or n.startswith("nvmlMemory") or n.startswith("nvmlEventType"))
                   and isinstance(v, int))
# ctypes structures the fake lays out itself (nvml.h's): a contract test
# compares every member's name, offset and size with pynvml's
LAYOUTS = ("c_nvmlGpmMetric_t", "c_nvmlGpmMetricsGet_t", "c_nvmlGpmSupport_t")
# pynvml struct -> members the fake returns (and graphsignal reads)
STRUCTS = {
    "c_nvmlMemory_v2_t": ("total", "reserved", "free", "used"),
    "c_nvmlMemory_t": ("total", "free", "used"),
    "c_nvmlUtilization_t": ("gpu", "memory"),
    "nvmlPciInfo_t": ("busId",),
    "c_nvmlSample_t": ("timeStamp", "sampleValue"),
    "c_nvmlValue_t": ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal"),
    "c_nvmlFieldValue_t": ("fieldId", "scopeId", "valueType", "nvmlReturn", "value"),
    "c_nvmlEventData_t": ("device", "eventType", "eventData"),
}
