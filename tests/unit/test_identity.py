"""The run's identity: GRAPHSIGNAL_SERVICE / OTEL_SERVICE_NAME and
GRAPHSIGNAL_TAGS, resolved once into Settings (service, tags), bounded and
validated (a bad entry is one line and skipped, never a stop), and what
the payload's context, /metrics labels and OTLP get from them."""
import json
import logging

import pytest

from graphsignal import channel, config, otelenv


def lines(caplog):
    return [r.getMessage() for r in caplog.records]


def test_graphsignal_service_wins_over_otel_service_name_which_wins_over_resource_attributes():
    both = config.from_environ({"GRAPHSIGNAL_SERVICE": "ours", "OTEL_SERVICE_NAME": "theirs",
                                "OTEL_RESOURCE_ATTRIBUTES": "service.name=attr"})
    assert both.service == "ours" and both.origin("service") == "environment GRAPHSIGNAL_SERVICE"
    otel = config.from_environ({"OTEL_SERVICE_NAME": " theirs ", "OTEL_RESOURCE_ATTRIBUTES": "service.name=attr"})
    assert otel.service == "theirs" and otel.origin("service") == "environment OTEL_SERVICE_NAME"
    attr = config.from_environ({"OTEL_RESOURCE_ATTRIBUTES": "a=b,service.name=my%20svc"})
    assert attr.service == "my svc" and attr.origin("service") == "environment OTEL_RESOURCE_ATTRIBUTES"
    none = config.from_environ({})
    assert none.service is None and none.tags == {} and none.origin("service") == "default"
    assert config.identity_labels(none) == {} and config.identity_context(none) == {}


def test_a_service_name_that_cannot_be_used_is_one_line_and_the_next_source_is_taken(caplog):
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        s = config.from_environ({"GRAPHSIGNAL_SERVICE": "a\x1b[31mb", "OTEL_SERVICE_NAME": "x" * 300})
    assert s.service is None
    said = lines(caplog)
    assert len(said) == 2 and "GRAPHSIGNAL_SERVICE" in said[0] and "control characters" in said[0]
    assert "OTEL_SERVICE_NAME" in said[1] and "longer than 256" in said[1]
    assert "\x1b" not in "".join(said)


def test_tags_are_validated_bounded_and_each_bad_entry_is_one_line(caplog):
    raw = ",".join(["pod=web-1", "k8s.namespace.name=ml", " spaced = kept ", "bad key=1", "1st=x", "__name__=x",
                    "service=x", "service.name=x", "noequals", "empty=", "k8s_namespace_name=dup",
                    "long=" + "v" * 300, "ctl=a\x07b", "k" * 65 + "=v", ",,"]
                   + ["t%d=v" % i for i in range(30)])
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        tags = otelenv.tags(raw)
    assert list(tags)[:3] == ["pod", "k8s.namespace.name", "spaced"] and tags["spaced"] == "kept"
    assert len(tags) == otelenv.MAX_TAGS and "t16" in tags and "t17" not in tags
    said = lines(caplog)
    refused = ["bad key", "1st", "__name__", "'service=x'", "service.name", "noequals", "empty", "k8s_namespace_name",
               "long=", "ctl=", "kkkk"]
    for word in refused:
        assert sum(word in ln for ln in said) == 1, (word, said)
    assert sum("past the first 20 tags" in ln for ln in said) == 13  # t17..t29
    assert len(said) == len(refused) + 13
    assert all(ln.startswith("graphsignal: GRAPHSIGNAL_TAGS entry ") and "skipped" in ln for ln in said)
    assert "\x07" not in "".join(said) and all(len(ln) < 400 for ln in said)


@pytest.mark.parametrize("raw", ["", ",", "=", "==", "a==b", "\udcff=\udcfe", "a=b\n", "=" * 10000,
                                 "k=" + "x" * 10 ** 6, ",".join("k%d=v" % i for i in range(10 ** 5))],
                         ids=lambda raw: repr(raw) if len(raw) < 20 else "%d chars" % len(raw))
def test_no_tags_value_stops_a_run_or_grows_without_bound(raw):
    tags = otelenv.tags(raw)
    assert len(tags) <= otelenv.MAX_TAGS
    assert all(len(k) <= otelenv.MAX_TAG_KEY and len(v) <= otelenv.MAX_TAG_VALUE for k, v in tags.items())
    assert all(k.isascii() and v.isprintable() for k, v in tags.items())


def test_identity_reaches_the_labels_the_context_and_crosses_the_channel_whole():
    s = config.from_environ({"GRAPHSIGNAL_SERVICE": "trainer", "GRAPHSIGNAL_TAGS": "pod=p-1,k8s.node.name=n7"})
    assert s.tags == {"pod": "p-1", "k8s.node.name": "n7"} and s.origin("tags") == "environment GRAPHSIGNAL_TAGS"
    assert config.identity_labels(s) == {"service": "trainer", "pod": "p-1", "k8s.node.name": "n7"}
    assert config.identity_context(s) == {"service.name": "trainer", "tags": {"pod": "p-1", "k8s.node.name": "n7"}}
    fd = channel.write_config({"settings": s.to_dict()})
    back = config.Settings.from_dict(channel.read_config(fd)["settings"])
    assert back == s and back.tags == s.tags
    for bad in ({"pod": 1}, ["pod", "x"]):
        d = dict(s.to_dict(), tags=bad)
        with pytest.raises(ValueError, match="tags"):
            config.Settings.from_dict(json.loads(json.dumps(d)))


def test_otlp_settings_are_read_only_with_the_opt_in_and_header_values_never_shown(caplog):
    env = {"GRAPHSIGNAL_OTLP": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:pw@collector:4318/base/",
           "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20SECRETVALUE,x-bad header=1",
           "OTEL_METRIC_EXPORT_INTERVAL": "500", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
           "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "delta",
           "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,noequals"}
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        s = config.from_environ(env)
    assert s.otlp and s.otlp_endpoint == "https://user:pw@collector:4318/base/v1/metrics"
    assert s.otlp_headers == (("Authorization", "Bearer SECRETVALUE"),)
    assert s.otlp_interval == otelenv.DEFAULT_INTERVAL  # 500 ms is below the floor: the default, said
    assert s.otlp_resource == (("deployment.environment", "prod"),)
    said = lines(caplog)
    for word in ("x-bad header", "OTEL_METRIC_EXPORT_INTERVAL", "http/protobuf only", "cumulative temporality only",
                 "noequals"):
        assert sum(word in ln for ln in said) == 1, (word, said)
    assert len(said) == 5 and "SECRETVALUE" not in "".join(said)
    shown = config.print_config(s, {})
    assert "SECRETVALUE" not in shown and "pw" not in shown
    assert "Authorization (values not shown)" in shown and "https://***@collector:4318/base/v1/metrics" in shown
    rows = {r[0]: r for r in s.describe()}
    assert rows["otlp_endpoint"][2] == "environment OTEL_EXPORTER_OTLP_ENDPOINT"
    assert rows["otlp_headers"][2] == "environment OTEL_EXPORTER_OTLP_HEADERS"
    # the metrics variables win; the default endpoint is OpenTelemetry's
    s = config.from_environ({"GRAPHSIGNAL_OTLP": "yes", "OTEL_EXPORTER_OTLP_HEADERS": "a=1",
                             "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "b=2"})
    assert s.otlp_headers == (("b", "2"),) and s.otlp_endpoint == "http://localhost:4318/v1/metrics"
    assert s.origin("otlp_endpoint") == "default"
