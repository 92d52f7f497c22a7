"""graphsignal-top's findings: the FINDINGS section of a frame, and
`graphsignal-top --once FILE` on saved payloads (with findings computed
when the file has none, as every recording in tests/data was saved)."""
import json
import os

import pytest

from graphsignal import findings
from graphsignal.cli import top

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
FP32 = os.path.join(DATA, "h200", "gemm_fp32.signals.json")


def once(capsys, *argv):
    rc = top.main(["--once", "--no-color"] + list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_saved_file_without_findings_gets_them_computed(capsys):
    rc, out, err = once(capsys, FP32)
    assert rc == 0 and err == ""
    lines = out.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith(" FINDINGS "))
    assert "(computed from this payload)" in lines[i]
    assert "75% of GPU time" in lines[i + 1] and "fp32_gemm" in lines[i + 1]
    assert lines[i + 2].startswith("      change (pytorch): torch.set_float32_matmul_precision")
    assert "confirm: cuda_kernels_nanoseconds{frame=sm80_xmma_gemm_f32f32" in out


def test_a_file_with_findings_shows_its_own(capsys, tmp_path):
    doc = json.load(open(FP32))
    doc["findings"] = findings.compute(doc)
    doc["findings"][0]["title"] = "as the sidecar wrote it"
    p = tmp_path / "with.json"
    p.write_text(json.dumps(doc))
    rc, out, _ = once(capsys, str(p))
    assert rc == 0 and "as the sidecar wrote it" in out and "computed from this payload" not in out


def test_a_healthy_recording_says_none(capsys):
    rc, out, _ = once(capsys, os.path.join(DATA, "h200", "llamacpp_graph_c4.signals.json"))
    assert rc == 0 and " FINDINGS none (computed from this payload)" in out.splitlines()


@pytest.mark.parametrize("content,why", [(None, "No such file or directory"), ("<html>", "an HTML or XML page"),
                                         ('{"a": 1}', "not a /signals payload")])
def test_a_file_that_is_no_payload_is_one_line_and_exit_1(capsys, tmp_path, content, why):
    p = tmp_path / "x.json"
    if content is not None:
        p.write_text(content)
    rc, out, err = once(capsys, str(p))
    assert rc == 1 and err.count("\n") == 1 and err.startswith("graphsignal-top: %s: " % p) and why in err, err
    assert "FINDINGS no payload" in out


def test_a_file_without_once_is_a_usage_error(capsys):
    assert top.main([FP32]) == 2
    assert "--once" in capsys.readouterr().err
