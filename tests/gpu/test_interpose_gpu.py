"""The CUDA driver interposer (--cuda-trace light's counting) against CUPTI
on a real GPU: each workload runs under graphsignal-run's default (CUPTI)
collection with the interposer preloaded beside it, so both count the same
calls of one process (scripts/interpose_census.py); their counts must be
equal: kernel launches per symbol, graph replays per graph name (the same
content-hash names), synchronizations by kind, copies by direction (and
by direction and host memory) and memsets.

On an H100 and an H200 (driver 580, CUDA 13.0, 2026-12-07) every count of
PyTorch eager, torch.cuda.graph, torch.compile(mode="reduce-overhead") and
llama-server agreed exactly (on the H200 the host memory tags too)."""
import json
import os
import sys

import pytest

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import interpose_census as census  # noqa: E402

SERVER = os.environ.get("GRAPHSIGNAL_TEST_LLAMA_SERVER")
KEEP = os.environ.get("GRAPHSIGNAL_TEST_CENSUS_OUT")  # a JSONL file that gets every census line measured here
GGUF = os.environ.get("GRAPHSIGNAL_TEST_GGUF")

# CUPTI's sync kinds that are host waits (stream_wait_event is a device-side wait: never a host call)
HOST_SYNCS = ("context", "stream", "event")
# CUPTI's copy names -> the interposer's CUpti_ActivityMemcpyKind numbers
COPY_KINDS = {"host_to_device": "1", "device_to_host": "2", "device_to_device": "8"}


@pytest.fixture(scope="module")
def lib():
    if not os.path.exists(census.LIB):
        pytest.skip("no interposer built (python3 csrc/cupti_build.py graphsignal/lib)")
    return census.LIB


def measure(*args, **kw):
    line = census.measure(*args, **kw)
    if KEEP:
        with open(KEEP, "a") as f:
            f.write(json.dumps(line) + "\n")
    return line


def check(line):
    assert line["rc"] == 0 and "tail" not in line, line.get("tail")
    assert line["kernels"]["equal"], line["kernels"]
    assert line["graphs"]["equal"], line["graphs"]
    for kind in HOST_SYNCS:
        assert line["syncs_ours"].get(kind, [0])[0] == line["syncs_cupti"].get(kind, 0), (kind, line)
    for name, n in line["copies_cupti"].items():
        assert line["copies_ours"].get(COPY_KINDS.get(name, name), [0])[0] == n, (name, line)
    assert line["memsets_ours"][0] == sum(line["memsets_cupti"].values()), line
    assert line["slots_full"] == 0 and line["graphs_unnamed"] == 0, line
    # copies per kind and pinned / pageable / managed host memory (csrc/interpose/hostmem.h): the interposer's
    # classes from the page-locking calls it saw, CUPTI's from the driver (equal in every workload on an H200,
    # 2026-12-07: tests/data/h200/interpose_census.jsonl)
    assert line["copies_host_memory"]["equal"], line["copies_host_memory"]
    assert line["hostmem"]["gave_up"] == 0 and line["hostmem"]["unsure"] == 0, line["hostmem"]


@pytest.mark.parametrize("workload", ["exact", "exact_graph", "torch_mix", "torch_compile"])
def test_interposer_counts_equal_cuptis_on_pytorch(lib, tmp_path, workload):
    pytest.importorskip("torch")
    check(measure(workload, census.WORKLOADS[workload], str(tmp_path), lib, "census", 400))


@pytest.mark.skipif(not (SERVER and GGUF), reason="set GRAPHSIGNAL_TEST_LLAMA_SERVER and GRAPHSIGNAL_TEST_GGUF")
def test_interposer_counts_equal_cuptis_on_llama_server(lib, tmp_path):
    port = census.free_port()
    cmd = [SERVER, "-m", GGUF, "--port", str(port), "-ngl", "99", "-np", "4", "-c", "4096"]
    line = measure("llama_server", cmd, str(tmp_path), lib, "census", 400,
                          server=census.llama_driver(port, 4, 16, 64))
    assert line["did"]["requests"] == 16 and not line["did"]["errors"], line["did"]
    check(line)
    assert line["graphs"]["total_ours"] > 0  # llama-server decodes by graph replays


@pytest.mark.parametrize("workload", ["exact", "exact_graph", "torch_mix"])
def test_light_payload_counts_equal_cuptis(lib, tmp_path, workload):
    """--cuda-trace light as users run it (graphsignal-run preloads the
    interposer, no CUPTI in the process): the payload's series hold what
    the interposer counted, and those counts are the census run's CUPTI
    counts; the sampled graph time is within 10 % of CUPTI's graph records
    (back-to-back replays read about 2.4 µs high on an H100: +4.5 % and
    +7.2 % on exact_graph and torch_mix; +6.0 % and +8.1 % on an H200,
    2026-12-07)."""
    pytest.importorskip("torch")
    cupti = measure(workload, census.WORKLOADS[workload], str(tmp_path), lib, "census", 400)
    check(cupti)
    light = measure(workload, census.WORKLOADS[workload], str(tmp_path), lib, "light", 400)
    assert light["rc"] == 0 and "tail" not in light, light.get("tail")
    assert light["kernels"]["equal"] and light["graphs"]["equal"], (light["kernels"], light["graphs"])
    assert light["kernels"]["total_ours"] == cupti["kernels"]["total_cupti"]
    assert light["graphs"]["total_ours"] == cupti["graphs"]["total_cupti"]
    for kind in HOST_SYNCS:
        assert light["syncs_ours"].get(kind, [0])[0] == cupti["syncs_cupti"].get(kind, 0), (kind, light)
    # the light payload's copies per host memory: what the interposer counted, and what CUPTI saw
    assert light["copies_host_memory"]["equal"], light["copies_host_memory"]
    assert light["copies_host_memory"]["total_ours"] == cupti["copies_host_memory"]["total_cupti"]
    for row in light["graph_time"]:
        if row.get("ratio") is not None and row["sampled"] >= 20:
            assert 0.97 <= row["ratio"] <= 1.10, row
