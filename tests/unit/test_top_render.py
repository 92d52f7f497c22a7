"""graphsignal-top's model and rendering, without a terminal: payloads in,
lines out (the same lines the curses screen and --once print)."""
import copy
import io
import json
import os
import time

import pytest

from graphsignal.cli import args
from graphsignal.cli import top as cli
from graphsignal.top import screen
from graphsignal.top.render import UI, render
from graphsignal.top.text import Glyphs, line_text, sparkline, to_text
from graphsignal.top.state import TopState, engine_view
from graphsignal.naming import kernels as kernel_names

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFERENCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "reference", "signals-example.json")
NOW = 1_795_968_737.5

FILL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
GPU_TAGS = {"device.bus_id": "00000000:00:06.0", "device.uuid": "GPU-2c44f54a", "device.index": "0"}


def reference():
    """The reference payload of shared/reference/ (a copy in tests/data)."""
    with open(REFERENCE) as f:
        return json.load(f)


def metric(name, type_, tags, **stats):
    return {"name": name, "type": type_, "tags": tags, "stats": stats, "updated_ns": 1}


def profile(name, tags, frames):
    return metric(name, "profile", tags, frames=[{"name": n, "value": v, "samples": s} for n, v, s in frames])


def wprofile(name, tags, frames, covered=5.0):
    total = sum(v for _, v, _ in frames)
    return {"name": name, "type": "profile", "tags": tags, "new_in_window": False, "stats": {
        "value": total, "samples": sum(s for _, _, s in frames), "rate": total / covered,
        "frames": [{"name": n, "value": v, "samples": s, "share": v / total, "rate": v / covered,
                    "mean": v / s} for n, v, s in frames], "frames_omitted": 0, "frames_idle": 0}}


def base_payload():
    return {"profiler": {"version": "test"}, "payload_ns": int(NOW * 1e9), "start_ns": int((NOW - 75) * 1e9),
            "context": {"instance.id": "abc123", "host.name": "box"}, "metrics": [], "errors": [], "resources": []}


def two_process_payload():
    p = base_payload()
    t1 = {"process.pid": "100", "device.cuda_index": "0"}
    t2 = {"process.pid": "200", "device.cuda_index": "1"}
    p["metrics"] = [
        profile("cuda_kernels_nanoseconds", t1, [(GEMM, 9_000_000, 300), (FILL, 1_000_000, 1000)]),
        profile("cuda_kernels_nanoseconds", t2, [(GEMM, 3_000_000, 100), (NCCL, 4_000_000, 50)]),
    ]
    p["window"] = {"seconds": 5, "start_ns": 0, "end_ns": 5, "covered_seconds": 5.0, "partial": False, "snapshots": 6,
                   "metrics": [wprofile("cuda_kernels_nanoseconds", t1, [(GEMM, 1_000_000, 40), (FILL, 500_000, 500)]),
                               wprofile("cuda_kernels_nanoseconds", t2, [(NCCL, 2_500_000, 25), (GEMM, 1_000_000, 40)])]}
    return p


@pytest.fixture
def state():
    return TopState("127.0.0.1:18259", 5, names=kernel_names.Names(), clock=lambda: NOW)


def frame(state, payload=None, ui=None, width=None, height=None, unicode=True):
    if payload is not None:
        state.update(payload)
    lines = render(state.model, ui or UI(), width=width, height=height, now=NOW, unicode=unicode)
    return [line_text(ln) for ln in lines]


def test_reference_payload_shows_every_section(state):
    text = "\n".join(frame(state, reference()))
    for heading in (" graphsignal-top ", " HOST ", " GPU", " ENGINE ", " PROBES ", " ERRORS ", "[k]ernels",
                    "[g]raphs", "[m]emory", "[s]ync"):
        assert heading in text
    assert "NVIDIA H200" in text and "util  10%" in text and "140.4 GiB" in text and "122 / 700 W" in text
    assert "temp 39 C" in text and "sm 1980 / 1980 MHz" in text and "gen5 x16" in text
    assert "throttle gpu_idle" in text and "cuda graph trace: graph" in text
    assert "memory" in text and "vectorized_elementwise_kernel<FillFunctor>" in text
    assert "pid 1516" in text and "bench/workloads.py" in text
    assert "no engine metrics" in text and "no probe metrics" in text


def test_sections_without_data_say_so(state):
    text = "\n".join(frame(state, base_payload()))
    assert "no GPU telemetry" in text
    assert "no engine metrics" in text
    assert "no probe metrics" in text
    assert "no host metrics" in text
    assert "ERRORS none" in text
    assert "no CUDA kernel profile" in text
    text = "\n".join(frame(state, base_payload(), UI("graphs")))
    assert "no CUDA graph profile" in text


def test_kernel_ranking_covers_the_window_and_sums_processes(state):
    lines = frame(state, two_process_payload())
    rows = [ln for ln in lines if "%" in ln and ("gemm" in ln or "communication" in ln or "memory" in ln)]
    # window: nccl 2.5 ms, gemm 2.0 ms, fill 0.5 ms of 5.0 ms
    assert "ncclDevKernel" in rows[0] and "50.0%" in rows[0] and "500.0 us" in rows[0]
    assert "sm90_xmma_gemm" in rows[1] and "40.0%" in rows[1] and "16" in rows[1]  # 80 calls / 5 s
    assert "FillFunctor" in rows[2] and "10.0%" in rows[2]
    assert "12.00 ms" in rows[1]  # gemm since start over both processes
    assert any("last 5.0 s" in ln for ln in lines)


def test_details_show_symbol_totals_and_process_split(state):
    ui = UI()
    state.update(two_process_payload())
    ui.selected, ui.details = 1, True  # the GEMM
    text = "\n".join(frame(state, ui=ui, width=160, height=40))
    assert "DETAILS" in text and "category   gemm" in text
    assert GEMM[:100] in text.replace("\n              ", "")
    assert "since start  time 12.00 ms  calls 400" in text
    assert "pid 100 cuda:0" in text and "pid 200 cuda:1" in text
    i100, i200 = text.index("pid 100 cuda:0"), text.index("pid 200 cuda:1")
    assert "9.00 ms" in text[i100:text.index("\n", i100)] and "3.00 ms" in text[i200:text.index("\n", i200)]


def test_demangled_name_in_details(state):
    ui = UI()
    state.update(two_process_payload())
    ui.selected, ui.details = 2, True
    text = "\n".join(frame(state, ui=ui, width=200, height=40))
    assert "symbol     " + FILL in text
    assert "demangled  void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>" in text


@pytest.mark.parametrize("width,height", [(160, 50), (80, 24), (60, 12), (200, 6), (40, 3), (120, 1)])
def test_interactive_frame_fits_the_terminal_exactly(state, width, height):
    lines = frame(state, reference(), width=width, height=height)
    assert len(lines) == height
    assert all(len(ln) <= width for ln in lines)
    if height > 1:
        assert "q quit" in lines[-1]


def test_small_terminal_drops_sections_before_the_table(state):
    payload = two_process_payload()
    payload["metrics"].append(metric("myprobe_latency_nanoseconds", "histogram", {"process.pid": "100"},
                                     count=3, sum=30, p50=10, p95=10))
    lines = frame(state, payload, width=100, height=11)
    text = "\n".join(lines)
    assert "[k]ernels" in text and "ncclDevKernel" in text and "vectorized_elementwise" in text
    assert "PROBES" not in text  # the least important section went first
    assert lines[0].startswith(" graphsignal-top")
    assert "TOTAL" not in text or len(lines[0]) <= 100


def test_narrow_terminal_keeps_names_readable(state):
    lines = frame(state, two_process_payload(), width=80, height=30)
    row = next(ln for ln in lines if "ncclDevKernel" in ln)
    assert "ncclDevKernel_AllReduce" in row


def test_selection_scrolls_into_view_and_is_highlighted(state):
    p = base_payload()
    t = {"process.pid": "1"}
    names = ["triton_poi_fused_add_%d" % i for i in range(40)]
    p["metrics"] = [profile("cuda_kernels_nanoseconds", t, [(n, 1000 * (40 - i), 1) for i, n in enumerate(names)])]
    p["window"] = {"seconds": 5, "covered_seconds": 5.0, "partial": False,
                   "metrics": [wprofile("cuda_kernels_nanoseconds", t,
                                        [(n, 1000 * (40 - i), 1) for i, n in enumerate(names)])]}
    state.update(p)
    ui = UI()
    ui.selected = 33
    lines = render(state.model, ui, width=120, height=20, now=NOW)
    sel = [line_text(ln) for ln in lines if any(style == "sel" and "triton" in text for text, style in ln)]
    assert len(sel) == 1 and sel[0].rstrip().endswith("triton_poi_fused_add_33")


def test_unreachable_endpoint_keeps_the_last_frame_and_says_so(state):
    state.update(two_process_payload())
    state.update(None, "connection refused")
    text = "\n".join(frame(state, width=160, height=40))
    assert "127.0.0.1:18259 unreachable: connection refused; retrying every second" in text
    assert "ncclDevKernel" in text  # the last data stays on screen
    fresh = TopState("h:1", 5, clock=lambda: NOW)
    fresh.update(None, "timed out")
    text = "\n".join(frame(fresh, width=160, height=30))
    assert "unreachable: timed out" in text and "waiting for data" in text


def lat(count, p50, p95):
    return {"count": count, "mean": p50, "p50": p50, "p95": p95, "p99": p95}


def engine_summary_doc(window=True):
    # the shape of graphsignal.engine_summary's document
    return {"engine": "vllm", "requests_running": 7, "requests_waiting": 2, "kv_cache_usage_percent": 42.0,
            "prompt_tokens_total": 10_000, "generation_tokens_total": 4_000,
            "ttft_seconds": lat(100, 0.050, 0.200), "itl_seconds": lat(5000, 0.010, 0.030), "tpot_seconds": None,
            "e2e_seconds": lat(100, 2.0, 4.0), "sources": {},
            "window": {"seconds": 5.0, "prompt_tokens_per_second": 1500.0, "generation_tokens_per_second": 320.0,
                       "ttft_seconds": lat(10, 0.045, 0.120), "itl_seconds": lat(800, 0.012, 0.020),
                       "tpot_seconds": None, "e2e_seconds": lat(0, None, None)} if window else None}


def test_engine_block_from_the_payload_summary(state):
    p = base_payload()
    p["engine"] = engine_summary_doc()
    text = "\n".join(frame(state, p))
    assert "ENGINE vllm" in text and "running 7" in text and "waiting 2" in text and "kv-cache 42.0%" in text
    assert "tokens/s (last 5s) prompt 1500 gen 320" in text
    # windowed quantiles where requests finished in the window, else since start (and said so)
    assert "TTFT p50 45.00 ms p95 120.00 ms" in text and "inter-token p50 12.00 ms p95 20.00 ms" in text
    assert "end-to-end p50 2.00 s p95 4.00 s (since start)" in text
    assert "TPOT" not in text


def test_engine_block_before_the_first_window(state):
    p = base_payload()
    p["engine"] = engine_summary_doc(window=False)
    text = "\n".join(frame(state, p))
    assert "tokens/s prompt - gen -" in text and "TTFT p50 50.00 ms p95 200.00 ms (since start)" in text


def test_engine_block_of_llama_server(state):
    # the summary engine_summary makes of llama-server's metrics (tests/test_engine_summary_llamacpp.py)
    doc = engine_summary_doc()
    doc.update(engine="llamacpp", kv_cache_usage_percent=None, ttft_seconds=None, e2e_seconds=None,
               itl_seconds={"count": 112, "mean": 0.00093, "p50": None, "p95": None, "p99": None},
               prompt_seconds_per_token=0.000181, busy_slots_per_decode=1.0, decode_calls_total=112,
               decode_tokens_per_second_per_request=1079.2)
    doc["window"].update(ttft_seconds=None, e2e_seconds=None, busy_slots_per_decode=3.5,
                         itl_seconds={"count": 512, "mean": 0.0031, "p50": None, "p95": None, "p99": None},
                         prompt_seconds_per_token=None, decode_tokens_per_second_per_request=322.6)
    p = base_payload()
    p["engine"] = doc
    text = "\n".join(frame(state, p))
    assert "ENGINE llamacpp" in text and "kv-cache -" in text
    assert "TTFT p50 - p95 -" in text and "inter-token mean 3.10 ms" in text and "TPOT" not in text
    # window values where the window has them, else since start
    assert "prompt 181.0 us/token" in text
    assert "busy slots/decode 3.50" in text and "decode 323 tokens/s per request" in text


def test_engine_null_in_the_payload_means_no_engine(state):
    p = base_payload()
    p["engine"] = None
    assert "no engine metrics" in "\n".join(frame(state, p))


def test_engine_summary_computed_here_for_a_payload_without_one(state):
    es = pytest.importorskip("graphsignal.engine_summary")
    assert callable(getattr(es, "summarize", None))

    def payload(t, running, gen_total, ttft_counts):
        p = base_payload()
        p["payload_ns"] = int((NOW + t) * 1e9)
        p["metrics"] = [metric("vllm:num_requests_running", "gauge", {}, value=running),
                        metric("vllm:num_requests_waiting", "gauge", {}, value=0),
                        metric("vllm:kv_cache_usage_perc", "gauge", {}, value=0.5),
                        metric("vllm:prompt_tokens_total", "counter", {}, total=gen_total * 2),
                        metric("vllm:generation_tokens_total", "counter", {}, total=gen_total),
                        metric("vllm:time_to_first_token_seconds", "histogram", {}, count=sum(ttft_counts),
                               sum=0.06 * sum(ttft_counts), bins=[0.05, 0.1, None], counts=ttft_counts)]
        return p

    text = "\n".join(frame(state, payload(0, 3, 1000, [5, 5, 0])))
    assert "ENGINE vllm" in text and "running 3" in text and "kv-cache 50.0%" in text
    text = "\n".join(frame(state, payload(2, 4, 1600, [5, 15, 0])))
    assert "running 4" in text and "gen 300" in text  # (1600 - 1000) tokens / 2 s


def test_engine_view_tolerates_missing_and_odd_summaries():
    assert engine_view(None) is None and engine_view({}) is None and engine_view([1]) is None
    v = engine_view({"engine": "sglang", "requests_running": 1, "window": "odd", "ttft_seconds": "odd"})
    assert v["name"] == "sglang" and v["running"] == 1 and v["waiting"] is None and v["ttft_p50"] is None


def test_gpu_block_with_xid_throttling_and_sparkline(state):
    p = base_payload()
    tags = dict(GPU_TAGS)
    p["resources"] = [{"kind": "device", "tags": tags, "attributes": {"device.name": "NVIDIA H200"}}]
    p["metrics"] = [metric("gpu_utilization_percent", "gauge", tags, value=90.0),
                    metric("gpu_xid_errors", "counter", tags, total=2),
                    metric("gpu_clocks_throttle_reason_active", "gauge", dict(tags, reason="sw_thermal_slowdown"),
                           value=1),
                    metric("gpu_clocks_throttle_reason_active", "gauge", dict(tags, reason="gpu_idle"), value=0)]
    for util in (10.0, 50.0, 90.0):
        p["metrics"][0]["stats"]["value"] = util
        state.update(copy.deepcopy(p))
    text = "\n".join(frame(state))
    assert "0  NVIDIA H200" in text and "util  90%" in text
    assert "\u2582\u2585\u2587" in text  # 10, 50, 90 of 100 in eight steps
    assert "xid 2" in text and "throttle sw_thermal_slowdown" in text


def test_memory_table_shows_bytes_and_host_memory(state):
    p = base_payload()
    t = {"process.pid": "7", "device.cuda_index": "0", "host_memory": "pageable"}
    p["metrics"] = [profile("cuda_memcpy_nanoseconds", t, [("host_to_device", 2_000_000, 20)]),
                    metric("cuda_memcpy_bytes", "counter", dict(t, kind="host_to_device"), total=20 << 20)]
    p["window"] = {"seconds": 5, "covered_seconds": 5.0, "partial": False, "metrics": [
        wprofile("cuda_memcpy_nanoseconds", t, [("host_to_device", 1_000_000, 10)]),
        {"name": "cuda_memcpy_bytes", "type": "counter", "tags": dict(t, kind="host_to_device"),
         "stats": {"delta": 10 << 20, "rate": (10 << 20) / 5, "total": 20 << 20, "reset": False}}]}
    text = "\n".join(frame(state, p, UI("memory")))
    row = next(ln for ln in text.split("\n") if "memcpy host_to_device (pageable)" in ln)
    assert "2.0 MiB" in row and "20.0 MiB" in row and "100.0%" in row


def test_graph_table_in_node_mode_says_where_kernels_went(state):
    p = base_payload()
    p["metrics"] = [metric("cuda_graph_trace_mode", "gauge", {"process.pid": "1"}, value=1),
                    profile("cuda_graphs_nanoseconds", {"process.pid": "1"}, [])]
    text = "\n".join(frame(state, p, UI("graphs")))
    assert "cuda graph trace: node" in text and "node mode" in text and "no CUDA graph replays yet" in text


def test_cuda_tables_of_a_run_without_cuda_tracing_say_why_they_are_empty(state):
    p = base_payload()
    p["context"]["cuda.trace"] = "off"
    text = "\n".join(frame(state, p, UI("kernels")))
    assert "cuda trace: off" in text and "CUDA tracing is off (--cuda-trace off): no CUDA activity" in text
    assert "no CUPTI data" not in text


def test_probes_and_errors(state):
    p = base_payload()
    tags = {"process.pid": "9"}
    p["metrics"] = [metric("myengine_batch_duration_nanoseconds", "histogram", tags, count=10, sum=10,
                           p50=1_000_000, p95=2_000_000),
                    metric("myengine_tokens", "counter", tags, total=640),
                    metric("vllm:num_requests_running", "gauge", {}, value=1),
                    metric("prometheus_scrape_up", "gauge", {"engine": "vllm"}, value=1),
                    metric("time_to_first_token_seconds", "histogram", {}, count=1, sum=1)]
    p["errors"] = [{"level": "error", "message": "CUDA error: out of memory", "exception": None, "tags": {},
                    "timestamp_ns": int(NOW * 1e9), "last_ns": int(NOW * 1e9), "count": 3}]
    text = "\n".join(frame(state, p))
    assert "PROBES 2 series" in text  # engine metrics are not probes
    assert "myengine_batch_duration_nanoseconds pid 9" in text and "p50 1.00 ms" in text
    assert "myengine_tokens pid 9" in text and "total 640" in text
    assert "ERRORS 3" in text and "CUDA error: out of memory (x3)" in text


def test_resolved_errors_say_so(state):
    p = base_payload()
    t = int(NOW * 1e9)
    p["errors"] = [{"level": "warning", "message": "scraping http://127.0.0.1:8080/metrics failed: HTTP 500",
                    "exception": None, "tags": {"source": "prometheus"}, "timestamp_ns": t - 20 * 10 ** 9,
                    "last_ns": t - 20 * 10 ** 9, "count": 1, "resolved_ns": t - 10 * 10 ** 9},
                   {"level": "error", "message": "CUDA error: out of memory", "exception": None, "tags": {},
                    "timestamp_ns": t, "last_ns": t, "count": 1, "resolved_ns": None}]
    lines = [x for x in frame(state, p) if "failed: HTTP 500" in x or "out of memory" in x]
    assert len(lines) == 2
    resolved = time.strftime("%H:%M:%S", time.localtime(NOW - 10))
    assert lines[1].endswith("HTTP 500 (resolved %s)" % resolved)
    assert "resolved" not in lines[0]


def test_no_window_endpoint_falls_back_to_totals(state):
    p = two_process_payload()
    del p["window"]
    text = "\n".join(frame(state, p))
    assert "totals since start (no window from the endpoint)" in text
    assert text.index("sm90_xmma") < text.index("ncclDevKernel")  # by totals: gemm 12 ms first


def test_colors_ascii_and_plain_text(state):
    state.update(reference())
    lines = render(state.model, UI(), now=NOW)
    assert "\x1b[" in to_text(lines, color=True)
    assert "\x1b[" not in to_text(lines, color=False)
    ascii_text = to_text(render(state.model, UI(), width=100, height=30, now=NOW, unicode=False))
    assert all(ord(c) < 128 for c in ascii_text)
    assert sparkline([0, 50, 100, None], 4, Glyphs(False), vmax=100) == "_=# "


class FakeTTY(io.StringIO):
    encoding = "utf-8"

    def isatty(self):
        return True


@pytest.mark.parametrize("argv,env,tty,colored", [
    ([], {}, True, True),
    ([], {"NO_COLOR": "1"}, True, False),
    (["--no-color"], {}, True, False),
    ([], {}, False, False),  # a pipe or file: never colored
    ([], {"NO_COLOR": ""}, True, True),  # an empty NO_COLOR does not count
])
def test_once_colors_follow_no_color_and_the_flag(monkeypatch, argv, env, tty, colored):
    payload = reference()
    monkeypatch.setattr(screen, "fetch", lambda host, port, window: (payload, None, None))
    out = FakeTTY() if tty else io.StringIO()
    assert screen.run_once(cli.parse(["--once"] + argv), out=out, environ=env) == 0
    assert ("\x1b[" in out.getvalue()) == colored
    assert "NVIDIA H200" in out.getvalue()


def test_once_unreachable_prints_the_frame_and_fails(monkeypatch):
    monkeypatch.setattr(screen, "fetch", lambda host, port, window: (None, "connection refused", None))
    out = io.StringIO()
    assert screen.run_once(cli.parse(["--once", "--port", "9"]), out=out, environ={}) == 1
    assert "127.0.0.1:9 unreachable: connection refused" in out.getvalue()
    assert "retrying" not in out.getvalue()


def test_config_parsing():
    c = cli.parse([])
    assert (c.host, c.port, c.window, c.once, c.no_color, c.table) == ("127.0.0.1", 18259, 5, False, False, "kernels")
    c = cli.parse(["--host", "gpu-box", "--port", "9000", "--window", "600", "--once", "--table", "sync"])
    assert (c.host, c.port, c.window, c.once, c.table) == ("gpu-box", 9000, 600, True, "sync")
    for bad in (["--window", "0"], ["--window", "601"], ["--window", "x"], ["--port", "0"], ["--port", "70000"],
                ["--table", "nope"], ["--bogus"]):
        with pytest.raises(args.UsageError):
            cli.parse(bad)
        assert cli.main(bad) == 2


def test_keys_switch_tables_move_and_open_details(state):
    import curses
    state.update(two_process_payload())
    m = state.model
    ui = UI()
    assert screen.handle_key(curses.KEY_DOWN, ui, m) and ui.selected == 1
    assert screen.handle_key(curses.KEY_DOWN, ui, m) and screen.handle_key(curses.KEY_DOWN, ui, m) and ui.selected == 2
    assert screen.handle_key(curses.KEY_UP, ui, m) and ui.selected == 1
    assert screen.handle_key(10, ui, m) and ui.details
    assert screen.handle_key(27, ui, m) and not ui.details
    for key, table in (("g", "graphs"), ("m", "memory"), ("s", "sync"), ("k", "kernels")):
        assert screen.handle_key(ord(key), ui, m) and ui.table == table and not ui.details
    assert ui.selected == 0  # a new table starts at the top
    assert screen.handle_key(ord("g"), ui, m) and screen.handle_key(10, ui, m) and not ui.details  # no rows: no details
    assert not screen.handle_key(ord("q"), ui, m)


def test_selection_follows_the_kernel_when_the_ranking_changes(state):
    state.update(two_process_payload())
    ui = UI()
    ui.selected = 1
    screen.follow_selection(ui, state.model)
    key = ui.selected_key
    assert key == GEMM
    p = two_process_payload()
    p["window"]["metrics"][0]["stats"]["frames"][0]["value"] = 10_000_000  # GEMM jumps to the top
    state.update(p)
    screen.follow_selection(ui, state.model)
    assert ui.selected == 0 and ui.selected_key == GEMM


def _rows(lines, *needles):
    return [next(ln for ln in lines if n in ln and "%" in ln) for n in needles]


def test_several_processes_get_a_pid_column_saying_whose_a_row_is(state):
    lines = frame(state, two_process_payload(), width=160)
    head = next(ln for ln in lines if "CATEGORY" in ln)
    assert head.split()[-2:] == ["PID", "NAME"]
    nccl, gemm, fill = _rows(lines, "ncclDevKernel", "sm90_xmma_gemm", "FillFunctor")
    assert " 200 ncclDevKernel" in nccl and " 100 vectorized_elementwise_kernel" in fill
    assert "2 pids sm90_xmma_gemm" in gemm  # both ran it: the details view splits it


def test_ranked_processes_get_a_rank_column(state):
    p = two_process_payload()
    for m in p["metrics"] + p["window"]["metrics"]:
        m["tags"]["rank"] = "0" if m["tags"]["process.pid"] == "100" else "1"
    lines = frame(state, p, width=160)
    assert next(ln for ln in lines if "CATEGORY" in ln).split()[-2:] == ["RANK", "NAME"]
    nccl, gemm, fill = _rows(lines, "ncclDevKernel", "sm90_xmma_gemm", "FillFunctor")
    assert " 1 ncclDevKernel" in nccl and " 0-1 sm90_xmma_gemm" in gemm and " 0 vectorized_elementwise" in fill


def test_one_process_has_no_pid_column(state):
    p = two_process_payload()
    p["metrics"] = p["metrics"][:1]
    p["window"]["metrics"] = p["window"]["metrics"][:1]
    head = next(ln for ln in frame(state, p, width=160) if "CATEGORY" in ln)
    assert "PID" not in head and "RANK" not in head


def test_rank_ranges_and_counts():
    from graphsignal.top.tables import Row, who_cell

    r = Row("k", "k")
    r.ranks, r.pids = {"0", "1", "2", "3", "6"}, {"1", "2", "3", "4", "5"}
    assert who_cell(r, "RANK") == "0-3,6" and who_cell(r, "PID") == "5 pids"
    r.ranks = {str(i) for i in range(0, 64, 2)}
    assert who_cell(r, "RANK") == "32 ranks"  # ranges would not fit the column


def test_the_table_uses_the_display_names_the_sidecar_sent(state):
    p = two_process_payload()
    sgemm = "_ZN7cutlass7Kernel2I42cutlass_80_simt_sgemm_128x64_8x5_nn_align1EEvNT_6ParamsE"
    for m in p["metrics"] + p["window"]["metrics"]:
        for f in m["stats"]["frames"]:
            if f["name"] == GEMM:
                f["name"] = sgemm
    text = "\n".join(frame(state, p, width=160))
    # computed here the same way the sidecar computes them
    assert "Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>" in text
    for m in p["metrics"]:
        for f in m["stats"]["frames"]:
            f["display_name"], f["category"] = "name from the sidecar", "attention"
    text = "\n".join(frame(state, p, width=160))
    assert "name from the sidecar" in text and "attention" in text
