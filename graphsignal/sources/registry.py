"""Which sources a run gets: host and process metrics always, GPU
telemetry (NVML / AMD SMI; each says once when its library or driver is
missing), and the engine's Prometheus endpoint when there is one."""
from graphsignal.sources import nvml, prometheus
from graphsignal.sources.host import HostSource


def make_sources(sup):
    """Sources for a Supervisor `sup` (store, child, environ, metrics_url)."""
    root = lambda: sup.child.pid if sup.child is not None else None  # noqa: E731
    sources = [HostSource(sup.store, root)]
    for factory in (nvml.make_source, prometheus.make_source):
        src = factory(sup)
        if src is not None:
            sources.extend(src if isinstance(src, list) else [src])
    return sources
