"""Sampled CUDA graph timing in the real injection library, run against the
stand-in libcupti (tests/support/cupti/fake_cupti.cpp), whose graph
launches reach the library's launch callbacks with correlation ids and
whose records follow one of three models of CUPTI (the questions
scripts/bench_graph_toggle.py asks a real one):

  0  per launch: GRAPH_TRACE on -> a graph record; off with kernel tracing
     on -> a record per node kernel
  1  per launch: GRAPH_TRACE on -> a graph record; off -> nothing
  2  as at instantiation: the kinds on when the executable was made decide

The library's probe must find out which one it runs against: sample where
the switch takes (graph mode under 1, node mode under 0), trace every
replay where it does not, and in every case count every replay exactly
once (records of constant duration make the estimates exact too).

Skips where no C++ compiler or CUPTI/CUDA headers are found."""
import pytest

from test_cupti_collector import fnv_name, libs, run_child  # noqa: F401  # libs: the fixture, built once

NS = 1000
FAST = dict(GRAPHSIGNAL_CUPTI_GRAPH_SAMPLE_MS=20, GRAPHSIGNAL_CUPTI_GRAPH_SAMPLE_PERIOD_MS=150,
            GRAPHSIGNAL_CUPTI_FLUSH_MS=100, GRAPHSIGNAL_LOG_LEVEL="debug")
SAMPLING = "timed in sampling windows"
FULL = "traced in full from now on"


def split(store, metric):
    """{(duration tag, count tag): {frame: (value, samples)}} over non-empty series."""
    out = {}
    for s in store.lookup(metric, "profile"):
        if not s.frames:
            continue
        key = (s.tags.get("duration"), s.tags.get("count"))
        fr = out.setdefault(key, {})
        for f, (v, n) in s.frames.items():
            pv, pn = fr.get(f, (0, 0))
            fr[f] = (pv + v, pn + n)
    return out


def total(parts):
    out = {}
    for fr in parts.values():
        for f, (v, n) in fr.items():
            pv, pn = out.get(f, (0, 0))
            out[f] = (pv + v, pn + n)
    return out


def graph_run(libs, model, threads=1, rounds=200, per_round=10, pause_us=10000, spec="k:a;k:b;k:a",  # noqa: F811
              extra_steps=(), **env):
    steps = [["call", "graph_model", model], ["call", "set_context", 5, 0],
             ["save", "g", "graph", spec, 3], ["call", "instantiate", 0x100, "$g", 21, 0, 0]]
    steps += list(extra_steps)
    steps += [["call", "graph_launch_threads", threads, rounds, per_round, pause_us, 0x100, NS], ["complete"]]
    return run_child(libs, steps, **dict(FAST, **env))


@pytest.mark.parametrize("threads", [1, 4])
def test_graph_mode_samples_where_switching_graph_trace_off_stops_records(libs, threads):  # noqa: F811
    out, store, err = graph_run(libs, model=1, threads=threads, rounds=200 // threads)
    name = fnv_name(["a", "b", "a"])
    parts = split(store, "cuda_graphs_nanoseconds")
    # every replay counted once, whether by its record (before the probe) or by its launch callback
    assert total(parts) == {name: (2000 * NS, 2000)}, (parts, err[-3000:])
    assert parts[("sampled", None)][name][1] > 1000  # most of them sampled
    assert SAMPLING in err and FULL not in err
    assert "CUDA graph timing sampling" in err  # the exit line says where it ended


@pytest.mark.parametrize("model,why", [(0, "traced the nodes"), (2, "still recorded")])
def test_graph_mode_traces_in_full_where_the_switch_does_not_take(libs, model, why):  # noqa: F811
    out, store, err = graph_run(libs, model=model)
    name = fnv_name(["a", "b", "a"])
    parts = split(store, "cuda_graphs_nanoseconds")
    assert total(parts) == {name: (2000 * NS, 2000)}, (parts, err[-3000:])
    assert FULL in err and why in err, err[-3000:]
    # the probe's launches are estimated; the rest counted by their records again
    assert parts[(None, None)][name][1] > 1500
    assert "every replay traced" in err
    # node records the probe provoked are never counted as kernels
    assert split(store, "cuda_kernels_nanoseconds") == {}


def test_graph_mode_trusting_the_switch_without_a_probe(libs):  # noqa: F811
    out, store, err = graph_run(libs, model=1, threads=4, rounds=50, GRAPHSIGNAL_CUPTI_GRAPH_PROBE=0)
    parts = split(store, "cuda_graphs_nanoseconds")
    assert total(parts) == {fnv_name(["a", "b", "a"]): (2000 * NS, 2000)}, (parts, err[-3000:])
    assert "not probed first" in err


def test_node_mode_counts_kernels_from_the_walk_and_samples_their_time(libs):  # noqa: F811
    out, store, err = graph_run(libs, model=0, GRAPHSIGNAL_CUDA_GRAPH_TRACE="node")
    parts = split(store, "cuda_kernels_nanoseconds")
    assert total(parts) == {"a": (4000 * NS, 4000), "b": (2000 * NS, 2000)}, (parts, err[-3000:])
    assert ("sampled", None) in parts and ("sampled", "estimated") not in parts
    assert SAMPLING in err and FULL not in err
    assert split(store, "cuda_graphs_nanoseconds") == {}  # node mode: kernels, not graph frames


def test_node_mode_counts_of_an_executable_changed_in_place_are_estimated(libs):  # noqa: F811
    out, store, err = graph_run(libs, model=0, extra_steps=[["call", "exec_call", 0x100, 0]],
                                GRAPHSIGNAL_CUDA_GRAPH_TRACE="node")
    parts = split(store, "cuda_kernels_nanoseconds")
    est = parts.get(("sampled", "estimated"), {})
    assert est and set(est) == {"a", "b"}, (parts, err[-3000:])
    # the windows saw 2 a and 1 b per replay: the estimate lands on the count
    got = total(parts)
    assert abs(got["a"][1] - 4000) <= 2 and abs(got["b"][1] - 2000) <= 2, got


def test_node_mode_traces_every_node_where_graph_trace_does_not_hide_them(libs):  # noqa: F811
    out, store, err = graph_run(libs, model=2, GRAPHSIGNAL_CUDA_GRAPH_TRACE="node")  # instantiated with nodes traced
    parts = split(store, "cuda_kernels_nanoseconds")
    assert total(parts) == {"a": (4000 * NS, 4000), "b": (2000 * NS, 2000)}, (parts, err[-3000:])
    assert FULL in err


def test_the_activity_collection_and_sample_ms_0_count_every_replay_by_its_record(libs):  # noqa: F811
    for env in ({"GRAPHSIGNAL_CUPTI_COLLECTION": "activity"}, {"GRAPHSIGNAL_CUPTI_GRAPH_SAMPLE_MS": 0}):
        out, store, err = graph_run(libs, model=1, rounds=20, **env)
        parts = split(store, "cuda_graphs_nanoseconds")
        assert parts == {(None, None): {fnv_name(["a", "b", "a"]): (200 * NS, 200)}}, (env, parts)
        assert "graph replays by activity" in err


def test_a_destroyed_executable_handle_reused_for_another_graph_counts_for_the_new_one(libs):  # noqa: F811
    steps = [["call", "graph_model", 1], ["call", "set_context", 5, 0],
             ["save", "g", "graph", "k:a", 3], ["save", "h", "graph", "k:z;k:z", 4],
             ["call", "instantiate", 0x100, "$g", 21, 0, 0],
             ["call", "graph_launch_threads", 1, 60, 10, 10000, 0x100, NS],
             ["call", "exec_call", 0x100, 1], ["call", "instantiate", 0x100, "$h", 22, 0, 0],
             ["call", "graph_launch_threads", 1, 60, 10, 10000, 0x100, 2 * NS], ["complete"]]
    out, store, err = run_child(libs, steps, **FAST)
    got = total(split(store, "cuda_graphs_nanoseconds"))
    assert got == {fnv_name(["a"]): (600 * NS, 600), fnv_name(["z", "z"]): (600 * 2 * NS, 600)}, (got, err[-3000:])


def test_node_mode_attributes_a_conditional_bodys_kernels_to_the_replay_that_ran_them(libs):  # noqa: F811
    # the body's records carry a graph id no frame knows; the launch they came from does
    out, store, err = graph_run(libs, model=0, spec="k:a;c:body_k", GRAPHSIGNAL_CUDA_GRAPH_TRACE="node")
    parts = split(store, "cuda_kernels_nanoseconds")
    got = total(parts)
    assert set(got) == {"a", "body_k"} and ("sampled", "estimated") in parts, (parts, err[-3000:])
    assert abs(got["a"][1] - 2000) <= 2 and abs(got["body_k"][1] - 2000) <= 2, got


def test_node_mode_traces_every_node_once_a_graph_is_made_for_device_launch(libs):  # noqa: F811
    steps = [["call", "graph_model", 0], ["call", "set_context", 5, 0],
             ["save", "g", "graph", "k:a;k:b", 3], ["call", "instantiate", 0x100, "$g", 21, 0, 0],
             ["call", "graph_launch_threads", 1, 60, 10, 10000, 0x100, NS],
             ["save", "d", "graph", "k:dev", 4], ["call", "instantiate_flags", 0x200, "$d", 22, 4 | 1],
             ["call", "graph_launch_threads", 1, 60, 10, 10000, 0x100, NS], ["complete"]]
    out, store, err = run_child(libs, steps, GRAPHSIGNAL_CUDA_GRAPH_TRACE="node", **FAST)
    assert "instantiated for device launch" in err and FULL in err, err[-3000:]
    assert total(split(store, "cuda_kernels_nanoseconds")) == {"a": (1200 * NS, 1200), "b": (1200 * NS, 1200)}
