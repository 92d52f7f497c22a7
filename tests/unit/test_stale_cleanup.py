"""Ring cleanup removes only the files of the user running it, root's
included: ownership comes from lstat, never from whether an unlink fails
(root's never does), and no symlink is followed. Rings, fallback rings,
markers and lock files alike; the stale cleanup of other runs, the
supervisor's end of run and the sidecar's exit alike."""
import os
import subprocess

import pytest

from graphsignal.rings import stale
from graphsignal.sidecar.poller import Poller
from graphsignal.sidecar.store import MetricStore

OTHER = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to another uid")


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def touch(path, uid=None):
    with open(path, "w"):
        pass
    os.chmod(path, 0o600)
    if uid is not None:
        os.chown(path, uid, uid)


def others(d, run, pid, target):
    """Another user's files under this run's names: a ring, a symlink to a
    file of ours, a directory, a FIFO, a marker."""
    made = {}
    p = os.path.join(d, "gs-%s-%d-cupti" % (run, pid))
    touch(p, OTHER)
    made["file"] = p
    p = os.path.join(d, "gs-%s-%d-probe.2" % (run, pid))
    os.symlink(target, p)
    os.lchown(p, OTHER, OTHER)
    made["symlink"] = p
    p = os.path.join(d, "gs-%s-%d-rocm" % (run, pid))
    os.mkdir(p)
    os.chown(p, OTHER, OTHER)
    made["dir"] = p
    p = os.path.join(d, "gs-%s-%d-rocm.1" % (run, pid))
    os.mkfifo(p)
    os.chown(p, OTHER, OTHER)
    made["fifo"] = p
    p = os.path.join(d, "gs-%s-%d-probe.none" % (run, pid))
    touch(p, OTHER)
    made["marker"] = p
    return made


def test_names_with_fallbacks_and_markers_parse_as_their_writers():
    assert stale.parse("gs-r1-42-probe") == ("r1", 42, "probe")
    assert stale.parse("gs-r1-42-probe.3") == ("r1", 42, "probe")
    assert stale.parse("gs-r1-42-cupti.none") == ("r1", 42, "cupti")
    assert stale.parse("gs-r1.run") == ("r1", None, None)
    assert stale.parse("gs-r1-\u00b2-probe") is None  # '²'.isdigit() is true; int('²') would raise
    assert stale.parse(".gs-r1-42-probe.tmp42.0x7ff") is None


@needs_root
def test_roots_stale_cleanup_removes_only_its_own_files(tmp_path):
    d = str(tmp_path)
    target = os.path.join(d, "precious")
    with open(target, "w") as f:
        f.write("keep")
    gone = dead_pid()
    run = "e5e5e5e5e5e5"
    touch(stale.lock_path(run, d))  # a run of ours that is over: nobody holds its lock
    ours = ["gs-%s-%d-probe" % (run, gone), "gs-%s-%d-probe.1" % (run, gone), "gs-%s-%d-cupti.none" % (run, gone)]
    for n in ours:
        touch(os.path.join(d, n))
    theirs = others(d, run, gone, target)
    # another user's run that is over: its lock and ring are theirs, whatever the cleaner's uid
    their_run = "f6f6f6f6f6f6"
    touch(stale.lock_path(their_run, d), OTHER)
    touch(os.path.join(d, "gs-%s-%d-probe" % (their_run, gone)), OTHER)
    removed = stale.remove_stale("own000000000", d)
    # before: root removed every one of them (an unlink as root never fails)
    assert sorted(removed) == sorted(ours + ["gs-%s.run" % run])
    for p in theirs.values():
        assert os.lstat(p).st_uid == OTHER
    assert open(target).read() == "keep"  # the symlink was not followed
    assert os.path.exists(stale.lock_path(their_run, d))
    assert os.path.exists(os.path.join(d, "gs-%s-%d-probe" % (their_run, gone)))


@needs_root
def test_a_lock_file_that_is_a_symlink_is_not_followed(tmp_path):
    d = str(tmp_path)
    target = os.path.join(d, "target")
    touch(target)
    run = "a7a7a7a7a7a7"
    os.symlink(target, stale.lock_path(run, d))
    os.lchown(stale.lock_path(run, d), OTHER, OTHER)
    ring = os.path.join(d, "gs-%s-%d-probe" % (run, dead_pid()))
    touch(ring)
    assert stale.run_is_over(run, d) is False  # not our lock: that run is not ours to judge
    assert stale.remove_stale("own000000000", d) == []
    assert os.path.exists(ring) and os.path.exists(target)


@needs_root
def test_the_end_of_a_run_removes_its_own_files_only(tmp_path):
    d = str(tmp_path)
    target = os.path.join(d, "precious")
    touch(target)
    run = "b8b8b8b8b8b8"
    pid = os.getpid()
    mine = [os.path.join(d, "gs-%s-%d-probe" % (run, pid)), os.path.join(d, "gs-%s-%d-probe.1" % (run, pid)),
            stale.lock_path(run, d)]
    for p in mine:
        touch(p)
    theirs = others(d, run, pid, target)
    stale.remove_run(run, d)  # the supervisor's
    assert not any(os.path.exists(p) for p in mine)
    assert all(os.lstat(p).st_uid == OTHER for p in theirs.values())
    for p in mine[:2]:
        touch(p)
    poller = Poller(MetricStore(), run, shm_dir=d)
    poller.cleanup_all()  # the sidecar's
    assert not any(os.path.exists(p) for p in mine)
    assert all(os.lstat(p).st_uid == OTHER for p in theirs.values())
    assert os.path.exists(target)
