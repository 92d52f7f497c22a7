"""/proc/PID/stat, read one way for every part that needs it (the
supervisor, the sidecar, the host source, ring cleanup). Standard library
only: the supervisor imports this before the workload starts.

stat_fields() returns the fields after the command name, so index 0 is
field 3 of proc(5) (state), index 6 its flags, 11 and 12 utime and stime,
19 starttime: the command name, in parentheses, may hold spaces and ")".
"""
import os
from typing import List, Optional, Union

STATE, FLAGS, UTIME, STIME, STARTTIME = 0, 6, 11, 12, 19
PF_EXITING = 0x4  # include/linux/sched.h: the task is exiting


def stat_fields(pid: Union[int, str], proc_root: str = "/proc") -> Optional[List[bytes]]:
    """The fields of /proc/PID/stat after the command name (bytes), or
    None when the process is gone or the file cannot be read."""
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), "rb") as f:
            stat = f.read()
    except OSError:
        return None
    i = stat.rfind(b")")
    return stat[i + 2:].split() if i >= 0 else None


def _int(fields: Optional[List[bytes]], i: int) -> Optional[int]:
    try:
        return int(fields[i]) if fields is not None else None
    except (ValueError, IndexError):
        return None


def start_time(pid: Union[int, str], proc_root: str = "/proc") -> Optional[int]:
    """The process's start time in clock ticks since boot (with the pid, it
    names one process even after the pid is reused), or None."""
    return _int(stat_fields(pid, proc_root), STARTTIME)


def cpu_ticks(pid: Union[int, str], proc_root: str = "/proc") -> Optional[int]:
    """utime + stime of pid in clock ticks, or None."""
    f = stat_fields(pid, proc_root)
    u, s = _int(f, UTIME), _int(f, STIME)
    return None if u is None or s is None else u + s


def alive(pid: Union[int, str], proc_root: str = "/proc") -> bool:
    """False for a pid that is gone or a zombie (exited, not yet reaped)."""
    f = stat_fields(pid, proc_root)
    return f is not None and bool(f) and f[STATE] not in (b"Z", b"X")


def exiting(pid: Union[int, str], proc_root: str = "/proc") -> bool:
    """True once the process's main thread began to exit (PF_EXITING, or a
    zombie), or when it is gone: from then on /proc reads its memory as it
    is being freed, down to 0."""
    f = stat_fields(pid, proc_root)
    flags = _int(f, FLAGS)
    return flags is None or f is None or f[STATE] in (b"Z", b"X") or bool(flags & PF_EXITING)
