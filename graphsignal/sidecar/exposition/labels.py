"""/metrics' naming rules for labels and values: which labels a series
gets and how they are written. A family's own name, unit and HELP text
come from the one table (graphsignal.naming.metrics.prometheus_name);
everything below is what the exposition adds to it.

  labels     a series' tags as labels (the table's label for well-known
             tags, others sanitized), then the GPU labels (model_name,
             Hostname) and the run's identity labels (Context)
  escaping   a label value as both formats write it, and a label set as
             `{k="v",...}` or as a str.format template with the family's
             own labels (frame, le, ...) left as holes
  units      a value in the family's unit (its scale)

It guards against label sets a scraper refuses or misreads: a tag that
would clash with the family's own label (`frame`, `le`, `quantile`) or
start with `__` gets a `tag_` prefix; two tags that give one label keep
the first in sorted order; identity and GPU labels never replace a tag's
own; a value with a backslash, newline or quote is escaped; and a scale
that is a power of ten divides by an integer, so `_nanoseconds` become
seconds with exact decimals.
"""
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from graphsignal.naming.metrics import label_of
from graphsignal.signals_model import Resource

__all__ = ["Context", "EMPTY_CONTEXT", "context_of", "labels_of", "esc", "label_str", "template", "OWN_LABELS",
           "FRAME_LABELS", "KERNEL_LABELS", "Conv", "conv_of", "conv"]

Labels = Dict[str, str]
OWN_LABELS: Dict[str, Tuple[str, ...]] = {"histogram": ("le",), "summary": ("quantile",)}
FRAME_LABELS = ("frame",)
KERNEL_LABELS = ("frame", "kernel", "category")


class Context(NamedTuple):
    """What /metrics adds to the series' own labels: identity (label ->
    value, on every series), the host's name and each GPU's model (by
    UUID), for DCGM-style labels on GPU series, and the GPUs' info rows."""
    identity: Tuple[Tuple[str, str], ...] = ()
    hostname: str = ""
    models: Tuple[Tuple[str, str], ...] = ()
    gpus: Tuple[Tuple[Tuple[str, str], ...], ...] = ()


EMPTY_CONTEXT = Context()


def context_of(snap: Any, identity: Optional[Mapping[str, str]] = None) -> Context:
    """The Context of a store snapshot (its resources and context) and the
    run's identity labels."""
    host = snap.context.get("host.name") if isinstance(snap.context, Mapping) else None
    host = host if isinstance(host, str) else ""
    models = []
    gpus = []
    resources: Sequence[Resource] = snap.resources
    for r in resources:
        if r.get("kind") != "device":
            continue
        tags, attrs = r.get("tags") or {}, r.get("attributes") or {}
        uuid = tags.get("device.uuid")
        model = attrs.get("device.name")
        if isinstance(uuid, str) and isinstance(model, str):
            models.append((uuid, model))
        row = {"gpu": tags.get("device.index"), "UUID": uuid, "pci_bus_id": tags.get("device.bus_id"),
               "model_name": model, "Hostname": host or None, "driver_version": attrs.get("driver_version"),
               "cuda_driver_version": attrs.get("cuda_driver_version")}
        gpus.append(tuple(sorted((k, str(v)) for k, v in row.items() if v is not None and v != "")))
    ident = tuple(sorted((label_of(str(k)), str(v)) for k, v in (identity or {}).items()))
    return Context(ident, host, tuple(sorted(models)), tuple(gpus))


def labels_of(tags: Mapping[str, Any], own: Sequence[str] = (), ctx: Context = EMPTY_CONTEXT) -> Labels:
    """Labels for tags, sorted by name; own: the labels the family sets
    itself (le, frame, ...). Two keys that give one label: the first in
    sorted order wins; identity and GPU labels never replace a tag's."""
    labels: Labels = {}
    for k in sorted(tags):
        ln = label_of(k)
        if ln in own:
            ln = "tag_" + ln
        if ln not in labels:
            labels[ln] = str(tags[k])
    if ctx is not EMPTY_CONTEXT:
        uuid = tags.get("device.uuid")
        if uuid is not None:
            for u, model in ctx.models:
                if u == uuid:
                    labels.setdefault("model_name", model)
            if ctx.hostname:
                labels.setdefault("Hostname", ctx.hostname)
        for k, v in ctx.identity:
            if k not in own:
                labels.setdefault(k, v)
    return dict(sorted(labels.items()))


def esc(v: str) -> str:
    """A label value escaped for both formats."""
    if "\\" in v or "\n" in v or '"' in v:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return v


def label_str(labels: Mapping[str, str]) -> str:
    """`{k="v",...}` ("" for no labels), in the labels' order."""
    if not labels:
        return ""
    return "{" + ",".join('%s="%s"' % (k, esc(v)) for k, v in labels.items()) + "}"


def template(labels: Mapping[str, str], extra: Sequence[str]) -> str:
    """A str.format template of the label set {labels + extra}, sorted as
    prometheus_client sorts: {0}, {1}, ... stand for the extra labels'
    (escaped) values, in the order given."""
    names = sorted(list(labels) + list(extra))
    parts: List[str] = []
    for n in names:
        if n in labels:
            parts.append('%s="%s"' % (n, esc(labels[n]).replace("{", "{{").replace("}", "}}")))
        else:
            parts.append('%s="{%d}"' % (n, list(extra).index(n)))
    return "{{" + ",".join(parts) + "}}"


# (divisor, multiplier): a value in the family's unit is v / divisor or v * multiplier
Conv = Tuple[Optional[float], Optional[float]]


def conv_of(scale: float) -> Conv:
    """(divisor, multiplier) for a scale: divide by an integer where the
    scale is its inverse (exact decimal results), else multiply."""
    if scale == 1:
        return None, None
    if scale < 1:
        return float(round(1 / scale)), None
    return None, scale


def conv(v: Any, c: Conv) -> Any:
    """v in the family's unit."""
    div, mul = c
    if div is not None:
        return v / div
    if mul is not None:
        return v * mul
    return v
