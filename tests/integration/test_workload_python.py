"""A workload whose Python is not graphsignal's (uv tool install, another
venv, another Python version) still imports graphsignal.probes under
graphsignal-run, and nothing else it imports changes."""
import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest

from graphsignal.launch import injection
from support.gsrun import quiet_env, run_wrapped

WORKLOAD = textwrap.dedent(r"""
    import json, os, sys
    from graphsignal import probes
    h = probes.histogram("second_venv_ns", {"py": "%d.%d" % sys.version_info[:2]})
    for i in range(1, 101):
        h.record(i)
    extra = [p for p in sys.path if p not in json.loads(sys.argv[1])]
    print(json.dumps({"backend": probes.BACKEND, "active": h.active, "extra": extra,
                      "listing": {p: sorted(os.listdir(p)) for p in extra}}))
""")


def _other_python():
    """Another Python version if this machine has one (pyenv), else this one."""
    here = "%d.%d" % sys.version_info[:2]
    for py in sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3"))):
        v = subprocess.run([py, "-c", "import sys; print('%d.%d' % sys.version_info[:2], sys.version_info >= (3, 9))"],
                           capture_output=True, text=True).stdout.split()
        if v and v[0] != here and v[1] == "True":
            return py
    return sys.executable


@pytest.fixture(scope="module")
def second_venv(tmp_path_factory):
    """A bare venv: no graphsignal, no cffi, no numpy."""
    d = tmp_path_factory.mktemp("second") / "venv"
    subprocess.run([_other_python(), "-m", "venv", "--without-pip", str(d)], check=True, timeout=120)
    return str(d / "bin" / "python")


def _script(tmp_path, name, text):
    """A script file: its folder, not the current one (the checkout, which
    holds graphsignal), comes first on the workload's sys.path."""
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_second_venv_imports_probes_and_only_graphsignal_is_added(second_venv, tmp_path):
    for mod in ("graphsignal", "cffi"):
        probe = _script(tmp_path, "try_%s.py" % mod, "import %s\n" % mod)
        assert subprocess.run([second_venv, probe], capture_output=True).returncode != 0, mod
    show = _script(tmp_path, "sys_path.py", "import json, sys; print(json.dumps(sys.path))\n")
    bare = subprocess.run([second_venv, show], capture_output=True, text=True, check=True, env=quiet_env()).stdout
    proc, signals = run_wrapped([second_venv, _script(tmp_path, "workload.py", WORKLOAD), bare.strip()])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["backend"] == "ctypes" and out["active"] is True
    # one directory more on sys.path, holding graphsignal and nothing else
    assert len(out["extra"]) == 1 and list(out["listing"].values()) == [["graphsignal"]]
    assert os.path.realpath(os.path.join(out["extra"][0], "graphsignal")) == os.path.realpath(injection.PACKAGE_DIR)
    series = [m for m in signals["metrics"] if m["name"] == "second_venv_ns"]
    assert len(series) == 1
    st = series[0]["stats"]
    assert (st["count"], st["sum"], st["min"], st["max"]) == (100, 5050, 1, 100)


def test_users_pythonpath_stays_first(second_venv, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    env = quiet_env(PYTHONPATH=str(mine))
    code = "import sys; from graphsignal import probes; print(repr(sys.path[1:3]))\n"
    proc, _ = run_wrapped([second_venv, _script(tmp_path, "order.py", code)], env=env)
    assert proc.returncode == 0, proc.stderr
    first, second = eval(proc.stdout)
    assert first == str(mine) and os.listdir(second) == ["graphsignal"]


def test_a_workload_python_with_its_own_graphsignal_keeps_it(tmp_path):
    venv = tmp_path / "venv"
    own = venv / "lib" / "python3.12" / "site-packages" / "graphsignal"
    own.mkdir(parents=True)
    (own / "__init__.py").write_text("")
    (venv / "bin").mkdir()
    (venv / "bin" / "python3").write_text("")
    os.chmod(str(venv / "bin" / "python3"), 0o755)
    env = {"PATH": str(venv / "bin")}
    assert injection.own_graphsignal(["python3", "app.py"], env) == str(own)
    assert injection.expose_package(env, ["python3", "app.py"], tmp_root=str(tmp_path / "t")) is None
    assert "PYTHONPATH" not in env


def test_expose_package_is_idempotent_and_private(tmp_path):
    env = {"PYTHONPATH": "/opt/x"}
    d = injection.expose_package(env, tmp_root=str(tmp_path))
    assert injection.expose_package(env, tmp_root=str(tmp_path)) == d
    assert env["PYTHONPATH"] == "/opt/x:" + d
    assert os.listdir(d) == ["graphsignal"]
    assert oct(os.stat(d).st_mode & 0o777) == "0o700"


def test_the_workloads_pythonpath_never_reaches_the_sidecar(tmp_path):
    # before: a PYTHONPATH carrying another numpy was imported by the sidecar: "profiler stopped", nothing profiled
    for name in ("numpy", "orjson", "werkzeug"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('the workload\\'s own %s')\n" % name)
    code = "import sys; print(%r in sys.path)" % str(tmp_path)
    proc, signals = run_wrapped([sys.executable, "-c", code],
                                env=quiet_env(PYTHONPATH=str(tmp_path), GRAPHSIGNAL_LOG_LEVEL="warning"))
    assert proc.returncode == 0 and proc.stdout == b"True\n"  # the workload keeps its PYTHONPATH
    assert b"profiler stopped" not in proc.stderr and b"failed" not in proc.stderr, proc.stderr
    assert signals is not None
    assert any(m["name"] == "process_cpu_time_nanoseconds" for m in signals["metrics"])


def test_the_sidecar_path_puts_graphsignals_environment_before_pythonpath():
    import graphsignal
    from graphsignal.launch.sidecar_start import sidecar_path

    root = os.path.dirname(os.path.dirname(os.path.abspath(graphsignal.__file__)))
    path = ["", "/pp/first", "/usr/lib/python311.zip", "/venv/site-packages", "relative", "/pp/second", root]
    got = sidecar_path(path, "/pp/first:/pp/second:relative")
    # graphsignal's own directory, its interpreter's environment, then PYTHONPATH (a --target install of
    # a dependency is still found there); never the working directory or a relative entry
    assert got == [root, "/usr/lib/python311.zip", "/venv/site-packages", "/pp/first", "/pp/second"]
