"""Which sources a run gets. Each source module is optional: one that
cannot be imported (a missing optional package) is skipped with one line."""
import logging

logger = logging.getLogger("graphsignal")


def make_sources(sup):
    """Sources for a Supervisor `sup` (store, child, environ, metrics_url)."""
    from graphsignal.sources.host import HostSource

    root = lambda: sup.child.pid if sup.child is not None else None  # noqa: E731
    sources = [HostSource(sup.store, root)]
    for factory in _optional_factories():
        try:
            src = factory(sup)
        except ImportError as e:
            logger.warning("graphsignal: source unavailable: %s", e)
            continue
        if src is not None:
            sources.extend(src if isinstance(src, list) else [src])
    return sources


def _optional_factories():
    out = []
    try:
        from graphsignal.sources import nvml

        out.append(nvml.make_source)
    except ImportError:
        pass
    try:
        from graphsignal.sources import prometheus

        out.append(prometheus.make_source)
    except ImportError:
        pass
    return out
