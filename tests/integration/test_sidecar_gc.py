"""The sidecar's own process runs its garbage collector as
graphsignal.gctune sets it (fewer passes over its store, and what it set
up is never walked again); the workload's collector is left as it was."""
import ast
import re
import subprocess
import sys

from support.gsrun import GS_RUN, free_port, quiet_env, run_released_by_stderr

from graphsignal import gctune

# the workload runs until the sidecar has said how it set its collector (the sidecar starts after the workload)
WORKLOAD = "import gc; print('workload', gc.get_threshold(), gc.get_freeze_count(), flush=True)\n"
SAID = b"garbage collector: thresholds"


def test_the_sidecar_tunes_its_collector_and_leaves_the_workloads_alone():
    env = quiet_env(GRAPHSIGNAL_LOG_LEVEL="debug", GRAPHSIGNAL_DISABLE_VERSION_CHECK="1")
    r = run_released_by_stderr(lambda wait: GS_RUN + ["--listen-port", str(free_port()), sys.executable, "-c",
                                                      WORKLOAD + wait], SAID, env=env)
    stderr = r.stderr.decode()
    assert r.returncode == 0, stderr
    m = re.search(r"garbage collector: thresholds (\([0-9, ]+\)), (\d+) objects set aside", stderr)
    assert m, stderr[-3000:]
    assert ast.literal_eval(m.group(1)) == (gctune.THRESHOLD0, gctune.THRESHOLD1, gctune.THRESHOLD2)
    assert int(m.group(2)) > 10_000  # the sidecar's modules and set-up
    # the workload (a child of the supervisor, not of the sidecar) keeps CPython's own
    default = subprocess.run([sys.executable, "-c", "import gc; print(gc.get_threshold())"], capture_output=True,
                             text=True, timeout=60).stdout.strip()
    assert r.stdout.decode().splitlines() == ["workload %s 0" % default]


def test_tune_sets_the_thresholds_and_freezes_whats_alive():
    code = ("import gc; from graphsignal import gctune; before = gc.get_freeze_count(); gctune.tune(); "
            "print(gc.get_threshold(), before, gc.get_freeze_count() > 1000)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.split()
    assert " ".join(out) == "(%d, %d, %d) 0 True" % (gctune.THRESHOLD0, gctune.THRESHOLD1, gctune.THRESHOLD2)
