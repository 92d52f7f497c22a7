"""graphsignal-top shows a gauge's value and its window's range from the
same tick: the live value is newer than the window's last tick, so beside
the window's min and max it could lie outside them (`value 3508  window
min 3525 max 3845`)."""
import re

from graphsignal.naming import kernels as kernel_names
from graphsignal.top.render import UI, render
from graphsignal.top.text import line_text
from graphsignal.top.state import TopState

NOW = 1_795_968_737.5
TAGS = {"process.pid": "7"}


def _payload(live, window):
    return {"profiler": {"version": "test"}, "payload_ns": int(NOW * 1e9), "start_ns": int((NOW - 75) * 1e9),
            "context": {"instance.id": "abc", "host.name": "box"}, "errors": [], "resources": [],
            "metrics": [{"name": "myapp_queue_depth", "type": "gauge", "tags": TAGS, "stats": {"value": live},
                         "updated_ns": 1}],
            "window": {"seconds": 5, "start_ns": 0, "end_ns": 5, "covered_seconds": 5.0, "partial": False,
                       "snapshots": 6, "metrics": [{"name": "myapp_queue_depth", "type": "gauge", "tags": TAGS,
                                                    "new_in_window": False, "stats": window}]}}


def _line(payload):
    st = TopState("127.0.0.1:18259", 5, names=kernel_names.Names(), clock=lambda: NOW)
    st.update(payload)
    lines = [line_text(ln) for ln in render(st.model, UI(), now=NOW, unicode=True)]
    (line,) = [ln for ln in lines if "myapp_queue_depth" in ln]
    return line


def test_a_gauges_value_lies_within_its_window():
    line = _line(_payload(3508, {"value": 3845, "min": 3525, "max": 3845, "mean": 3700.0, "samples": 6}))
    value, lo, hi = (int(x) for x in re.search(r"value (\d+)\s+window min (\d+) max (\d+)", line).groups())
    assert lo <= value <= hi, line
    assert value == 3845


def test_without_a_window_the_live_value_is_shown():
    p = _payload(3508, {})
    del p["window"]
    assert "value 3508" in _line(p)
