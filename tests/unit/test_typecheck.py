"""The checker graphsignal.typecheck generates from TypedDicts, held two
ways: from the payload's TypedDicts it agrees with the JSON Schema made
from the same ones (what one takes the other takes; every change the
schema refuses it refuses), and from the upload's (graphsignal.upload_model,
what graphsignal-server checks every body with) it takes what the
sidecar's uploader sends, of either schema, and refuses the rest with one
message that names where."""
import copy
import gzip
import json

import orjson
import pytest
from test_signals_schema import BEFORE_ENDED, MUTATIONS, RECORDED, full_store

from support.schema import errors

from graphsignal import findings, histo, signals_model, typecheck, upload_model
from graphsignal.fleet import ingest
from graphsignal.sidecar.payload import build_signals
from graphsignal.sidecar.upload import Uploader
from graphsignal.sidecar.windows import window_stats

SIGNALS = typecheck.checker(signals_model.Signals, closed=True)


def _takes(check, doc):
    try:
        check(doc)
        return True
    except typecheck.Invalid:
        return False


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.rsplit("/", 1)[-1])
def test_the_checker_takes_the_payloads_the_json_schema_takes(path):
    with open(path) as f:
        doc = json.load(f)
    doc = dict(doc, findings=findings.compute(doc))
    if path.rsplit("/", 1)[-1][:-len(".signals.json")] in BEFORE_ENDED:
        assert not _takes(SIGNALS, doc) and errors(doc)  # both: ended_ns and exit_status are missing
        doc.update(ended_ns=None, exit_status=None)
    assert not errors(doc)
    SIGNALS(doc)


@pytest.mark.parametrize("what", sorted(MUTATIONS))
def test_every_change_the_json_schema_refuses_the_checker_refuses(what):
    s = full_store()
    doc = json.loads(build_signals(s, {"window": window_stats(s, 5)}))
    SIGNALS(doc)
    bad = copy.deepcopy(doc)
    MUTATIONS[what](bad)
    assert errors(bad)
    with pytest.raises(typecheck.Invalid):
        SIGNALS(bad)


def _sidecar_body():
    """What the uploader sends of a store with every kind of series (engine
    buckets, numbers beyond 64 bits, NaN, a profile past its listed frames)."""
    s = full_store()
    s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "2"}, [("k%03d" % i, i + 1, 1) for i in range(300)])
    sent = []

    class HTTP:
        def post(self, url, data, **kw):
            sent.append(data)
            return type("Resp", (), {"status_code": 200, "headers": {}, "close": lambda self: None})()

    assert Uploader(s, "k", "http://fleet", http=HTTP()).step()
    return orjson.loads(gzip.decompress(sent[0]))


def test_what_the_sidecar_uploads_passes_the_servers_checker_in_either_schema():
    doc = _sidecar_body()
    assert doc["schema"] == upload_model.SCHEMA == 2
    assert {m["type"] for m in doc["metrics"]} == {"gauge", "counter", "histogram", "profile"}
    assert all("state" in m for m in doc["metrics"])
    big = next(m for m in doc["metrics"] if m["tags"] == {"process.pid": "2"})
    # beside the 249 frames its stats list by name, the 51 their "(other)" sums
    assert len(big["stats"]["frames"]) == 250 and big["stats"]["frames_folded"] == 51
    assert len(big["state"]) == 51 and not set(big["state"]) & {f["name"] for f in big["stats"]["frames"]}
    assert ingest.validate(doc) is doc
    # schema 1, as older sidecars send: no states
    old = dict(doc, schema=1, metrics=[{k: v for k, v in m.items() if k != "state"} for m in doc["metrics"]])
    assert ingest.validate(old) is old
    # a newer sender's additions pass as they are
    ingest.validate(dict(doc, extra={"a": [1]}, context=dict(doc["context"], zone="eu")))


def _at(doc, name):
    return next(m for m in doc["metrics"] if m["name"] == name)


HIST = "probe_op_nanoseconds"
REFUSED = [
    ("an unknown schema", lambda d: d.update(schema=3), "schema must be one of 1, 2, got 3"),
    ("a schema 2 series without its state", lambda d: _at(d, "gpu_utilization_percent").pop("state"),
     "].state is required"),
    ("a state of another type's shape", lambda d: _at(d, HIST).update(state=5), "].state must be an array of 3"),
    ("a bin past the layout", lambda d: _at(d, HIST)["state"][2]["idx"].__setitem__(0, histo.NBINS),
     "].state[2].idx[0] must be an integer from 0 to %d" % (histo.NBINS - 1)),
    ("bins and counts of two lengths", lambda d: _at(d, HIST)["state"][2]["counts"].pop(),
     "].state[2].counts must have as many items as"),
    ("a count no int64 holds", lambda d: _at(d, HIST)["stats"]["counts"].__setitem__(0, 1 << 63),
     "].stats.counts[0] must be an integer from 0 to 2^63-1"),
    ("bins of neither kind", lambda d: _at(d, HIST)["state"].__setitem__(2, {"x": []}), "one of the keys idx, le"),
    ("a frame state of three numbers", lambda d: _at(d, "cuda_memcpy_nanoseconds")["state"].update(h=[1, 2, 3]),
     "].state['h'] must be an array of 2 items"),
    ("a profile's state that is a list", lambda d: _at(d, "cuda_memcpy_nanoseconds").update(state=[]),
     "].state must be an object"),
    ("too many tags", lambda d: _at(d, "gpu_utilization_percent")["tags"].update({"t%d" % i: "" for i in range(64)}),
     "].tags must hold at most 64 keys"),
    ("a metric name past 512 characters", lambda d: _at(d, "nan_watts").update(name="n" * 513),
     "].name must be a non-empty string of at most 512 characters"),
    ("an exit status past 255", lambda d: d.update(exit_status=256), "exit_status must be an integer from -128 to 255"),
    ("an integer past 2^64-1", lambda d: d.update(payload_ns=1 << 64), "payload_ns must be an integer from 0 to 2^64-1"),
    ("a bool for an integer", lambda d: d.update(seq=True), "seq must be an integer from 0 to 2^64-1 or null"),
    ("more frames than any sidecar lists", lambda d: _at(d, "cuda_memcpy_nanoseconds")["stats"].update(
        frames=[{"name": "f", "value": 1, "samples": 1}] * 1001), "].stats.frames must hold at most 1000 items"),
    ("an error without its level", lambda d: d["errors"][0].pop("level"), "errors[0].level is required"),
    ("a context that is a list", lambda d: d.update(context=[]), "context must be an object"),
    ("no instance id", lambda d: d.pop("instance_id"), "instance_id is required"),
    ("an instance id with a NUL", lambda d: d.update(instance_id="a\0b"), "NUL"),
    ("an instance id its context does not have", lambda d: d.update(instance_id="other"), "differ"),
]


@pytest.mark.parametrize("what,change,message", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_bad_upload_is_refused_with_one_message_that_names_where(what, change, message):
    doc = _sidecar_body()
    change(doc)
    with pytest.raises(ingest.BadBody) as e:
        ingest.validate(doc)
    assert message in str(e.value) and e.value.status == 400, str(e.value)
