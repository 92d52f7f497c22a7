"""Every OTLP name and unit graphsignal sends follows OpenTelemetry's
semantic conventions (docs/general/metrics.md "Instrument units" and
docs/general/naming.md): UCUM case-sensitive units, durations in seconds,
fractions in `1`, unprefixed units (`By`, not `KiBy`), counts as
`{annotation}`s in the singular, no unit and no `_total` in a name,
lowercase dot-separated names, no name used twice, and none that differs
from another only by a plural `s` (`graphsignal.upload` beside
`graphsignal.uploads` said bytes and a count apart by one letter)."""
import re

import pytest

from graphsignal.naming import metrics
from graphsignal.naming.metrics import otlp_family

# units the conventions use for what graphsignal measures (UCUM c/s)
UNITS = {"s", "By", "By/s", "W", "J", "Cel", "Hz", "1", ""}
ANNOTATION = re.compile(r"^\{[a-z_]+\}$")
# what a name must not end in: a unit or `total` (the unit field says it; Prometheus adds _total)
UNIT_WORDS = ("_seconds", "_nanoseconds", "_microseconds", "_milliseconds", "_ns", "_us", "_ms", "_bytes",
              "_kilobytes", "_percent", "_ratio", "_megahertz", "_hertz", "_watts", "_joules", "_celsius",
              "_total", ".total")
NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")
# probe names a workload might use, beside the table's
PROBES = [("myapp_latency_nanoseconds", "histogram"), ("myapp_requests_total", "counter"),
          ("myapp_queue_depth", "gauge"), ("myengine_ops_nanoseconds", "profile"), ("tile_us", "histogram"),
          ("cache_hit_ratio", "gauge"), ("disk_kilobytes", "gauge"), ("tokens_total", "counter")]
PLURAL_OK = {"{process}", "{series}"}  # singular nouns that end in s

ALL = [(m.name, m.type) for m in metrics.table()] + PROBES


def _sent(name, type_):
    fam = otlp_family(name, type_)
    out = [(fam.name, fam.unit)]
    if type_ == "profile":
        out.append((fam.samples, fam.samples_unit))
    return out


@pytest.mark.parametrize("name,type_", ALL)
def test_units_follow_the_semantic_conventions(name, type_):
    for sent, unit in _sent(name, type_):
        assert unit in UNITS or ANNOTATION.match(unit), (name, unit)
        if ANNOTATION.match(unit) and unit not in PLURAL_OK:
            assert not unit.endswith("s}"), "annotations are singular: %s %s" % (name, unit)
        if any(name.endswith(s) for s in ("_nanoseconds", "_ns", "_seconds", "_microseconds", "_milliseconds")) \
                and sent == otlp_family(name, type_).name:
            assert unit == "s", "durations in seconds: %s %s" % (name, unit)
        if name.endswith("_percent") and sent == otlp_family(name, type_).name:
            assert unit in ("1", "{cpu}"), "a percent is sent as a fraction (or busy cores): %s %s" % (name, unit)


@pytest.mark.parametrize("name,type_", ALL)
def test_names_carry_no_unit_and_no_total(name, type_):
    for sent, _ in _sent(name, type_):
        assert NAME.match(sent), sent
        assert sent.startswith("graphsignal.") and len(sent) <= 255
        assert not sent.endswith(UNIT_WORDS) or (type_ == "gauge" and sent.endswith("_total")), sent


def test_no_name_is_sent_twice_or_one_letter_from_another():
    seen = {}
    for name, type_ in ALL:
        for sent, unit in _sent(name, type_):
            assert sent not in seen, (sent, seen.get(sent), name)
            seen[sent] = name
    for sent in seen:
        assert sent + "s" not in seen, (sent, seen[sent], seen[sent + "s"])


def test_values_are_rescaled_to_the_unit():
    assert otlp_family("cuda_kernels_nanoseconds", "profile")[1:3] == ("s", 1e-9)
    assert otlp_family("gpu_utilization_percent", "gauge")[1:3] == ("1", 0.01)
    assert otlp_family("gpu_clock_sm_megahertz", "gauge")[1:3] == ("Hz", 1e6)
    assert otlp_family("gpu_pcie_throughput_rx_kilobytes_per_second", "gauge")[1:3] == ("By/s", 1024.0)
    assert otlp_family("host_cpu_usage_percent", "gauge")[:3] == ("graphsignal.host_cpu_utilization", "1", 0.01)
    # a process's percent of one core goes above 100: busy cores, not a utilization
    assert otlp_family("process_cpu_usage_percent", "gauge")[:3] == ("graphsignal.process_cpu_busy", "{cpu}", 0.01)
    # bytes copied and time copying are two metrics (they were one name, one Sum, mixed units)
    assert otlp_family("cuda_memcpy_bytes", "counter")[:2] == ("graphsignal.cuda_memcpy_size", "By")
    assert otlp_family("cuda_memcpy_nanoseconds", "profile")[:2] == ("graphsignal.cuda_memcpy", "s")


def test_the_profilers_own_series_are_in_the_table():
    from graphsignal.sidecar import console, otlp, upload

    for name in (otlp.EXPORTS_METRIC, otlp.BYTES_METRIC, upload.UPLOADS_METRIC, upload.BYTES_METRIC,
                 upload.DROPPED_METRIC, console.DROPPED_METRIC, console.UNSCANNED_METRIC):
        meta = metrics.METRICS.get((name, "counter"))
        assert meta is not None and meta.own, name
        fam = metrics.prometheus_name(name, "counter")
        assert fam is not None and not fam.help.startswith("Probe metric"), (name, fam)
