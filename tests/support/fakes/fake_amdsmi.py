"""A fake of the `amdsmi` module (ROCm's AMD SMI Python package): the
functions, enums and exceptions graphsignal uses, with amdsmi's names and
positional signatures and its habit of returning dicts with "N/A" for
fields a GPU lacks. GPUs are scripted like tests/support/fakes/fake_nvml.py.

    smi = FakeAmdSmi([FakeAmdGpu(0)])
    smi.fail("amdsmi_get_gpu_fan_speed", smi.amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
"""
import functools
from enum import IntEnum
from types import SimpleNamespace


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code):
        AmdSmiException.__init__(self, err_code)
        self.err_code = abs(err_code)

    def get_error_code(self):
        return self.err_code

    def __str__(self):
        return "Error code:\n\t%d | AMDSMI error" % self.err_code


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4


amdsmi_wrapper = SimpleNamespace(AMDSMI_STATUS_SUCCESS=0, AMDSMI_STATUS_NOT_SUPPORTED=2,
                                 AMDSMI_STATUS_NO_PERM=10, AMDSMI_STATUS_INIT_ERROR=18,
                                 AMDSMI_STATUS_DRM_ERROR=6)


class FakeAmdGpu:
    """One scripted AMD GPU (an MI300X unless told otherwise); also its handle."""

    def __init__(self, index, uuid=None, bdf=None):
        self.index = index
        self.uuid = uuid or "1fff74a1-0000-1000-80%02d-c5d3c7cbe8a1" % index
        self.bdf = bdf or "0000:%02x:00.0" % (0x0c + index)
        self.values = {
            "activity": {"gfx_activity": 42, "umc_activity": 17, "mm_activity": "N/A"},
            "vram_total": 206141652992, "vram_used": 294133760,
            "power": {"socket_power": 134, "current_socket_power": 134, "average_socket_power": "N/A",
                      "gfx_voltage": "N/A", "soc_voltage": "N/A", "mem_voltage": "N/A", "power_limit": 750000000},
            "power_cap": {"power_cap": 750000000, "default_power_cap": 750000000, "dpm_cap": 0,
                          "min_power_cap": 0, "max_power_cap": 750000000},
            "energy": {"energy_accumulator": 1000000, "counter_resolution": 15.259, "timestamp": 0},
            "temp": {0: "unsupported", 1: 41, 2: 35},  # edge (not on MI300), hotspot, vram
            "fan": "unsupported", "fan_max": "unsupported",
            "clock": {0: {"clk": 132, "min_clk": 500, "max_clk": 2100, "clk_locked": False, "clk_deep_sleep": 1},
                      4: {"clk": 900, "min_clk": 900, "max_clk": 1300, "clk_locked": False, "clk_deep_sleep": 0}},
            "pcie": {"pcie_static": {"max_pcie_width": 16, "max_pcie_speed": 32000},
                     "pcie_metric": {"pcie_width": 16, "pcie_speed": 32000, "pcie_bandwidth": 0,
                                     "pcie_replay_count": 3, "pcie_l0_to_recovery_count": 0}},
            "ecc": {"correctable_count": 0, "uncorrectable_count": 0, "deferred_count": 0},
            "asic": {"market_name": "AMD Instinct MI300X", "vendor_id": "0x1002", "target_graphics_version": "gfx942",
                     "device_id": "0x74a1"},
            "driver": {"driver_name": "amdgpu", "driver_version": "6.10.5", "driver_date": "N/A"},
        }


def api(func):
    name = func.__name__

    @functools.wraps(func)
    def wrapper(self, *args):
        self.calls.append((name, args))
        if not self.initialized and name != "amdsmi_init":
            raise AmdSmiLibraryException(32)  # AMDSMI_STATUS_NOT_INIT
        gpu = next((a for a in args if isinstance(a, FakeAmdGpu)), None)
        code = self._failures.get((name, gpu.index if gpu is not None else None), self._failures.get((name, "*")))
        if code is not None:
            raise AmdSmiLibraryException(code)
        out = func(self, *args)
        if out == "unsupported":
            raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
        return out

    return wrapper


class FakeAmdSmi:
    """Module-like: pass an instance wherever `amdsmi` is expected."""

    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiInitFlags = AmdSmiInitFlags
    AmdSmiMemoryType = AmdSmiMemoryType
    AmdSmiTemperatureType = AmdSmiTemperatureType
    AmdSmiTemperatureMetric = AmdSmiTemperatureMetric
    AmdSmiClkType = AmdSmiClkType
    amdsmi_wrapper = amdsmi_wrapper

    def __init__(self, gpus, init_error=None):
        self.gpus = list(gpus)
        self.init_error = init_error
        self.initialized = False
        self.shutdown_count = 0
        self.calls = []
        self._failures = {}

    def fail(self, fn, code, gpu="*"):
        self._failures[(fn, gpu)] = code

    def count(self, fn):
        return sum(1 for name, _ in self.calls if name == fn)

    @api
    def amdsmi_init(self, flag=AmdSmiInitFlags.INIT_AMD_GPUS):
        if self.init_error is not None:
            raise AmdSmiLibraryException(self.init_error)
        self.initialized = True

    @api
    def amdsmi_shut_down(self):
        self.shutdown_count += 1
        self.initialized = False

    @api
    def amdsmi_get_processor_handles(self):
        return list(self.gpus)

    @api
    def amdsmi_get_gpu_device_uuid(self, processor_handle):
        return processor_handle.uuid

    @api
    def amdsmi_get_gpu_device_bdf(self, processor_handle):
        return processor_handle.bdf

    @api
    def amdsmi_get_gpu_asic_info(self, processor_handle):
        return dict(processor_handle.values["asic"])

    @api
    def amdsmi_get_gpu_driver_info(self, processor_handle):
        return dict(processor_handle.values["driver"])

    @api
    def amdsmi_get_gpu_memory_total(self, processor_handle, mem_type):
        return processor_handle.values["vram_total"]

    @api
    def amdsmi_get_gpu_memory_usage(self, processor_handle, mem_type):
        return processor_handle.values["vram_used"]

    @api
    def amdsmi_get_gpu_activity(self, processor_handle):
        return dict(processor_handle.values["activity"])

    @api
    def amdsmi_get_power_info(self, processor_handle):
        return dict(processor_handle.values["power"])

    @api
    def amdsmi_get_power_cap_info(self, processor_handle):
        return dict(processor_handle.values["power_cap"])

    @api
    def amdsmi_get_energy_count(self, processor_handle):
        return dict(processor_handle.values["energy"])

    @api
    def amdsmi_get_temp_metric(self, processor_handle, sensor_type, metric):
        return processor_handle.values["temp"][int(sensor_type)]

    @api
    def amdsmi_get_gpu_fan_speed(self, processor_handle, sensor_idx):
        return processor_handle.values["fan"]

    @api
    def amdsmi_get_gpu_fan_speed_max(self, processor_handle, sensor_idx):
        return processor_handle.values["fan_max"]

    @api
    def amdsmi_get_clock_info(self, processor_handle, clock_type):
        return dict(processor_handle.values["clock"][int(clock_type)])

    @api
    def amdsmi_get_pcie_info(self, processor_handle):
        v = processor_handle.values["pcie"]
        return {"pcie_static": dict(v["pcie_static"]), "pcie_metric": dict(v["pcie_metric"])}

    @api
    def amdsmi_get_gpu_total_ecc_count(self, processor_handle):
        return dict(processor_handle.values["ecc"])


FUNCTIONS = sorted(n for n, v in vars(FakeAmdSmi).items() if n.startswith("amdsmi_") and callable(v))
