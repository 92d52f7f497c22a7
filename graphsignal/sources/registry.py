"""Which sources a run gets: host and process metrics always, GPU
telemetry (NVML / AMD SMI; each says once when its library or driver is
missing), and the engine's Prometheus endpoint when there is one.

The registry is the one module that knows every source: the GPU backends
import the telemetry's interface (gpu.py), never the other way round."""
from typing import Callable, List, Optional

from graphsignal.sources import Source, SourceContext
from graphsignal.sources import prometheus
from graphsignal.sources.host import HostSource


def make_sources(ctx: SourceContext) -> List[Source]:
    """Sources for a run (ctx: a graphsignal.sources.SourceContext)."""
    sources: List[Source] = [HostSource(ctx.store, ctx.root_pid)]
    factories: List[Callable[[SourceContext], Optional[Source]]] = [gpu_source, prometheus.make_source]
    for factory in factories:
        src = factory(ctx)
        if src is not None:
            sources.append(src)
    return sources


def gpu_source(ctx: SourceContext) -> Source:
    """The GPU telemetry Source: NVML always (it reports one line when
    there is no NVIDIA driver), AMD SMI when its package imports."""
    from graphsignal.report import Reporter
    from graphsignal.sources import amdsmi, nvml
    from graphsignal.sources.gpu import Backend, GpuTelemetry

    def on_error(source: str) -> Callable[[str], None]:
        return Reporter(ctx.store, {"source": source}).entry

    backends: List[Backend] = [nvml.NvmlBackend(nvml.Nvml(on_error=on_error("nvml")))]
    mod = amdsmi.load_module()
    if mod is not None:
        backends.append(amdsmi.AmdSmiBackend(amdsmi.AmdSmi(mod, on_error=on_error("amdsmi"))))
    return GpuTelemetry(ctx.store, backends, dict(ctx.settings.visible_devices), all_gpus=ctx.settings.all_gpus)
