"""Rings a dead run left behind, and the lock that says a run is alive.

A ring is /dev/shm/gs-<run>-<pid>-<kind>. Each run holds an exclusive
flock on /dev/shm/gs-<run>.run from before its workload starts until its
last profiler process (supervisor or sidecar, which share the lock's open
file) is gone, so "the run is over" is a lock anyone can take, whatever
killed it, and a reused pid cannot fake it. A ring is stale when its
writer is gone and its run is over. A run without a lock file is over too
(the lock exists before the first ring of a run can), except for a sidecar
of a version from before the lock, which retires a dead writer's ring
itself within a second or so: such rings are left UNLOCKED_AGE seconds.
Standard library only: the supervisor uses this before the workload starts.
"""
import errno
import fcntl
import os
import time

from graphsignal import config

SHM_DIR = config.SHM_DIR
PREFIX = config.RING_PREFIX
LOCK_SUFFIX = ".run"
UNLOCKED_AGE = 60.0  # seconds since a ring of a run without a lock file last changed


def lock_path(run_id, shm_dir=SHM_DIR):
    return os.path.join(shm_dir, PREFIX + run_id + LOCK_SUFFIX)


def hold_run_lock(run_id, shm_dir=SHM_DIR):
    """Creates and locks this run's lock file; returns its descriptor (not
    inheritable: pass it on to the processes that keep the run alive). The
    file is locked under a private name and then renamed, so no one ever
    sees it unlocked."""
    final = lock_path(run_id, shm_dir)
    tmp = os.path.join(shm_dir, ".%s%s%s.%d" % (PREFIX, run_id, LOCK_SUFFIX, os.getpid()))
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(tmp, final)
    except BaseException:
        os.close(fd)
        _unlink(tmp)
        raise
    return fd


def pid_alive(pid, proc_root="/proc"):
    """False for a pid that is gone or a zombie (exited, not yet reaped)."""
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # state follows the ")" that ends the command name
    i = stat.rfind(b")")
    return not (i >= 0 and stat[i + 2:i + 3] in (b"Z", b"X"))


def parse(name):
    """'gs-<run>-<pid>-<kind>' -> (run, pid, kind); 'gs-<run>.run' -> (run, None, None); else None."""
    if not name.startswith(PREFIX):
        return None
    rest = name[len(PREFIX):]
    if rest.endswith(LOCK_SUFFIX) and "-" not in rest:
        return rest[:-len(LOCK_SUFFIX)], None, None
    run, _, tail = rest.partition("-")
    pid, _, kind = tail.partition("-")
    if not run or not pid.isdigit() or not kind:
        return None
    return run, int(pid), kind


def run_is_over(run_id, shm_dir=SHM_DIR):
    """True when no process holds the run's lock, None when it has no lock
    file, False while it lives. A lock file we may not open (another
    user's) counts as alive."""
    try:
        fd = os.open(lock_path(run_id, shm_dir), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    finally:
        os.close(fd)  # the lock, if we got it, goes with the descriptor


def remove_stale(own_run_id, shm_dir=SHM_DIR, proc_root="/proc", now=None):
    """Unlinks the rings of other runs that are over and whose writers are
    gone, and those runs' lock files once they have no ring left. Returns
    the names removed. Files we may not remove (another user's) stay."""
    now = time.time() if now is None else now
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []
    runs = {}
    for name in names:
        parsed = parse(name)
        if parsed is None or parsed[0] == own_run_id:
            continue
        runs.setdefault(parsed[0], []).append((name, parsed[1]))
    removed = []
    for run_id, files in runs.items():
        over = run_is_over(run_id, shm_dir)
        if over is False:
            continue
        left = 0
        for name, pid in files:
            if pid is None:
                continue
            path = os.path.join(shm_dir, name)
            if pid_alive(pid, proc_root):
                left += 1  # a live writer of a finished run: stale once it exits
            elif over is None and not _older(path, now - UNLOCKED_AGE):
                left += 1
            elif _unlink(path):
                removed.append(name)
            else:
                left += 1
        lock = PREFIX + run_id + LOCK_SUFFIX
        if not left and any(pid is None for _, pid in files) and _unlink(os.path.join(shm_dir, lock)):
            removed.append(lock)
    return removed


def remove_run(run_id, shm_dir=SHM_DIR):
    """Unlinks every ring of this run and its lock file (the run is ending)."""
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return
    for name in names:
        parsed = parse(name)
        if parsed is not None and parsed[0] == run_id:
            _unlink(os.path.join(shm_dir, name))


def _older(path, t):
    try:
        return os.stat(path).st_mtime < t
    except OSError:
        return False


def _unlink(path):
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False
