"""The findings on real llama-server runs, one planted cause each and a
healthy control (scripts/record_findings_cases.py records them on a GPU
host into tests/data/llamacpp_cases): the planted cause named first, the
control with no finding. Each case skips, with one line, until its file
exists."""
import gzip
import json
import os
import time

import pytest

from graphsignal import findings
from graphsignal.sidecar.console import ConsoleCapture
from graphsignal.sidecar.store import MetricStore
from support.schema import assert_valid

CASES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "llamacpp_cases")
# case -> the finding it must name first (None: the healthy control, no finding at all)
EXPECTED = {"healthy": None, "one_slot": "requests_queueing", "graphs_off": "graphs_disabled",
            "cpu_layers": "cpu_offload", "tiny_ubatch": "tiny_prompt_batches", "fa_off": "flash_attention_off"}
# small_context ("context_too_small") is read from its payload and its console together, below


def load(case):
    path = os.path.join(CASES_DIR, case + ".signals.json")
    if not os.path.exists(path):
        pytest.skip("no recording %s (scripts/record_findings_cases.py on a GPU host)" % os.path.relpath(path))
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_a_recorded_llama_server_case_names_its_cause_first(case):
    doc = load(case)
    assert doc["engine"]["engine"] == "llamacpp" and isinstance(doc.get("window"), dict)
    assert_valid(doc)
    served = [f["id"] for f in doc["findings"]]
    again = [f["id"] for f in findings.compute(doc)]  # the rules of this checkout, on the same document
    if EXPECTED[case] is None:
        assert served == [] and again == []
    else:
        assert again[:1] == [EXPECTED[case]], again


def test_the_small_context_recordings_console_names_the_truncated_requests():
    """llama-server without context shift (its default) cuts a request short
    when the slot's context fills and says so only at info level, once per
    request ("stop processing: n_tokens = 255, truncated = 1"): the
    recording's payload predates the line being read, so its real console
    (1,071 requests, every one truncated) is replayed through the console
    catcher, and the entries it makes, one per kind of line with every
    request counted, join the recorded document."""
    doc = load("small_context")
    with gzip.open(os.path.join(CASES_DIR, "small_context.log.gz")) as f:
        console = f.read()
    store = MetricStore()
    cap = ConsoleCapture(store, lambda: 1, clock=time.monotonic)
    for i in range(0, len(console), 65536):
        cap.feed("stdout", console[i:i + 65536])
    cap.close_stream("stdout")
    cut = [e for e in store.errors if "truncated = 1" in e["message"]]
    assert [e["tags"]["error.kind"] for e in cut] == ["context"]
    assert cut[0]["message"].endswith("id * | task * | stop processing: n_tokens = *, truncated = 1")
    assert cut[0]["count"] == console.count(b"truncated = 1") == 1071
    doc["errors"] = list(doc["errors"]) + list(store.errors)
    got = findings.compute(doc)
    assert got[0]["id"] == "context_too_small" and "cut short" in got[0]["title"], got[0]
    assert got[0]["evidence"][0]["value"] == 1071
