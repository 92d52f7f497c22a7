"""graphsignal-diff's findings: which disappeared, appeared, shrank or
grew between two runs (graphsignal.findings.compare), on the recorded
fp32 and bf16 GEMM runs and on one cause made smaller."""
import copy
import json
import os

from graphsignal import diff
from graphsignal.findings import compare

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")


def load(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return json.load(f)


def test_the_fp32_finding_disappears_when_the_gemms_run_in_bf16():
    fp32, bf16 = load("h200/gemm_fp32.signals.json"), load("h200/gemm_bf16.signals.json")
    doc = diff.compare(fp32, bf16)
    assert [r["id"] for r in doc["findings"]["disappeared"]] == ["fp32_gemm"]
    assert doc["findings"]["disappeared"][0]["after"] is None and doc["findings"]["appeared"] == []
    assert diff.to_text(doc).splitlines()[1].startswith("finding gone (fixed) fp32_gemm (75% -> - at stake)")
    back = diff.compare(bf16, fp32)["findings"]
    assert [r["id"] for r in back["appeared"]] == ["fp32_gemm"] and back["disappeared"] == []


def test_a_cause_made_smaller_shrank_and_an_unchanged_one_stays():
    before = load("reference/signals-example.json")
    after = copy.deepcopy(before)
    for m in after["metrics"]:
        if m["name"] == "cuda_memcpy_nanoseconds":
            for f in m["stats"]["frames"]:
                f["value"] = int(f["value"] * 0.7)  # the same copies, faster
    got = compare.between([before], [after])
    assert [r["id"] for r in got["shrank"]] == ["large_transfer_every_step"]
    assert [r["id"] for r in got["unchanged"]] == ["sync_every_step"]
    assert abs(got["shrank"][0]["after"] / got["shrank"][0]["before"] - 0.7) < 0.01


def test_with_several_runs_a_side_a_share_inside_the_spread_is_unchanged():
    a = load("reference/signals-example.json")
    b = copy.deepcopy(a)
    for m in b["metrics"]:
        if m["name"] == "cuda_memcpy_nanoseconds":
            for f in m["stats"]["frames"]:
                f["value"] = int(f["value"] * 0.7)
    # before: a, b; after: b, a: the ranges overlap, so nothing moved
    got = compare.between([a, b], [b, a])
    assert got["shrank"] == [] and got["grew"] == [] and len(got["unchanged"]) == 2
