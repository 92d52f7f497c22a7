"""The payload's model (graphsignal.signals_model) sits below the store, the
payload renderer and the engine summary: the three import it, it imports
none of them, and no import path leads from one of them back to itself.
The graph is read from the source (tests/support/imports.py), with
imports inside functions and under TYPE_CHECKING counted too."""
import pytest

from graphsignal.signals_model import StoreSnapshot
from graphsignal.sidecar.store import MetricStore
from support import imports

MODULES = ["graphsignal.signals_model", "graphsignal.engine_summary", "graphsignal.sidecar.payload",
           "graphsignal.sidecar.store", "graphsignal.sidecar.history"]


def test_the_engine_summary_imports_nothing_of_the_sidecar():
    # graphsignal-top and graphsignal-diff call it on /signals documents
    reached = imports.reachable("graphsignal.engine_summary")
    assert "graphsignal.signals_model" in reached
    assert sorted(m for m in reached if m.startswith("graphsignal.sidecar")) == []


def test_the_model_imports_nothing_of_graphsignal():
    assert imports.imports_of("graphsignal.signals_model") <= {"graphsignal"}


@pytest.mark.parametrize("module", MODULES)
def test_no_import_path_leads_back(module):
    g = imports.graph(MODULES)
    assert imports.cycle_through(g, module) is None


def test_the_walker_sees_a_type_checking_import_and_a_cycle(tmp_path, monkeypatch):
    # what the old tree had: the store importing the payload's types for type checking only
    pkg = tmp_path / "graphsignal"
    (pkg / "sidecar").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sidecar" / "__init__.py").write_text("")
    (pkg / "sidecar" / "store.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from graphsignal.sidecar.payload import X\n")
    (pkg / "sidecar" / "payload.py").write_text("def f():\n    from graphsignal.sidecar import store\n")
    monkeypatch.setattr(imports, "ROOT", str(tmp_path))
    g = imports.graph(["graphsignal.sidecar.store"])
    assert imports.cycle_through(g, "graphsignal.sidecar.store") == [
        "graphsignal.sidecar.store", "graphsignal.sidecar.payload", "graphsignal.sidecar.store"]


def test_a_snapshot_is_immutable_and_lists_series_in_the_order_they_were_made():
    s = MetricStore(max_frames=7)
    s.set_gauge("b", {}, 1)
    s.set_gauge("a", {}, 2)
    s.set_counter("b", {"x": "1"}, 3)
    snap = s.snapshot()
    assert isinstance(snap, StoreSnapshot)
    with pytest.raises(AttributeError):
        snap.taken_ns = 0
    assert [v.name for v in snap.series] == ["a", "b", "b"]  # payload order
    assert [(v.name, v.type) for v in snap.named({"b", "a"})] == [("b", "gauge"), ("a", "gauge"), ("b", "counter")]
    assert snap.max_frames == 7
