"""graphsignal-run against another local user (uid 65534; the tests run as
root, which hands files to that uid as its owner would have made them):
nothing they plant in the temp directory reaches the workload's
PYTHONPATH or LD_LIBRARY_PATH, and the final payload is never written
through a name they control or onto a device."""
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

import graphsignal
from support.gsrun import GS_RUN, free_port, quiet_env

OTHER = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files of another uid")

PY = sys.executable


def _run(args, env, timeout=120):
    return subprocess.run(GS_RUN + ["--listen-port", str(free_port())] + args, env=env, capture_output=True,
                          timeout=timeout)


def _graphsignal_lines(proc):
    return [x for x in proc.stderr.decode().splitlines() if x.startswith("graphsignal:")]


def test_a_temp_directory_squatted_by_another_user_never_runs_their_code(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(str(tmp), 0o1777)  # /tmp's shape
    # What another user does before root's first run: our per-user root and
    # the private directory it would put on PYTHONPATH, with a sitecustomize.
    real = os.path.realpath(os.path.dirname(graphsignal.__file__))
    root = tmp / ("graphsignal-%d" % os.geteuid())
    planted = root / ("py-" + hashlib.sha1(real.encode()).hexdigest()[:12])
    planted.mkdir(parents=True)
    marker = tmp_path / "ran-as-root"
    (planted / "sitecustomize.py").write_text("open(%r, 'w').write('pwned')\n" % str(marker))
    for p in (root, planted, planted / "sitecustomize.py"):
        os.lchown(str(p), OTHER, OTHER)
        os.chmod(str(p), 0o755)
    env = quiet_env(TMPDIR=str(tmp), GRAPHSIGNAL_LOG_LEVEL="warning")
    proc = _run([PY, "-c", "import sys; print([p for p in sys.path if 'graphsignal-' in p])"], env)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()
    assert proc.stdout.decode().strip() == "[]"  # nothing of theirs on the workload's sys.path
    said = [x for x in _graphsignal_lines(proc) if str(root) in x]
    assert len(said) == 1 and "belongs to uid %d" % OTHER in said[0], proc.stderr


def test_our_own_private_directory_is_used_and_checked(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(str(tmp), 0o1777)
    env = quiet_env(TMPDIR=str(tmp))
    code = "import graphsignal.probes, sys; print([p for p in sys.path if 'graphsignal-' in p])"
    proc = _run([PY, "-S", "-c", code], env)  # -S: no site-packages, so only our directory has graphsignal
    assert proc.returncode == 0, proc.stderr
    (d,) = json.loads(proc.stdout.decode().replace("'", '"'))
    assert os.path.dirname(d) == str(tmp / ("graphsignal-%d" % os.geteuid()))
    for p in (d, os.path.dirname(d)):
        st = os.lstat(p)
        assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o700


# -- --output ------------------------------------------------------------------------------
def test_output_through_a_symlink_another_user_planted_is_refused_before_the_run(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(str(shared), 0o1777)
    out = shared / "signals.json"
    out.symlink_to(victim)
    os.lchown(str(out), OTHER, OTHER)
    proc = _run(["--output", str(out), PY, "-c", "print('ran')"], quiet_env(GRAPHSIGNAL_LOG_LEVEL="warning"))
    assert proc.returncode == 0 and proc.stdout == b"ran\n"
    assert victim.read_text() == "precious" and os.readlink(str(out)) == str(victim)
    said = [x for x in _graphsignal_lines(proc) if str(out) in x]
    assert len(said) == 1 and "not ours" in said[0], proc.stderr
    assert os.listdir(str(shared)) == ["signals.json"]


@pytest.mark.parametrize("target", ["/dev/null", "/dev/stdout", "dir"])
def test_output_onto_a_device_or_directory_is_refused_and_never_replaced(tmp_path, target):
    if target == "dir":
        target = str(tmp_path / "a-directory")
        os.mkdir(target)
    before = os.lstat(target)
    env = quiet_env(GRAPHSIGNAL_LOG_LEVEL="warning")
    for args, e in ((["--output", target], env), ([], dict(env, GRAPHSIGNAL_SIGNALS_FILE=target))):
        proc = _run(args + [PY, "-c", "print('ran')"], e)
        assert proc.returncode == 0 and proc.stdout == b"ran\n"
        after = os.lstat(target)
        assert (before.st_mode, before.st_ino) == (after.st_mode, after.st_ino)
        assert len([x for x in _graphsignal_lines(proc) if "not replacing it" in x]) == 1, proc.stderr
    leftovers = [n for n in os.listdir(os.path.dirname(target)) if n.startswith((".a-directory", "a-directory."))]
    assert leftovers == []


@pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare for a private tmpfs")
def test_output_on_a_full_filesystem_leaves_nothing_behind(tmp_path):
    # before: a 0-byte FILE.tmp was left. A 1 MB tmpfs over out/, filled: the
    # temporary file can be made, but nothing can be written to it.
    out_dir = str(tmp_path / "out")
    os.mkdir(out_dir)
    script = ('mount -t tmpfs -o size=1m tmpfs "$0" && head -c 1048576 /dev/zero > "$0/filler"; "$@"; rc=$?; '
              'echo "left: $(ls -A "$0")"; exit $rc')
    cmd = GS_RUN + ["--listen-port", str(free_port()), "--output", out_dir + "/signals.json", PY, "-c", "print('ran')"]
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script, out_dir] + cmd,
                          env=quiet_env(GRAPHSIGNAL_LOG_LEVEL="warning"), capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().splitlines() == ["ran", "left: filler"]
    lines = [x for x in _graphsignal_lines(proc) if "signals.json" in x]
    assert len(lines) == 1 and "No space left" in lines[0], proc.stderr


def test_output_to_dev_stderr_never_replaces_the_log_it_goes_to(tmp_path):
    # before: with 2>run.log, the payload was renamed onto run.log and the workload's stderr was gone
    log = tmp_path / "run.log"
    with open(str(log), "wb") as f:
        proc = subprocess.run(GS_RUN + ["--listen-port", str(free_port()), "--output", "/dev/stderr", "sh", "-c",
                                        "echo IMPORTANT >&2"],
                              env=quiet_env(GRAPHSIGNAL_LOG_LEVEL="warning"), stdout=subprocess.PIPE, stderr=f,
                              timeout=120)
    assert proc.returncode == 0
    text = log.read_text()
    assert "IMPORTANT" in text and "file descriptor" in text, text
    assert os.listdir(str(tmp_path)) == ["run.log"]
