"""The findings on real llama-server runs, one planted cause each and a
healthy control (scripts/record_findings_cases.py records them on a GPU
host into tests/data/llamacpp_cases): the planted cause named first, the
control with no finding. Each case skips, with one line, until its file
exists."""
import json
import os

import pytest

from graphsignal import findings
from support.schema import assert_valid

CASES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "llamacpp_cases")
# case -> the finding it must name first (None: the healthy control, no finding at all)
EXPECTED = {"healthy": None, "one_slot": "requests_queueing", "graphs_off": "graphs_disabled",
            "cpu_layers": "cpu_offload", "tiny_ubatch": "tiny_prompt_batches", "fa_off": "flash_attention_off",
            "small_context": "context_too_small"}


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
