"""AMD GPU telemetry through AMD SMI (the `amdsmi` package of ROCm), under
the same metric names as NVML (see gpu.py).

Only used when `import amdsmi` works; without it nothing happens. Fields
AMD SMI has no counterpart for stay null: clock throttle reasons,
performance state, reserved memory, XID events (AMD has none), and PCIe
throughput (the driver measures it by sleeping a full second per call,
which a 1 s telemetry loop cannot afford).
"""
import importlib
import logging
import time
from typing import Any, Callable, Dict, List, Optional, Union

from graphsignal.sources.gpu import Backend, BackendUnavailable, Device, Reading
from graphsignal.sources.twins import BusyTime
from graphsignal.sources.vendor import VendorLibrary

logger = logging.getLogger("graphsignal")

STATUS_NOT_SUPPORTED = 2  # AMDSMI_STATUS_NOT_SUPPORTED (amdsmi.h); the module's own value is preferred
STATUS_NO_PERM = 10  # AMDSMI_STATUS_NO_PERM

# PCIe transfer rate (MT/s, as AMD SMI reports it) -> generation
PCIE_GENERATIONS: Dict[float, int] = {2500: 1, 5000: 2, 8000: 3, 16000: 4, 32000: 5, 64000: 6}


def load_module() -> Any:
    """The amdsmi module, or None when it is not installed or cannot load
    its library (its import opens libamd_smi.so)."""
    try:
        return importlib.import_module("amdsmi")
    except ImportError:
        return None
    except OSError as e:  # the package is there, its native library is not
        logger.info("graphsignal: amdsmi is installed but cannot load its library (%s); no AMD GPU telemetry", e)
        return None
    except Exception as e:  # a broken install must not cost the other sources
        logger.warning("graphsignal: amdsmi failed to import (%s: %s); no AMD GPU telemetry", type(e).__name__, e)
        return None


def _num(value: Any) -> Optional[Union[int, float]]:
    """A number AMD SMI returned, or None for its "N/A" and sentinels."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value < 0 or value in (0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF):
        return None
    return value


class AmdSmi(VendorLibrary):
    """The one door to AMD SMI: lazy init, shutdown at exit, "not
    supported" -> None without asking again, each failure logged once per
    (function, device) (graphsignal.sources.vendor). `module`: amdsmi or a
    fake with the same names."""

    label = "AMD SMI"
    module_label = "amdsmi"

    def __init__(self, module: Any, on_error: Optional[Callable[[str], None]] = None) -> None:
        VendorLibrary.__init__(self, on_error)
        self.mod = module
        wrapper = getattr(module, "amdsmi_wrapper", None)
        self._not_supported = getattr(wrapper, "AMDSMI_STATUS_NOT_SUPPORTED", STATUS_NOT_SUPPORTED)
        self._no_perm = getattr(wrapper, "AMDSMI_STATUS_NO_PERM", STATUS_NO_PERM)

    def _open(self) -> None:
        mod = self.mod
        try:
            mod.amdsmi_init(mod.AmdSmiInitFlags.INIT_AMD_GPUS)
        except mod.AmdSmiException as e:
            raise BackendUnavailable("AMD SMI init failed: %s; no AMD GPU telemetry" % _one_line(e))

    def _close(self) -> None:
        try:
            self.mod.amdsmi_shut_down()
        except self.mod.AmdSmiException as e:
            logger.debug("graphsignal: amdsmi_shut_down: %s", _one_line(e))

    def call(self, fn: str, *args: Any, device: Optional[int] = None, variant: Any = None, default: Any = None) -> Any:
        """amdsmi.<fn>(*args), or `default` when AMD SMI cannot answer."""
        if variant is None:
            variant = tuple(a for a in args[1:] if isinstance(a, (int, str)))
        key = (fn, device, variant)
        if not self.ask(key):
            return default
        mod = self.mod
        func = getattr(mod, fn, None)
        if func is None:
            self.missing(fn, key)
            return default
        where = "GPU %s" % device
        try:
            return func(*args)
        except mod.AmdSmiLibraryException as e:
            code = e.get_error_code()
            if code == self._not_supported:
                self.not_supported(fn, device, where, key)
                return default
            if code == self._no_perm:
                self.give_up(key)
            self.failed(fn, device, where, _one_line(e))
            return default
        except mod.AmdSmiException as e:  # parameter errors and the like
            self.failed(fn, device, where, _one_line(e))
            return default


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


class AmdSmiBackend(Backend):
    vendor = "amd"
    # ROCR's list narrows what HIP sees; HIP also honours CUDA_VISIBLE_DEVICES.
    visible_env = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")

    def __init__(self, smi: AmdSmi, clock: Callable[[], float] = time.monotonic) -> None:
        self.smi = smi
        self.clock = clock  # monotonic seconds (busy time)

    def open(self) -> List[Device]:
        self.smi.init()
        call = self.smi.call
        handles = call("amdsmi_get_processor_handles") or []
        devices = []
        for i, h in enumerate(handles):
            uuid = call("amdsmi_get_gpu_device_uuid", h, device=i)
            bdf = call("amdsmi_get_gpu_device_bdf", h, device=i)
            d = Device(i, uuid, bdf, h)
            d.attributes["vendor"] = "amd"
            devices.append(d)
        return devices

    def prepare(self, d: Device) -> None:
        call, mod, h, k = self.smi.call, self.smi.mod, d.handle, d.index
        asic = call("amdsmi_get_gpu_asic_info", h, device=k) or {}
        driver = call("amdsmi_get_gpu_driver_info", h, device=k) or {}
        total = _num(call("amdsmi_get_gpu_memory_total", h, mod.AmdSmiMemoryType.VRAM, device=k))
        attrs = {
            "device.name": asic.get("market_name"),
            "architecture": asic.get("target_graphics_version"),
            "driver_version": driver.get("driver_version"),
            "mem_total": total,
        }
        d.attributes.update({a: str(v) for a, v in attrs.items() if v not in (None, "N/A", "")})
        d.state["fan_max"] = _num(call("amdsmi_get_gpu_fan_speed_max", h, 0, device=k))

    def read(self, d: Device, r: Reading) -> None:
        call, mod, h, k = self.smi.call, self.smi.mod, d.handle, d.index
        act = call("amdsmi_get_gpu_activity", h, device=k) or {}
        util = _pct(act.get("gfx_activity"))
        r.gauge("gpu_utilization_percent", util)
        # AMD SMI has no timestamped samples: each reading stands for the
        # time since the one before
        busy = d.state.setdefault("busy", BusyTime())
        busy.reading(util, self.clock())
        r.counter("gpu_busy_time_nanoseconds", busy.ns)
        r.gauge("gpu_memory_busy_percent", _pct(act.get("umc_activity")))

        vram = mod.AmdSmiMemoryType.VRAM
        total = _num(call("amdsmi_get_gpu_memory_total", h, vram, device=k))
        used = _num(call("amdsmi_get_gpu_memory_usage", h, vram, device=k))
        r.gauge("gpu_memory_total_bytes", total)
        r.gauge("gpu_memory_used_bytes", used)
        r.gauge("gpu_memory_free_bytes", total - used if total is not None and used is not None else None)
        r.gauge("gpu_memory_reserved_bytes", None)

        power = call("amdsmi_get_power_info", h, device=k) or {}
        watts = None
        for name in ("socket_power", "current_socket_power", "average_socket_power"):
            watts = _num(power.get(name))
            if watts:
                break
        r.gauge("gpu_power_usage_watts", float(watts) if watts is not None else None)
        cap = _num((call("amdsmi_get_power_cap_info", h, device=k) or {}).get("power_cap"))
        r.gauge("gpu_power_management_limit_watts", cap / 1e6 if cap is not None else None)  # microwatts
        energy = call("amdsmi_get_energy_count", h, device=k) or {}
        acc, res = _num(energy.get("energy_accumulator")), _num(energy.get("counter_resolution"))
        r.counter("gpu_energy_consumed_joules", acc * res / 1e6 if acc is not None and res is not None else None)

        tt, cur = mod.AmdSmiTemperatureType, mod.AmdSmiTemperatureMetric.CURRENT
        temp = _num(call("amdsmi_get_temp_metric", h, tt.HOTSPOT, cur, device=k))
        if temp is None:
            temp = _num(call("amdsmi_get_temp_metric", h, tt.EDGE, cur, device=k))
        r.gauge("gpu_temperature_celsius", temp)
        r.gauge("gpu_memory_temperature_celsius", _num(call("amdsmi_get_temp_metric", h, tt.VRAM, cur, device=k)))
        fan, fan_max = _num(call("amdsmi_get_gpu_fan_speed", h, 0, device=k)), d.state.get("fan_max")
        r.gauge("gpu_fan_speed_percent", round(100.0 * fan / fan_max, 1) if fan is not None and fan_max else None)

        gfx = call("amdsmi_get_clock_info", h, mod.AmdSmiClkType.GFX, device=k) or {}
        mem = call("amdsmi_get_clock_info", h, mod.AmdSmiClkType.MEM, device=k) or {}
        r.gauge("gpu_clock_sm_megahertz", _num(gfx.get("clk")))
        r.gauge("gpu_clock_mem_megahertz", _num(mem.get("clk")))
        r.gauge("gpu_max_clock_sm_megahertz", _num(gfx.get("max_clk")))
        r.gauge("gpu_max_clock_mem_megahertz", _num(mem.get("max_clk")))
        r.gauge("gpu_clocks_throttle_reasons", None)
        r.gauge("gpu_performance_state", None)

        pcie = (call("amdsmi_get_pcie_info", h, device=k) or {}).get("pcie_metric") or {}
        speed = _num(pcie.get("pcie_speed"))
        r.gauge("gpu_pcie_link_generation", PCIE_GENERATIONS.get(speed) if speed is not None else None)
        r.gauge("gpu_pcie_link_width", _num(pcie.get("pcie_width")))
        r.gauge("gpu_pcie_throughput_tx_kilobytes_per_second", None)
        r.gauge("gpu_pcie_throughput_rx_kilobytes_per_second", None)
        r.counter("gpu_pcie_replay_counter", _num(pcie.get("pcie_replay_count")))

        ecc = call("amdsmi_get_gpu_total_ecc_count", h, device=k) or {}
        r.counter("gpu_ecc_errors", _num(ecc.get("correctable_count")), {"kind": "corrected"})
        r.counter("gpu_ecc_errors", _num(ecc.get("uncorrectable_count")), {"kind": "uncorrected"})

    def close(self) -> None:
        self.smi.shutdown()


def _pct(value: Any) -> Optional[float]:
    v = _num(value)
    return float(v) if v is not None and v <= 100 else None
