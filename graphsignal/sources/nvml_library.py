"""The one door to NVML (the `pynvml` module of nvidia-ml-py): every NVML
call of graphsignal.sources.nvml and gpm.py goes through `Nvml.call`.

It guards the telemetry against the driver and the library: NVML is
initialized lazily (and again when someone shut it down under us), shut
down at exit; a call it cannot answer ("not supported", no permission, a
function this version lacks) is None (null in /signals, never 0) and not
asked again; each failing function is said once per device; a lost GPU is
DeviceLost, a missing library or driver one clear line (NvmlUnavailable).
"""
import ctypes
import importlib
import logging
from typing import Any, Callable, Hashable, Optional, Tuple, Union

from graphsignal.sources.gpu import BackendUnavailable, DeviceLost
from graphsignal.sources.vendor import VendorLibrary

logger = logging.getLogger("graphsignal")

SAMPLES_CAP = 128  # samples per nvmlDeviceGetSamples read (the driver keeps fewer per type)

# nvmlValue_t member per NVML_VALUE_TYPE_*
_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def text_of(value: Any) -> Optional[str]:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if value is None else str(value)


def sample_value(value_type: Any, value: Any) -> Any:
    """The number in an nvmlValue_t union of the given NVML_VALUE_TYPE."""
    member = _VALUE_MEMBER.get(value_type)
    return getattr(value, member) if member is not None else None


class NvmlUnavailable(BackendUnavailable):
    pass


class Nvml(VendorLibrary):
    """The one door to NVML. `module`: pynvml or a fake with the same names
    (None imports pynvml on first use); `on_error(message)`: called once per
    unexpected failure so it shows in `errors` (the shared rules:
    graphsignal.sources.vendor)."""

    label = "NVML"
    module_label = "nvidia-ml-py"

    def __init__(self, module: Any = None, on_error: Optional[Callable[[str], None]] = None) -> None:
        VendorLibrary.__init__(self, on_error)
        self._module = module

    # -- lifecycle -----------------------------------------------------------
    @property
    def nv(self) -> Any:
        if self._module is None:
            try:
                self._module = importlib.import_module("pynvml")
            except ImportError:
                raise NvmlUnavailable("NVML unavailable: the nvidia-ml-py package is not installed "
                                      "(pip install nvidia-ml-py); no NVIDIA GPU telemetry")
        return self._module

    def _open(self) -> None:
        nv = self.nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            raise NvmlUnavailable(self._init_line(nv, e),
                                  absent=getattr(e, "value", None) == nv.NVML_ERROR_LIBRARY_NOT_FOUND)

    @staticmethod
    def _init_line(nv: Any, e: Exception) -> str:
        code = getattr(e, "value", None)
        hint = {
            nv.NVML_ERROR_LIBRARY_NOT_FOUND: "no NVIDIA driver here (libnvidia-ml.so.1 not found)",
            nv.NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA driver is not loaded",
            nv.NVML_ERROR_NO_PERMISSION: "no permission to open the NVIDIA driver",
            nv.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "NVIDIA driver and library versions differ "
                                                   "(reload the driver or reboot)",
        }.get(code)
        return "%s; no NVIDIA GPU telemetry" % (hint or "NVML init failed: %s" % e)

    def _close(self) -> None:
        nv = self._module
        try:
            nv.nvmlShutdown()
        except nv.NVMLError as e:
            logger.debug("graphsignal: nvmlShutdown: %s", e)

    # -- the door ------------------------------------------------------------
    def call(self, fn: Union[str, Callable[..., Any]], *args: Any, device: Optional[int] = None, variant: Any = None,
             expect: Tuple[Any, ...] = (), default: Any = None) -> Any:
        """nv.<fn>(*args), or `default` when NVML cannot answer.

        device: the device index (for logging and the lost-GPU rule);
        variant: what tells apart calls of one function on one device
        (default: its plain-valued arguments); expect: NVML error codes
        the caller handles itself (re-raised as the library's NVMLError).
        Raises DeviceLost when the GPU is gone, NvmlUnavailable when NVML
        cannot be initialized."""
        func: Optional[Callable[..., Any]] = None
        if callable(fn):  # our own binding of an NVML function (see one_call_samples)
            func, fn = fn, fn.__name__
        if variant is None:
            # handles are not part of the key (the device is); plain
            # arguments (clock type, counter, ...) are
            variant = tuple(a for a in args if isinstance(a, (int, str, bytes, float)))
        key = (fn, device, variant)
        if not self.ask(key):
            return default
        nv = self._module
        if func is None:
            func = getattr(nv, fn, None)
        if func is None:
            self.missing(fn, key)
            return default
        try:
            return func(*args)
        except nv.NVMLError as e:
            code = getattr(e, "value", None)
            if code in expect:
                raise
            if code == nv.NVML_ERROR_UNINITIALIZED:
                # Someone shut NVML down under us (it is refcounted per
                # process): initialize again and retry once.
                self._ready = False
                self.init()
                try:
                    return func(*args)
                except nv.NVMLError as e2:
                    e, code = e2, getattr(e2, "value", None)
            return self._failed(nv, fn, device, key, e, code, default)

    def _failed(self, nv: Any, fn: str, device: Optional[int], key: Hashable, e: Exception, code: Any,
                default: Any) -> Any:
        where = "GPU %s" % device if device is not None else "the system"
        if code in (nv.NVML_ERROR_GPU_IS_LOST, nv.NVML_ERROR_RESET_REQUIRED) and device is not None:
            raise DeviceLost("NVML %s: %s" % (fn, e))
        if code == nv.NVML_ERROR_NOT_SUPPORTED:
            self.not_supported(fn, device, where, key)
            return default
        if code in (nv.NVML_ERROR_FUNCTION_NOT_FOUND, nv.NVML_ERROR_NO_PERMISSION):
            self.give_up(key)
        self.failed(fn, device, where, e)
        return default


def one_call_samples(nv: Any) -> Optional[Callable[[Any, int, int], Any]]:
    """nvmlDeviceGetSamples as one driver call into a preallocated buffer.
    pynvml's wrapper makes two (the first only sizes the buffer), and this
    call is the telemetry cycle's costliest. None where the module is not
    pynvml (e.g. a test fake): callers then use nv.nvmlDeviceGetSamples."""
    getfp = getattr(nv, "_nvmlGetFunctionPointer", None)
    sample_t = getattr(nv, "c_nvmlSample_t", None)
    check = getattr(nv, "_nvmlCheckReturn", None)
    if getfp is None or sample_t is None or check is None:
        return None

    def nvmlDeviceGetSamples(handle: Any, sampling_type: int, last_seen: int) -> Any:
        fn = getfp("nvmlDeviceGetSamples")
        count = ctypes.c_uint(SAMPLES_CAP)
        vtype = ctypes.c_uint(0)
        buf = (sample_t * SAMPLES_CAP)()
        ret = fn(handle, ctypes.c_uint(sampling_type), ctypes.c_ulonglong(last_seen), ctypes.byref(vtype),
                 ctypes.byref(count), buf)
        if ret == getattr(nv, "NVML_ERROR_INSUFFICIENT_SIZE", -1):
            return nv.nvmlDeviceGetSamples(handle, sampling_type, last_seen)
        check(ret)
        return vtype.value, buf[:count.value]

    return nvmlDeviceGetSamples
