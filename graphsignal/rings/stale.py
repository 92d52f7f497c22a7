"""Rings a dead run left behind, and the lock that says a run is alive.

A ring is /dev/shm/gs-<run>-<pid>-<kind>, or the same with .1 .. .3 after
it (the name before was taken), and gs-<run>-<pid>-<kind>.none is the
marker of a writer left without a ring. Each run holds an exclusive
flock on /dev/shm/gs-<run>.run from before its workload starts until its
last profiler process (supervisor or sidecar, which share the lock's open
file) is gone, so "the run is over" is a lock anyone can take, whatever
killed it, and a reused pid cannot fake it. A ring is stale when its
writer is gone and its run is over. A run without a lock file is over too
(the lock exists before the first ring of a run can), except for a sidecar
of a version from before the lock, which retires a dead writer's ring
itself within a second or so: such rings are left UNLOCKED_AGE seconds.
Only files of the user running the cleanup are ever removed, root's
included: each file is checked with lstat (a regular file or symlink owned
by this euid), never by the error an unlink would give, and no symlink is
followed.
In a sticky /dev/shm nobody else can replace a file of ours between that
check and the unlink.
Standard library only: the supervisor uses this before the workload starts.
"""
import errno
import fcntl
import os
import stat
import time
from typing import Dict, List, Optional, Tuple, Union

from graphsignal import procfs
from graphsignal.rings import header

SHM_DIR = header.string("GRAPHSIGNAL_SHM_DIR")
PREFIX = header.string("GRAPHSIGNAL_RING_PREFIX")
LOCK_SUFFIX = ".run"
UNLOCKED_AGE = 60.0  # seconds since a ring of a run without a lock file last changed


def lock_path(run_id: str, shm_dir: str = SHM_DIR) -> str:
    return os.path.join(shm_dir, PREFIX + run_id + LOCK_SUFFIX)


def hold_run_lock(run_id: str, shm_dir: str = SHM_DIR) -> int:
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


def pid_alive(pid: Union[int, str], proc_root: str = "/proc") -> bool:
    """False for a pid that is gone or a zombie (exited, not yet reaped)."""
    return procfs.alive(pid, proc_root)


def _ascii_int(s: str) -> Optional[int]:
    return int(s) if s.isascii() and s.isdigit() else None


def parse(name: str) -> Optional[Tuple[str, Optional[int], Optional[str]]]:
    """'gs-<run>-<pid>-<kind>[.<n>|.none]' -> (run, pid, kind); 'gs-<run>.run' -> (run, None, None); else None."""
    if not name.startswith(PREFIX):
        return None
    rest = name[len(PREFIX):]
    if rest.endswith(LOCK_SUFFIX) and "-" not in rest:
        return rest[:-len(LOCK_SUFFIX)], None, None
    run, _, tail = rest.partition("-")
    number, _, kind = tail.partition("-")
    pid = _ascii_int(number)
    if not run or pid is None or not kind:
        return None
    base, dot, suffix = kind.rpartition(".")
    if dot and base and (suffix == "none" or _ascii_int(suffix) is not None):
        kind = base
    return run, pid, kind


def owned(path: str) -> bool:
    """True when path itself (lstat: not what a symlink names) is a regular
    file or a symlink of this process's effective uid (unlinking a symlink
    removes the link, never its target)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)) and st.st_uid == os.geteuid()


def run_is_over(run_id: str, shm_dir: str = SHM_DIR) -> Optional[bool]:
    """True when no process holds the run's lock, None when it has no lock
    file, False while it lives. A lock file that is not ours (another
    user's, a symlink) counts as alive: that run is not ours to clean."""
    path = lock_path(run_id, shm_dir)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        return False
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
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


def remove_stale(own_run_id: Optional[str], shm_dir: str = SHM_DIR, proc_root: str = "/proc",
                 now: Optional[float] = None) -> List[str]:
    """Unlinks the rings (and markers) of other runs that are over and whose
    writers are gone, and those runs' lock files once they have no ring
    left. Returns the names removed. Only our own files go (see owned):
    another user's stay, root's cleanup included."""
    now = time.time() if now is None else now
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []
    runs: Dict[str, List[Tuple[str, Optional[int]]]] = {}
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
            if not owned(path):
                continue  # not ours to remove, nor to keep the lock for
            if pid_alive(pid, proc_root):
                left += 1  # a live writer of a finished run: stale once it exits
            elif over is None and not _older(path, now - UNLOCKED_AGE):
                left += 1
            elif _unlink(path):
                removed.append(name)
            else:
                left += 1
        lock = PREFIX + run_id + LOCK_SUFFIX
        if not left and any(pid is None for _, pid in files) and owned(os.path.join(shm_dir, lock)) \
                and _unlink(os.path.join(shm_dir, lock)):
            removed.append(lock)
    return removed


def remove_run(run_id: str, shm_dir: str = SHM_DIR) -> None:
    """Unlinks every ring and marker of this run and its lock file (the run
    is ending): our own files only (see owned); a name another user took
    stays theirs."""
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return
    for name in names:
        parsed = parse(name)
        if parsed is not None and parsed[0] == run_id:
            remove_own(os.path.join(shm_dir, name))


def remove_own(path: str) -> bool:
    """Unlinks path when it is our own (see owned); True when it is gone."""
    return owned(path) and _unlink(path)


def _older(path: str, t: float) -> bool:
    try:
        return os.lstat(path).st_mtime < t
    except OSError:
        return False


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False
