"""A profile with more frames than /signals lists (MAX_FRAMES, 250): the
largest 249 named frames and one "(other)" holding the rest, so the frames
still sum to the whole; stats.frames_folded says how many names went in.
End to end from a real graphsignal-run, and what each reader of a payload
makes of that frame: graphsignal-diff never calls it a kernel that
appeared, graphsignal-export shows it as a frame, OTLP and /metrics never
export it (its members change with each ranking: no sum that only grows)."""
import subprocess
import sys

import orjson

from support.gsrun import quiet_env, run_wrapped
from support.schema import assert_valid

from graphsignal import config, diff
from graphsignal.diff import text as diff_text
from graphsignal.sidecar.exposition import Exposition
from graphsignal.sidecar.payload import build_signals
from graphsignal.sidecar.series import MAX_FRAMES
from graphsignal.sidecar.store import MetricStore

NAMES = 1000
WORKLOAD = """
from graphsignal import probes
p = probes.profile("demo_names_nanoseconds")
for i in range(%d):
    p.add("name%%04d" %% i, 1000 + i)  # each name once, all values distinct
p.add("name0999", 1000)  # a second sample for the largest
""" % NAMES
TOTAL_VALUE = sum(1000 + i for i in range(NAMES)) + 1000
TOTAL_SAMPLES = NAMES + 1


def _profile(payload, name="demo_names_nanoseconds"):
    (m,) = [m for m in payload["metrics"] if m["name"] == name]
    return m


def _cut_store(names=300):
    s = MetricStore()
    s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "7"},
                  [("k%03d" % i, 10 + i, 1) for i in range(names)])
    return s


def test_a_real_run_keeps_what_the_cap_cuts_in_one_frame_that_says_so():
    # before: the payload listed the largest 250 frames and the other 750 names, their
    # value and samples, were gone without a mark
    proc, signals = run_wrapped([sys.executable, "-c", WORKLOAD])
    assert proc.returncode == 0, proc.stderr
    st = _profile(signals)["stats"]
    frames = st["frames"]
    assert len(frames) == MAX_FRAMES
    others = [f for f in frames if f["name"] == "(other)"]
    assert len(others) == 1
    assert st["frames_folded"] == NAMES - (MAX_FRAMES - 1)  # 751 distinct names in "(other)"
    assert sum(f["value"] for f in frames) == TOTAL_VALUE  # nothing lost
    assert sum(f["samples"] for f in frames) == TOTAL_SAMPLES
    named = [f for f in frames if f["name"] != "(other)"]
    assert [f["name"] for f in named] == ["name%04d" % i for i in range(NAMES - 1, NAMES - MAX_FRAMES, -1)]
    assert [f["value"] for f in frames] == sorted((f["value"] for f in frames), reverse=True)  # largest first
    assert_valid(signals)  # the schema knows frames_folded


def test_an_uncut_profile_says_nothing_of_folding():
    s = _cut_store(MAX_FRAMES)
    (m,) = orjson.loads(build_signals(s))["metrics"]
    assert len(m["stats"]["frames"]) == MAX_FRAMES and "frames_folded" not in m["stats"]
    assert all(f["name"] != "(other)" for f in m["stats"]["frames"])


def _payload(store):
    return orjson.loads(build_signals(store))


def test_diff_never_reports_the_other_frame_as_a_kernel_that_appeared():
    before = _payload(_cut_store(200))  # uncut
    after = _payload(_cut_store(300))  # cut: "(other)" holds the 51 smallest
    (k,) = after["metrics"]
    assert any(f["name"] == "(other)" for f in k["stats"]["frames"])
    doc = diff.compare(before, after)
    assert not [c for c in doc["changes"] if c.get("frame") == "(other)"], doc["changes"]
    assert any("lists only its" in w for w in doc["warnings"])  # a missing frame may be under the cut
    # and a cut on both sides: still never a frame of its own
    doc = diff.compare(after, _payload(_cut_store(400)))
    assert not [c for c in doc["changes"] if c.get("frame") == "(other)"]


def test_export_shows_the_other_frame_as_a_frame(tmp_path):
    src = tmp_path / "cut.json"
    src.write_bytes(build_signals(_cut_store(300)))
    out = tmp_path / "cut.folded"
    r = subprocess.run([sys.executable, "-m", "graphsignal.cli.export", str(src), "--format", "folded", "-o",
                        str(out)], capture_output=True, timeout=120, env=quiet_env())
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in out.read_text().splitlines() if "(other)" in ln]
    assert len(lines) == 1, out.read_text()[:2000]
    assert lines[0].endswith(" %d" % sum(10 + i for i in range(300 - (MAX_FRAMES - 1)))), lines


def test_otlp_and_metrics_leave_the_cut_other_frame_out():
    from graphsignal.sidecar import otlp

    s = _cut_store(300)
    s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "7"}, [("k000", 10 ** 9, 1)])  # the largest
    st = config.from_environ({"GRAPHSIGNAL_OTLP": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                              "GRAPHSIGNAL_METRICS_TOP_FRAMES": "250"}, ["x"])
    req = otlp.Builder(st).request(s.snapshot())
    frames = {kv.value.string_value for m in req.resource_metrics[0].scope_metrics[0].metrics
              for p in m.sum.data_points for kv in p.attributes if kv.key == "frame"}
    assert "k000" in frames and "(other)" not in frames and len(frames) == MAX_FRAMES - 1
    body, _ = Exposition(s, top_frames=250).render(None, None)
    text = body.decode() if isinstance(body, bytes) else body
    assert 'frame="k000"' in text and "(other)" not in text


def test_the_payload_section_of_skill_md_names_frames_folded():
    import os

    root = os.path.join(os.path.dirname(__file__), "..", "..")
    text = open(os.path.join(root, "SKILL.md")).read()
    assert "frames_folded" in text and "`(other)`" in text
    text = open(os.path.join(root, "graphsignal", "reference", "payload.md")).read()  # --explain payload
    assert "frames_folded" in text and "`(other)`" in text


def test_diff_says_how_much_of_a_cut_profile_its_other_frame_holds():
    # before: with the same 249 names listed on both sides, the diff ranked their tiny
    # changes and said nothing of the (other) frame, though it held 93 % of the profile
    # and grew 1.5x (the largest change of the run, unseen)
    def store(scale):
        s = MetricStore()
        s.add_profile("demo_frames_nanoseconds", {"process.pid": "7"},
                      [("fn_%05d" % i, int((1000 + i) * scale), 1) for i in range(5000)])
        return s

    before, after = _payload(store(1)), _payload(store(1.5))
    folded = [[f for f in p["metrics"][0]["stats"]["frames"] if f["name"] == "(other)"][0]["value"]
              for p in (before, after)]
    doc = diff.compare(before, after)
    assert not [c for c in doc["changes"] if c.get("frame") == "(other)"]  # still never a frame of its own
    said = [w for w in doc["warnings"] if "(other)" in w and "demo_frames_nanoseconds" in w]
    assert len(said) == 1, doc["warnings"]
    unit, div = doc["changes"][0]["unit"], doc["normalized_by"]
    assert diff_text.fmt(folded[0] / div["before"][0], unit) in said[0], said
    assert diff_text.fmt(folded[1] / div["after"][0], unit) in said[0], said
    assert "92% -> 92%" in said[0] and "4751" in said[0], said
    text = diff.to_text(doc)
    assert said[0] in text
