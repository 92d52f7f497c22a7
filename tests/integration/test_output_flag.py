"""graphsignal-run --output FILE: the final payload at exit, also when the
workload ends by SIGINT/SIGTERM; written atomically (a temporary file
renamed into place); the flag wins over GRAPHSIGNAL_SIGNALS_FILE."""
import json
import os
import signal
import subprocess
import sys
import time

from support.gsrun import GS_RUN, free_port, json_or_none, quiet_env, wait_for

PROBE = """
import sys, time
from graphsignal import probes
c = probes.counter("demo_output_items_total")
c.add(7)
time.sleep(float(sys.argv[1]))
"""


def _run(tmp_path, *, seconds=0.5, env=None, send=None):
    out = tmp_path / "final.json"
    port = free_port()
    cmd = GS_RUN + ["--listen-port", str(port), "--output", str(out), sys.executable, "-c", PROBE, str(seconds)]
    if send == signal.SIGINT:
        # as from a terminal: a suite started in the background of a non-interactive shell ignores SIGINT,
        # and the workload would inherit that (graphsignal-run passes dispositions through unchanged)
        cmd = [sys.executable, "-c", "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
               "os.execv(sys.argv[1], sys.argv[1:])"] + cmd
    p = subprocess.Popen(cmd, env=env or quiet_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if send is not None:
        # the signal comes once the sidecar is up and has read the probe (a fixed sleep raced a loaded machine)
        url = "http://127.0.0.1:%d/signals" % port
        assert wait_for(lambda: _total(json_or_none(url) or {"metrics": []}) == [7], 30)
        time.sleep(0.2)
        p.send_signal(send)
    p.communicate(timeout=60)
    return p.returncode, out


def _total(doc):
    return [m["stats"]["total"] for m in doc["metrics"] if m["name"] == "demo_output_items_total"]


def test_output_holds_the_final_payload(tmp_path):
    rc, out = _run(tmp_path)
    assert rc == 0
    doc = json.loads(out.read_text())
    assert _total(doc) == [7]
    assert sorted(os.listdir(tmp_path)) == ["final.json"]  # no temporary file left beside it


def test_output_is_written_when_the_workload_is_stopped_by_a_signal(tmp_path):
    for sig in (signal.SIGTERM, signal.SIGINT):
        rc, out = _run(tmp_path, seconds=30, send=sig)
        assert rc == -sig, rc  # the workload died of it (Python re-raises an uncaught ^C), mirrored
        assert _total(json.loads(out.read_text())) == [7]
        out.unlink()


def test_the_flag_wins_over_the_environment(tmp_path):
    env_file = tmp_path / "from_env.json"
    rc, out = _run(tmp_path, env=quiet_env(GRAPHSIGNAL_SIGNALS_FILE=str(env_file)))
    assert rc == 0 and out.exists() and not env_file.exists()


def test_a_folder_that_does_not_exist_is_refused_before_the_run(tmp_path):
    # before: accepted, exit 0, and the payload lost at the end with a line saying the
    # workload "runs on" after it had ended
    marker = tmp_path / "started"
    child = [sys.executable, "-c", "open(%r, 'w').close()" % str(marker)]
    missing = tmp_path / "no" / "such" / "dir" / "x.json"
    for args, env in ((["--output", str(missing)], quiet_env()),
                      ([], quiet_env(GRAPHSIGNAL_SIGNALS_FILE=str(missing)))):
        p = subprocess.run(GS_RUN + ["--listen-port", str(free_port())] + args + child, env=env,
                           capture_output=True, timeout=60)
        assert p.returncode == 2, p.stderr
        assert not marker.exists()  # the workload never started
        assert p.stdout == b""
        lines = p.stderr.decode().splitlines()
        assert len(lines) == 1, p.stderr
        assert lines[0].startswith("graphsignal-run: error: ") and str(missing) in lines[0]
        assert "the folder %s does not exist" % (tmp_path / "no") in lines[0], lines
        assert ("--output" in lines[0]) == bool(args) and ("GRAPHSIGNAL_SIGNALS_FILE" in lines[0]) != bool(args)
    assert sorted(os.listdir(tmp_path)) == []


def test_a_folder_that_is_a_file_or_read_only_is_refused_before_the_run(tmp_path):
    marker = tmp_path / "started"
    child = [sys.executable, "-c", "open(%r, 'w').close()" % str(marker)]
    (tmp_path / "afile").write_text("")
    targets = [(tmp_path / "afile" / "sub" / "x.json", "%s is not a folder" % (tmp_path / "afile"))]
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    if not os.access(str(ro), os.W_OK):  # root writes anywhere a mount lets it
        targets.append((ro / "x.json", "the folder %s is not writable" % ro))
    try:
        for out, needle in targets:
            p = subprocess.run(GS_RUN + ["--listen-port", str(free_port()), "--output", str(out)] + child,
                               env=quiet_env(), capture_output=True, timeout=60)
            lines = p.stderr.decode().splitlines()
            assert p.returncode == 2 and not marker.exists() and len(lines) == 1, p.stderr
            assert needle in lines[0], lines
    finally:
        ro.chmod(0o700)


def test_a_write_that_fails_at_exit_does_not_say_the_workload_runs_on(tmp_path):
    # the folder was there at the start and went during the run: the payload cannot be
    # written, one line says so, and it must not claim the (ended) workload "runs on"
    gone = tmp_path / "gone"
    gone.mkdir()
    child = [sys.executable, "-c", "import os, sys; os.rmdir(%r); sys.exit(3)" % str(gone)]
    p = subprocess.run(GS_RUN + ["--listen-port", str(free_port()), "--output", str(gone / "x.json")] + child,
                       env=quiet_env(GRAPHSIGNAL_LOG_LEVEL="warning"), capture_output=True, timeout=60)
    assert p.returncode == 3, p.stderr
    lines = [ln for ln in p.stderr.decode().splitlines() if "x.json" in ln]
    assert len(lines) == 1, p.stderr
    assert "failed" in lines[0] and "runs on" not in lines[0], lines
    assert sorted(os.listdir(tmp_path)) == []


def test_a_short_runs_cpu_time_is_the_whole_of_it(tmp_path):
    """A workload that ends between the sidecar's samples: its process tree's CPU time comes from the
    supervisor's wait4 at its exit, exact (sampling alone said 0 for a 0.6 s busy loop)."""
    out = tmp_path / "burn.json"
    burn = ("import time, subprocess, sys\n"
            "subprocess.run([sys.executable, '-c', 'import time\\nt = time.process_time()\\n"
            "while time.process_time() - t < 0.3: pass'])\n"  # a child's CPU counts in the tree too
            "t = time.process_time()\n"
            "while time.process_time() - t < 0.3: pass\n")
    p = subprocess.run(GS_RUN + ["--listen-port", "0", "--output", str(out), sys.executable, "-c", burn],
                       env=quiet_env(), capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(out.read_text())
    (tree,) = [m for m in doc["metrics"] if m["name"] == "process_cpu_time_nanoseconds"
               and m["tags"].get("scope") == "process_tree"]
    assert 0.6e9 <= tree["stats"]["total"] <= 5e9, tree
