"""The history block's maths (graphsignal.timeline), from hand-made states:
gauges as read, counters and profiles as rates per second between
points, resets, gaps, grouping and its bounds."""
import pytest

from graphsignal import timeline

NS = 1_000_000_000


def block(states, times=None, seconds=4):
    """states: {key: (name, type, tags, [state at each point])}."""
    n = len(next(iter(states.values()))[3])
    times = times or [i * NS for i in range(n)]
    metas = [(k, v[0], v[1], v[2]) for k, v in states.items()]
    return timeline.block(times, metas, lambda k, i: states[k][3][i], seconds, 1)


def test_gauges_counters_and_profiles_per_point():
    b = block({
        "g": ("gpu_utilization_percent", "gauge", {"device.index": "0"}, [10, None, 30, float("nan")]),
        "c": ("cuda_memcpy_bytes", "counter", {"kind": "host_to_device"}, [100, 300, 50, 250]),
        "p": ("cuda_sync_nanoseconds", "profile", {}, [{"stream": (10, 1)}, {"stream": (30, 2)},
                                                       {"stream": (30, 2), "event": (5, 1)}, None]),
    }, times=[0, NS, 3 * NS, 4 * NS])
    by = {s["name"]: s for s in b["series"]}
    assert by["gpu_utilization_percent"]["values"] == [10, None, 30, None]
    # per second over each interval (the second is 2 s long); a counter that went down restarted from zero
    assert by["cuda_memcpy_bytes"]["values"] == [None, 200.0, 25.0, 200.0]
    sync = by["cuda_sync_nanoseconds"]
    assert sync["group"] == "frame" and sync["frames"] == {"event": [None, 0.0, 2.5, None],
                                                           "stream": [None, 20.0, 0.0, None]}
    assert b["times_ns"] == [0, NS, 3 * NS, 4 * NS] and b["start_ns"] == 0 and b["end_ns"] == 4 * NS


def test_unselected_series_are_left_out_and_the_rest_bounded():
    states = {i: ("process_memory_usage_bytes", "gauge", {"process.pid": str(i)}, [1, 2]) for i in range(250)}
    states["x"] = ("myapp_queue_depth", "gauge", {}, [1, 2])
    states["y"] = ("gpu_utilization_percent", "counter", {}, [1, 2])  # the right name, another type
    b = block(states)
    assert len(b["series"]) == timeline.MAX_SERIES and b["series_omitted"] == 250 - timeline.MAX_SERIES
    assert {s["name"] for s in b["series"]} == {"process_memory_usage_bytes"}


def test_kernels_group_by_category_and_frames_keep_the_largest():
    kernels = [{}, {"_Z4gemmPfS_S_i": (3000, 1), "ampere_sgemm_128x64_nn": (1000, 1), "_Z7softmaxPf": (500, 1)}]
    frames = [{}, {"r%02d" % i: (i + 1, 1) for i in range(20)}]
    b = block({"k": ("cuda_kernels_nanoseconds", "profile", {}, kernels),
               "n": ("nvtx_ranges_nanoseconds", "profile", {"nvtx.domain": "d"}, frames)})
    by = {s["name"]: s for s in b["series"]}
    assert by["cuda_kernels_nanoseconds"]["frames"] == {"gemm": [None, 4000.0], "normalization": [None, 500.0]}
    nv = by["nvtx_ranges_nanoseconds"]["frames"]
    assert len(nv) == timeline.MAX_GROUPS + 1
    assert nv[timeline.OTHER] == [None, float(sum(range(1, 20 - timeline.MAX_GROUPS + 1)))]
    assert nv["r19"] == [None, 20.0]


def test_no_points_and_one_point():
    assert timeline.block([], [], lambda k, i: None, 5, 1)["series"] == []
    b = block({"c": ("nvtx_marks", "counter", {}, [7])}, times=[NS])
    assert b["series"][0]["values"] == [None]


@pytest.mark.parametrize("name", sorted(timeline.SELECTED))
def test_every_selected_name_has_a_type(name):
    assert timeline.SELECTED[name] in ("gauge", "counter", "profile")
