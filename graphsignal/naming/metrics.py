"""One table of metric metadata: what each /signals metric is called in
Prometheus (/metrics) and in OTLP, its unit, type and a sentence a person
reads. /metrics' names and HELP lines and the metric list of
graphsignal/reference/metrics.md (scripts/gen_metric_docs.py) are made
from it, so they cannot drift.

/signals keeps its own names (its contract is SKILL.md's); the
exposition follows Prometheus's naming rules:

- the `graphsignal_` prefix, base units (`_seconds`, `_bytes`, `_hertz`,
  `_bytes_per_second`, `_joules`, `_watts`, `_celsius`), `_ratio` for
  fractions 0..1, `_total` only on counters;
- the workload's process metrics under client_python's names and units
  (`graphsignal_process_cpu_seconds_total`,
  `graphsignal_process_resident_memory_bytes`) with a `pid` label: they
  describe the workload, not the exporter;
- gauges that PromQL derives from a counter with rate() (a process's CPU
  percent: rate(graphsignal_process_cpu_seconds_total)) are left out;
- GPU labels that join with DCGM exporter's series: `gpu` (the NVML
  index), `UUID`, `pci_bus_id`, plus `model_name` and `Hostname` on the GPU
  telemetry, and a `graphsignal_gpu_info` series per GPU.

Names not in the table (probes, engines' own metrics) follow the generic
rules of prometheus_name().
"""
from typing import Dict, List, NamedTuple, Optional, Tuple

PREFIX = "graphsignal_"


class Meta(NamedTuple):
    """One /signals metric. prom: the Prometheus family name (a counter's
    without `_total`, a profile's time family without it too); None: not
    exported. scale: multiply a stored value by this for the exported
    unit. unit: the Prometheus unit word (OpenMetrics UNIT; the family
    name ends in it), "" for none. ucum: the UCUM unit of the value as
    /signals stores it (what OTLP sends). samples: a profile's
    second family (its samples), without `_total`."""
    name: str
    type: str
    prom: Optional[str]
    unit: str
    ucum: str
    scale: float
    help: str
    samples: Optional[str] = None
    samples_help: Optional[str] = None
    tags: str = ""  # the /signals tags, for the docs
    otlp: str = ""  # the OTLP name where the derived one would mislead ("" = derived: otlp_family())
    otlp_unit: str = ""  # the OTLP unit where the stored UCUM's conversion would mislead ("" = converted)
    otlp_scale: float = 0.0  # with otlp_unit: stored value x this = the OTLP value
    own: bool = False  # the profiler's own series (about itself, not the workload)


NS = 1e-9
_GPU_TAGS = "device.uuid, device.bus_id, device.index"
_CUPTI_TAGS = "process.pid, device.uuid, device.cuda_index"
_GPM_TAGS = _GPU_TAGS + ", device.gpu_instance_id (MIG)"


def _m(name: str, type_: str, prom: Optional[str], unit: str, ucum: str, scale: float, help_: str,
       count: Optional[str] = None, count_help: Optional[str] = None, tags: str = "", otlp: str = "",
       otlp_unit: str = "", otlp_scale: float = 0.0, own: bool = False) -> Meta:
    return Meta(name, type_, None if prom is None else PREFIX + prom, unit, ucum, scale, help_,
                None if count is None else PREFIX + count, count_help, tags, otlp, otlp_unit, otlp_scale, own)


def _own(name: str, prom: str, unit: str, ucum: str, help_: str, tags: str = "", otlp: str = "") -> Meta:
    """A counter about the profiler itself."""
    return _m(name, "counter", prom, unit, ucum, 1, help_, tags=tags, otlp=otlp, own=True)


def _gpu_activity(api: str, label: str) -> List[Meta]:
    """The GPU activity families (CUPTI's: api "cuda")."""
    t = _CUPTI_TAGS
    return [
        _m(api + "_kernels_nanoseconds", "profile", api + "_kernels_seconds", "seconds", "ns", NS,
           "GPU time of %s kernels, per kernel (frame: the symbol; kernel: its display name; category: the "
           "kind of work)" % label,
           api + "_kernel_launches", "%s kernels run, per kernel" % label, t),
        _m(api + "_graphs_nanoseconds", "profile", api + "_graphs_seconds", "seconds", "ns", NS,
           "GPU time of %s graph replays, per graph (frame: what the graph does)" % label,
           api + "_graph_launches", "%s graph replays, per graph" % label, t),
        _m(api + "_graph_captures", "counter", api + "_graph_captures", "", "{capture}", 1,
           "Graph instantiations and in-place updates behind a graph frame (label graph)", tags=t + ", graph"),
        _m(api + "_memcpy_nanoseconds", "profile", api + "_memcpy_seconds", "seconds", "ns", NS,
           "GPU time of %s memory copies, per copy kind (estimated where duration=\"sampled\")" % label,
           api + "_memcpy_calls", "%s memory copies, per copy kind" % label, t + ", host_memory, duration"),
        _m(api + "_memcpy_bytes", "counter", api + "_memcpy_bytes", "bytes", "By", 1,
           "Bytes moved by %s memory copies (label kind)" % label, tags=t + ", kind, host_memory, duration",
           otlp="graphsignal.%s_memcpy_size" % api),  # graphsignal.cuda_memcpy is the copies' time
        _m(api + "_memset_nanoseconds", "profile", api + "_memset_seconds", "seconds", "ns", NS,
           "GPU time of %s memsets (not measured where duration=\"sampled\")" % label,
           api + "_memset_calls", "%s memsets" % label, t + ", duration"),
        _m(api + "_memset_bytes", "counter", api + "_memset_bytes", "bytes", "By", 1,
           "Bytes set by %s memsets" % label, tags=t + ", kind, duration", otlp="graphsignal.%s_memset_size" % api),
        _m(api + "_sync_nanoseconds", "profile", api + "_sync_seconds", "seconds", "ns", NS,
           "Host time blocked in %s synchronization, per kind (context, stream, event, stream_wait_event)" % label,
           api + "_sync_calls", "%s synchronization calls, per kind" % label, t),
    ]


# --cuda-trace light: the CUDA driver interposer counts without timing; its count
# profiles export under the CUPTI collection's call families (a value per frame, the
# calls; no second family), so a panel of launch or copy counts reads either
_LIGHT = "--cuda-trace light: counted, not timed"
_LIGHT_TABLE: List[Meta] = [
    _m("cuda_kernel_launches", "profile", "cuda_kernel_launches", "", "{launch}", 1,
       "CUDA kernels launched, per kernel (%s; frame: the symbol)" % _LIGHT, tags=_CUPTI_TAGS),
    _m("cuda_memcpy_calls", "profile", "cuda_memcpy_calls", "", "{call}", 1,
       "CUDA memory copies, per copy kind (%s)" % _LIGHT, tags=_CUPTI_TAGS + ", host_memory"),
    _m("cuda_memset_calls", "profile", "cuda_memset_calls", "", "{call}", 1,
       "CUDA memsets (%s)" % _LIGHT, tags=_CUPTI_TAGS),
    _m("cuda_graph_timed_replays", "counter", "cuda_graph_timed_replays", "", "{replay}", 1,
       "CUDA graph replays timed by event pairs, behind cuda_graphs_nanoseconds{duration=\"sampled\"}'s estimate "
       "(--cuda-trace light)", tags=_CUPTI_TAGS),
]

_TABLE: List[Meta] = _gpu_activity("cuda", "CUDA") + _LIGHT_TABLE + [
    _m("cuda_graph_trace_mode", "gauge", "cuda_graph_trace_mode", "", "1", 1,
       "How CUDA graphs are traced: 0 = per graph, 1 = per node kernel", tags="process.pid"),
    _m("nvtx_ranges_nanoseconds", "profile", "nvtx_ranges_seconds", "seconds", "ns", NS,
       "Host wall time inside NVTX ranges, per nesting path (frame)",
       "nvtx_ranges", "NVTX ranges closed, per nesting path", "process.pid, nvtx.domain"),
    _m("nvtx_range_gpu_nanoseconds", "profile", "nvtx_range_gpu_seconds", "seconds", "ns", NS,
       "GPU time of kernels launched inside NVTX ranges, per nesting path (frame)",
       "nvtx_range_kernels", "Kernels launched inside NVTX ranges, per nesting path", "process.pid, nvtx.domain"),
    _m("nvtx_marks", "counter", "nvtx_marks", "", "{mark}", 1, "NVTX marks", tags="process.pid, nvtx.domain"),
    # GPU telemetry (NVML, AMD SMI)
    _m("gpu_utilization_percent", "gauge", "gpu_utilization_ratio", "ratio", "%", 0.01,
       "Share of the last sample period in which a kernel ran on the GPU (0-1)", tags=_GPU_TAGS),
    _m("gpu_busy_time_nanoseconds", "counter", "gpu_busy_seconds", "seconds", "ns", NS,
       "Time a kernel was running on the GPU, integrated from the driver's utilization samples", tags=_GPU_TAGS),
    _m("gpu_memory_busy_percent", "gauge", "gpu_memory_busy_ratio", "ratio", "%", 0.01,
       "Share of the last sample period in which device memory was read or written (0-1)", tags=_GPU_TAGS),
    # the GPU's own activity counters (NVML GPM, Hopper and newer; graphsignal.sources.gpm): each the
    # DCGM profiling field it corresponds to; on a GPU in MIG mode also per GPU instance
    _m("gpu_gr_engine_active_percent", "gauge", "gpu_gr_engine_active_ratio", "ratio", "%", 0.01,
       "Share of the time since the last poll in which the graphics/compute engine was busy (0-1; "
       "DCGM_FI_PROF_GR_ENGINE_ACTIVE)", tags=_GPM_TAGS),
    _m("gpu_sm_active_percent", "gauge", "gpu_sm_active_ratio", "ratio", "%", 0.01,
       "Share of the time since the last poll in which an SM had at least one warp resident, averaged over "
       "the SMs (0-1; DCGM_FI_PROF_SM_ACTIVE)", tags=_GPM_TAGS),
    _m("gpu_sm_occupancy_percent", "gauge", "gpu_sm_occupancy_ratio", "ratio", "%", 0.01,
       "Warps resident on the SMs as a share of the most they hold, since the last poll (0-1; "
       "DCGM_FI_PROF_SM_OCCUPANCY)", tags=_GPM_TAGS),
    _m("gpu_tensor_active_percent", "gauge", "gpu_tensor_active_ratio", "ratio", "%", 0.01,
       "Share of the time since the last poll in which the tensor pipes were busy, any precision (0-1; "
       "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)", tags=_GPM_TAGS),
    _m("gpu_dram_active_percent", "gauge", "gpu_dram_active_ratio", "ratio", "%", 0.01,
       "Device memory bandwidth used as a share of its peak, since the last poll (0-1; "
       "DCGM_FI_PROF_DRAM_ACTIVE)", tags=_GPM_TAGS),
    _m("gpu_fp64_active_percent", "gauge", "gpu_fp64_active_ratio", "ratio", "%", 0.01,
       "Share of the time since the last poll in which the FP64 pipes were busy, tensor math aside (0-1; "
       "DCGM_FI_PROF_PIPE_FP64_ACTIVE)", tags=_GPM_TAGS),
    _m("gpu_fp32_active_percent", "gauge", "gpu_fp32_active_ratio", "ratio", "%", 0.01,
       "Share of the time since the last poll in which the FP32 pipes were busy, tensor math aside (0-1; "
       "DCGM_FI_PROF_PIPE_FP32_ACTIVE)", tags=_GPM_TAGS),
    _m("gpu_fp16_active_percent", "gauge", "gpu_fp16_active_ratio", "ratio", "%", 0.01,
       "Share of the time since the last poll in which the FP16 pipes were busy, tensor math aside (0-1; "
       "DCGM_FI_PROF_PIPE_FP16_ACTIVE)", tags=_GPM_TAGS),
    _m("gpu_memory_used_bytes", "gauge", "gpu_memory_used_bytes", "bytes", "By", 1,
       "Device memory in use", tags=_GPU_TAGS),
    _m("gpu_memory_free_bytes", "gauge", "gpu_memory_free_bytes", "bytes", "By", 1,
       "Device memory free", tags=_GPU_TAGS),
    _m("gpu_memory_total_bytes", "gauge", "gpu_memory_total_bytes", "bytes", "By", 1,
       "Device memory in all", tags=_GPU_TAGS),
    _m("gpu_memory_reserved_bytes", "gauge", "gpu_memory_reserved_bytes", "bytes", "By", 1,
       "Device memory the driver reserves", tags=_GPU_TAGS),
    _m("gpu_power_usage_watts", "gauge", "gpu_power_usage_watts", "watts", "W", 1,
       "Power drawn by the GPU", tags=_GPU_TAGS),
    _m("gpu_power_management_limit_watts", "gauge", "gpu_power_management_limit_watts", "watts", "W", 1,
       "The GPU's power limit", tags=_GPU_TAGS),
    _m("gpu_energy_consumed_joules", "counter", "gpu_energy_consumed_joules", "joules", "J", 1,
       "Energy the GPU consumed since the driver loaded", tags=_GPU_TAGS),
    _m("gpu_temperature_celsius", "gauge", "gpu_temperature_celsius", "celsius", "Cel", 1,
       "GPU die temperature", tags=_GPU_TAGS),
    _m("gpu_memory_temperature_celsius", "gauge", "gpu_memory_temperature_celsius", "celsius", "Cel", 1,
       "Device memory temperature", tags=_GPU_TAGS),
    _m("gpu_fan_speed_percent", "gauge", "gpu_fan_speed_ratio", "ratio", "%", 0.01,
       "Fan speed as a share of its maximum (0-1)", tags=_GPU_TAGS),
    _m("gpu_clock_sm_megahertz", "gauge", "gpu_clock_sm_hertz", "hertz", "MHz", 1e6,
       "Streaming multiprocessor clock", tags=_GPU_TAGS),
    _m("gpu_clock_mem_megahertz", "gauge", "gpu_clock_mem_hertz", "hertz", "MHz", 1e6,
       "Memory clock", tags=_GPU_TAGS),
    _m("gpu_max_clock_sm_megahertz", "gauge", "gpu_max_clock_sm_hertz", "hertz", "MHz", 1e6,
       "Highest streaming multiprocessor clock", tags=_GPU_TAGS),
    _m("gpu_max_clock_mem_megahertz", "gauge", "gpu_max_clock_mem_hertz", "hertz", "MHz", 1e6,
       "Highest memory clock", tags=_GPU_TAGS),
    _m("gpu_clocks_throttle_reasons", "gauge", "gpu_clocks_throttle_reasons", "", "1", 1,
       "NVML's clock throttle reasons, as a bitmask", tags=_GPU_TAGS),
    _m("gpu_clocks_throttle_reason_active", "gauge", "gpu_clocks_throttle_reason_active", "", "1", 1,
       "1 while the clocks are held down for this reason (label reason: sw_power_cap and hw_slowdown are "
       "power-bound, sw_thermal_slowdown and hw_thermal_slowdown heat-bound)", tags=_GPU_TAGS + ", reason"),
    _m("gpu_performance_state", "gauge", "gpu_performance_state", "", "1", 1,
       "Performance state (0 = P0, the fastest)", tags=_GPU_TAGS),
    _m("gpu_pcie_link_generation", "gauge", "gpu_pcie_link_generation", "", "1", 1,
       "Current PCIe link generation", tags=_GPU_TAGS),
    _m("gpu_pcie_link_width", "gauge", "gpu_pcie_link_width", "", "1", 1,
       "Current PCIe link width (lanes)", tags=_GPU_TAGS),
    _m("gpu_pcie_throughput_rx_kilobytes_per_second", "gauge", "gpu_pcie_rx_bytes_per_second",
       "bytes_per_second", "KiBy/s", 1024, "PCIe receive throughput (NVML's KiB/s as bytes)", tags=_GPU_TAGS),
    _m("gpu_pcie_throughput_tx_kilobytes_per_second", "gauge", "gpu_pcie_tx_bytes_per_second",
       "bytes_per_second", "KiBy/s", 1024, "PCIe transmit throughput (NVML's KiB/s as bytes)", tags=_GPU_TAGS),
    _m("gpu_pcie_replay_counter", "counter", "gpu_pcie_replays", "", "{replay}", 1,
       "PCIe replays (link errors the link retried)", tags=_GPU_TAGS),
    _m("gpu_nvlink_active_links", "gauge", "gpu_nvlink_active_links", "", "{link}", 1,
       "NVLink links up", tags=_GPU_TAGS),
    _m("gpu_nvlink_throughput_rx_kilobytes_per_second", "gauge", "gpu_nvlink_rx_bytes_per_second",
       "bytes_per_second", "KiBy/s", 1024, "NVLink receive throughput", tags=_GPU_TAGS),
    _m("gpu_nvlink_throughput_tx_kilobytes_per_second", "gauge", "gpu_nvlink_tx_bytes_per_second",
       "bytes_per_second", "KiBy/s", 1024, "NVLink transmit throughput", tags=_GPU_TAGS),
    _m("gpu_nvlink_rx_bytes", "counter", "gpu_nvlink_rx_bytes", "bytes", "By", 1,
       "Bytes received over NVLink", tags=_GPU_TAGS),
    _m("gpu_nvlink_tx_bytes", "counter", "gpu_nvlink_tx_bytes", "bytes", "By", 1,
       "Bytes sent over NVLink", tags=_GPU_TAGS),
    _m("gpu_nvlink_errors", "counter", "gpu_nvlink_errors", "", "{error}", 1,
       "NVLink errors (label kind)", tags=_GPU_TAGS + ", kind"),
    _m("gpu_ecc_errors", "counter", "gpu_ecc_errors", "", "{error}", 1,
       "ECC memory errors (label kind)", tags=_GPU_TAGS + ", kind"),
    _m("gpu_xid_errors", "counter", "gpu_xid_errors", "", "{error}", 1,
       "XID errors the driver reported (each is also an error entry)", tags=_GPU_TAGS),
    # host and processes
    _m("host_cpu_usage_percent", "gauge", "host_cpu_usage_ratio", "ratio", "%", 0.01,
       "Share of the host's CPU time in use over the last sample period, all its cores together (0-1; "
       "100 % in /signals: every core busy)", otlp="graphsignal.host_cpu_utilization"),
    _m("host_cpu_busy_cores", "gauge", "host_cpu_busy_cores", "", "{cpu}", 1,
       "Busy cores of the host over the last sample period (0 to its core count; 2.5 = two and a half "
       "cores' worth)", otlp="graphsignal.host_cpu_busy"),
    _m("host_memory_usage_bytes", "gauge", "host_memory_used_bytes", "bytes", "By", 1,
       "Host memory in use (total minus available)"),
    _m("host_memory_available_bytes", "gauge", "host_memory_available_bytes", "bytes", "By", 1,
       "Host memory available to new work"),
    _m("host_memory_total_bytes", "gauge", "host_memory_total_bytes", "bytes", "By", 1, "Host memory in all"),
    _m("process_cpu_time_nanoseconds", "counter", "process_cpu_seconds", "seconds", "ns", NS,
       "User and system CPU time of a workload process (label pid), or of its whole tree "
       "(labels root_pid, scope=\"process_tree\")", tags="process.pid | process.root_pid, scope"),
    _m("process_cpu_usage_percent", "gauge", None, "", "%", 0.01,
       "CPU use of a workload process in percent of one core (in /metrics: "
       "rate(graphsignal_process_cpu_seconds_total); on OTLP busy cores)", tags="process.pid",
       otlp="graphsignal.process_cpu_busy", otlp_unit="{cpu}", otlp_scale=0.01),
    _m("process_memory_usage_bytes", "gauge", "process_resident_memory_bytes", "bytes", "By", 1,
       "Resident memory (RSS) of a workload process", tags="process.pid"),
    _m("process_memory_peak_bytes", "gauge", "process_resident_memory_max_bytes", "bytes", "By", 1,
       "The highest resident memory the kernel saw for a workload process (VmHWM)", tags="process.pid"),
    _m("process_memory_virtual_bytes", "gauge", "process_virtual_memory_bytes", "bytes", "By", 1,
       "Virtual memory size of a workload process", tags="process.pid"),
    # the engine's endpoint
    _m("prometheus_scrape_up", "gauge", "prometheus_scrape_up", "", "1", 1,
       "1 when the last scrape of the engine's metrics endpoint succeeded", tags="engine, url"),
    _m("prometheus_scrape_skipped_lines", "gauge", "prometheus_scrape_skipped_lines", "", "{line}", 1,
       "Malformed lines left out of the last scrape of the engine's endpoint", tags="engine, url"),
    _m("prometheus_scrape_timestamp_ns", "gauge", "prometheus_scrape_timestamp_seconds", "seconds", "ns", NS,
       "When the engine's endpoint was last scraped (Unix time)", tags="engine, url"),
    _m("prometheus_scrape_failures_total", "counter", "prometheus_scrape_failures", "", "{failure}", 1,
       "Failed scrapes of the engine's endpoint", tags="engine, url"),
    # the profiler itself
    _own("graphsignal_dropped_records", "dropped_records", "", "{record}",
         "Records lost because a ring was full (should be 0)", tags="process.pid, writer"),
    _own("graphsignal_rejected_records", "rejected_records", "", "{record}",
         "Records a ring sent that make no sense (label reason)", tags="process.pid, writer, reason"),
    _own("graphsignal_skipped_slots", "skipped_slots", "", "{slot}",
         "Ring slots a writer claimed and never filled", tags="process.pid, writer"),
    _own("graphsignal_dropped_names", "dropped_names", "", "{name}",
         "Names a ring could not register (its string table was full)", tags="process.pid, writer"),
    _own("graphsignal_writers_without_ring", "writers_without_ring", "", "{writer}",
         "Writers that run unprofiled because no ring could be made (should be 0)"),
    _own("graphsignal_refused_ring_names", "refused_ring_names", "", "{name}",
         "Ring names held by something that is not a ring of ours (should be 0)"),
    _own("graphsignal_dropped_console_bytes", "dropped_console_bytes", "bytes", "By",
         "Console output passed through but not scanned for errors (should be 0)", tags="stream"),
    _own("console_unscanned_bytes_total", "console_unscanned_bytes", "bytes", "By",
         "Console output left unscanned for errors because it came faster than the scanner keeps up "
         "(label stream)", tags="stream", otlp="graphsignal.console_unscanned"),
    _own("console_errors_dropped_total", "console_errors_dropped", "", "{error}",
         "Errors caught on the console but left out because too many came at once (label stream)",
         tags="stream", otlp="graphsignal.console_errors_dropped"),
    _own("graphsignal_dropped_series", "dropped_series", "", "{series}",
         "Distinct series refused because the series cap was reached"),
    _own("graphsignal_folded_processes", "folded_processes", "", "{process}",
         "Exited processes folded into process.pid=\"exited\""),
    _own("graphsignal_uploads_total", "uploads", "", "{upload}",
         "Uploads to the fleet server (label result: accepted, failed)", tags="result"),
    _own("graphsignal_upload_bytes_total", "upload_bytes", "bytes", "By",
         "Compressed bytes uploaded", otlp="graphsignal.upload_sent"),
    _own("graphsignal_upload_dropped_errors_total", "upload_dropped_errors", "", "{error}",
         "Error entries left out of uploads"),
    _own("graphsignal_otlp_exports_total", "otlp_exports", "", "{export}",
         "OTLP exports (label result: accepted, failed)", tags="result"),
    _own("graphsignal_otlp_export_bytes_total", "otlp_export_bytes", "bytes", "By",
         "Bytes of OTLP export requests sent (after compression)", otlp="graphsignal.otlp_export_sent"),
]

METRICS: Dict[Tuple[str, str], Meta] = {(m.name, m.type): m for m in _TABLE}
BY_NAME: Dict[str, Meta] = {m.name: m for m in _TABLE}

# Series only /metrics has (no /signals name): documented beside the table.
EXTRA = [
    ("graphsignal_gpu_info", "gauge",
     "1 per GPU, labelled gpu (NVML index), UUID, pci_bus_id, model_name, Hostname, driver_version, "
     "cuda_driver_version: join it with any GPU series on UUID or gpu"),
    ("graphsignal_metrics_conflicting_series", "gauge",
     "Series left out of /metrics because their Prometheus name or labels were taken"),
]

# /signals tag -> Prometheus label (others: characters outside
# [a-zA-Z0-9_] as `_`). gpu/UUID/pci_bus_id/GPU_I_ID are DCGM exporter's labels.
TAG_LABELS = {"process.pid": "pid", "process.root_pid": "root_pid", "device.uuid": "UUID",
              "device.index": "gpu", "device.bus_id": "pci_bus_id", "device.cuda_index": "cuda_index",
              "device.gpu_instance_id": "GPU_I_ID"}

# Unit suffixes of names not in the table (probes): (suffix, new suffix,
# scale, Prometheus unit, UCUM).
_SUFFIXES = [
    ("_nanoseconds", "_seconds", NS, "seconds", "ns"),
    ("_ns", "_seconds", NS, "seconds", "ns"),
    ("_microseconds", "_seconds", 1e-6, "seconds", "us"),
    ("_us", "_seconds", 1e-6, "seconds", "us"),
    ("_milliseconds", "_seconds", 1e-3, "seconds", "ms"),
    ("_ms", "_seconds", 1e-3, "seconds", "ms"),
    ("_seconds", "_seconds", 1, "seconds", "s"),
    ("_percent", "_ratio", 0.01, "ratio", "%"),
    ("_ratio", "_ratio", 1, "ratio", "1"),
    ("_megahertz", "_hertz", 1e6, "hertz", "MHz"),
    ("_kilobytes_per_second", "_bytes_per_second", 1024, "bytes_per_second", "KiBy/s"),
    ("_bytes_per_second", "_bytes_per_second", 1, "bytes_per_second", "By/s"),
    ("_kilobytes", "_bytes", 1024, "bytes", "KiBy"),
    ("_bytes", "_bytes", 1, "bytes", "By"),
    ("_watts", "_watts", 1, "watts", "W"),
    ("_joules", "_joules", 1, "joules", "J"),
    ("_celsius", "_celsius", 1, "celsius", "Cel"),
]


def sanitize(text: str) -> str:
    """Characters outside [a-zA-Z0-9_] as `_`."""
    return "".join(ch if ("a" <= ch <= "z" or "A" <= ch <= "Z" or "0" <= ch <= "9" or ch == "_") else "_"
                   for ch in text)


class Family(NamedTuple):
    """How one /signals series is exported: name (a counter's and a
    profile's without `_total`), scale, unit (Prometheus unit word or ""),
    help, and for profiles the samples family's name (without `_total`)
    and help."""
    name: str
    scale: float
    unit: str
    help: str
    samples: Optional[str] = None
    samples_help: Optional[str] = None


_cache: Dict[Tuple[str, str, bool], Optional[Family]] = {}


def prometheus_name(name: str, type_: str, engine: bool = False) -> Optional[Family]:
    """The Family a /signals series (name, type) is exported as; None when
    it is left out. engine: a series scraped from the engine's endpoint
    (its name is the engine's: only prefixed and sanitized)."""
    key = (name, type_, engine)
    if key in _cache:
        return _cache[key]
    fam = _family(name, type_, engine)
    if len(_cache) < 20000:
        _cache[key] = fam
    return fam


def _family(name: str, type_: str, engine: bool) -> Optional[Family]:
    meta = None if engine else METRICS.get((name, type_))
    if meta is not None:
        if meta.prom is None:
            return None
        return Family(meta.prom, meta.scale, meta.unit, meta.help, meta.samples, meta.samples_help)
    base = name
    if type_ == "counter" and base.endswith("_total"):
        base = base[:-6]
    scale, unit = 1.0, ""
    if not engine:
        for suf, new, sc, un, _ in _SUFFIXES:
            if base.endswith(suf) and len(base) > len(suf):
                base, scale, unit = base[:-len(suf)] + new, sc, un
                break
    base = sanitize(base)
    if not base.startswith(PREFIX):
        base = PREFIX + base
    what = "Engine metric" if engine else "Probe metric"
    help_ = "%s %s (%s%s)" % (what, name, type_, ", in %s" % unit if unit and scale != 1 else "")
    if type_ != "profile":
        return Family(base, scale, unit, help_)
    stem = base[:-len(unit) - 1] if unit and base.endswith("_" + unit) else base
    return Family(base, scale, unit, help_ + ": value per frame", stem + "_samples",
                  "%s %s (profile): samples per frame" % (what, name))


def label_of(tag: str) -> str:
    """The Prometheus label name of a /signals tag key."""
    out = TAG_LABELS.get(tag)
    if out is not None:
        return out
    out = sanitize(tag) or "_"
    if out[0].isdigit():
        out = "_" + out
    if out.startswith("__"):  # reserved for Prometheus itself
        out = "tag_" + out
    return out


def ucum(name: str, type_: str) -> str:
    """The OTLP (UCUM) unit of a /signals metric."""
    meta = METRICS.get((name, type_))
    if meta is not None:
        return meta.ucum
    base = name[:-6] if name.endswith("_total") else name
    for suf, _, _, _, u in _SUFFIXES:
        if base.endswith(suf) and len(base) > len(suf):
            return u
    return "1"


OTLP_PREFIX = "graphsignal."

# The stored value's UCUM unit -> (OpenTelemetry's unit, scale to it): the
# semantic conventions ask for seconds for durations, `1` for fractions and
# unprefixed units (By, Hz), so OTLP gets those, rescaled; /signals keeps
# its own (nanoseconds, percent, MHz, KiB/s).
OTLP_UNITS = {"ns": ("s", 1e-9), "us": ("s", 1e-6), "ms": ("s", 1e-3), "%": ("1", 0.01),
              "MHz": ("Hz", 1e6), "KiBy/s": ("By/s", 1024.0), "KiBy": ("By", 1024.0)}
# Suffixes a /signals name loses in its OTLP name (the unit field says it).
_OTLP_STRIP = ("_kilobytes_per_second", "_bytes_per_second", "_nanoseconds", "_microseconds", "_milliseconds",
               "_seconds", "_ns", "_us", "_ms", "_kilobytes", "_bytes", "_watts", "_joules", "_celsius",
               "_megahertz", "_hertz", "_percent", "_ratio")


class OtlpFamily(NamedTuple):
    """How one /signals series is sent over OTLP: name, unit (UCUM, as the
    semantic conventions use it), scale (stored value x scale = sent
    value), and for profiles the samples sum's name and unit."""
    name: str
    unit: str
    scale: float
    samples: str = ""
    samples_unit: str = ""


_otlp_cache: Dict[Tuple[str, str], OtlpFamily] = {}


def otlp_family(name: str, type_: str) -> OtlpFamily:
    """The OtlpFamily of a /signals metric (name, type): the table's
    override, else `graphsignal.` + the name without its unit suffix and a
    counter's `_total`, characters outside [A-Za-z0-9_.-] as `_` (`:` as
    `.`), the stored unit converted by OTLP_UNITS; no unit: `{count}` on a
    counter, "" on a gauge, `1` otherwise."""
    key = (name, type_)
    got = _otlp_cache.get(key)
    if got is None:
        got = _otlp_family(name, type_)
        if len(_otlp_cache) < 20000:
            _otlp_cache[key] = got
    return got


def _otlp_family(name: str, type_: str) -> OtlpFamily:
    meta = METRICS.get((name, type_))
    base = name
    if type_ == "counter" and base.endswith("_total") and len(base) > 6:
        base = base[:-6]
    suffixed = False
    for suf in _OTLP_STRIP:
        if base.endswith(suf) and len(base) > len(suf):
            base, suffixed = base[:-len(suf)], True
            break
    stored = ucum(name, type_)
    if meta is None and not suffixed:  # no unit in the name
        stored = {"counter": "{count}", "gauge": ""}.get(type_, "1")
    unit, scale = OTLP_UNITS.get(stored, (stored, 1.0))
    if meta is not None and meta.otlp_unit:
        unit, scale = meta.otlp_unit, meta.otlp_scale or 1.0
    if meta is not None and meta.otlp:
        out = meta.otlp
    else:
        if base.startswith(PREFIX):
            base = base[len(PREFIX):]
        clean = "".join(ch if (ch.isascii() and (ch.isalnum() or ch in "_.-")) else ("." if ch == ":" else "_")
                        for ch in base)
        out = (OTLP_PREFIX + clean)[:240]
    if type_ != "profile":
        return OtlpFamily(out, unit, scale)
    return OtlpFamily(out, unit, scale, out + ".samples", "{sample}")


def table() -> List[Meta]:
    """Every entry, in the table's order."""
    return list(_TABLE)


BEGIN_MARK = "<!-- metric table: made by scripts/gen_metric_docs.py from graphsignal/naming/metrics.py; edit there -->"
END_MARK = "<!-- end of metric table -->"


def _prom_cell(m: Meta) -> str:
    if m.prom is None:
        return "left out"
    if m.type == "profile":  # a count profile (--cuda-trace light's) has no second family
        return "`%s_total`" % m.prom + (", `%s_total`" % m.samples if m.samples else "")
    if m.type == "counter":
        return "`%s_total`" % m.prom
    return "`%s`" % m.prom


def markdown() -> str:
    """The metric list of graphsignal/reference/metrics.md (graphsignal-run
    --explain metrics): every entry of the table (and the series only
    /metrics has), between BEGIN_MARK and END_MARK."""
    out = [BEGIN_MARK, "",
           "| /signals name | type | tags | /metrics name | unit | what it is |",
           "|---|---|---|---|---|---|"]
    for m in _TABLE:
        unit = m.unit or "-"
        if m.prom is not None and m.scale != 1:
            unit += " (from %s)" % m.ucum if m.ucum not in ("1",) else ""
        out.append("| `%s` | %s | %s | %s | %s | %s |" % (
            m.name, m.type, m.tags.replace("|", "or") or "-", _prom_cell(m), unit, m.help.replace("|", "/")))
    for name, type_, help_ in EXTRA:
        out.append("| - | %s | - | `%s` | - | %s |" % (type_, name, help_))
    out += ["", END_MARK]
    return "\n".join(out)


def replace_in(text: str) -> str:
    """text with the part between the marks made anew (ValueError when the
    marks are missing)."""
    a = text.index(BEGIN_MARK)
    b = text.index(END_MARK, a) + len(END_MARK)
    return text[:a] + markdown() + text[b:]


def full_markdown() -> str:
    """METRICS.md: every series' /signals, Prometheus and OTLP name, unit
    and meaning (the profiler's own marked), made from the table."""
    out = ["# Metrics", "",
           "Made by `scripts/gen_metric_docs.py` from `graphsignal/naming/metrics.py`; edit there. `/signals` keeps",
           "its own units (nanoseconds, percent, MHz); `/metrics` converts to Prometheus's base units (`_seconds`,",
           "`_ratio` 0-1, `_hertz`) and OTLP to OpenTelemetry's (`s`, `1`, `Hz`), rescaling the values. Probe and",
           "engine series follow the same rules by their names' unit suffixes (`_nanoseconds`, `_bytes`, ...).",
           "\"own\": a series about the profiler itself, not the workload.", "",
           "| /signals name | type | Prometheus | OTLP name | OTLP unit | what it is |",
           "|---|---|---|---|---|---|"]
    for m in _TABLE:
        fam = otlp_family(m.name, m.type)
        otlp = "`%s`" % fam.name + (", `%s`" % fam.samples if fam.samples else "")
        unit = "`%s`" % (fam.unit or " ") + (", `%s`" % fam.samples_unit if fam.samples else "")
        what = ("own: " if m.own else "") + m.help.replace("|", "/")
        out.append("| `%s` | %s | %s | %s | %s | %s |" % (m.name, m.type, _prom_cell(m), otlp, unit, what))
    for name, type_, help_ in EXTRA:
        out.append("| - | %s | `%s` | - | - | %s |" % (type_, name, help_))
    return "\n".join(out) + "\n"

