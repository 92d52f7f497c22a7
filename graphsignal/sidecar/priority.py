"""The sidecar's scheduling priority: below the workload's, so that its
threads never take a core the workload could use (an engine runs a thread
per core).

GRAPHSIGNAL_SIDECAR_PRIORITY (config.Settings.sidecar_priority):

  idle    SCHED_IDLE (the default): the sidecar runs on cores the
          workload leaves idle, and on a busy core only in the smallest
          share the kernel gives; where the kernel refuses it, nice 19
  low     nice 19: the lowest share of a busy core the normal class has
  normal  as the workload (nothing is changed)

Linux schedules threads, not processes: lower_threads() lowers every
thread of the sidecar once its parts have started (the poller, the clock,
the server, the sources, the uploader; what they start later inherits it)
but the ones it is told to keep: the main thread, which does the final
drain and writes the final payload after the workload has exited, and the
channel with the supervisor, which feeds the console capture and, at the
end, the heartbeats the supervisor waits on. An unprivileged thread
cannot raise itself back, so the work that must finish in time stays on
threads that were never lowered. The parts start at normal priority, so
the endpoint comes up as fast as before.

A drain that the low priority starves loses nothing silently: the ring
fills and its writer counts what did not fit (graphsignal_dropped_records).
"""
import errno
import logging
import os
from typing import Collection, List

logger = logging.getLogger("graphsignal")

NICE_LOW = 19
TASKS = "/proc/self/task"


def lower(tid: int, level: str) -> str:
    """Lowers thread `tid` of this process to `level`
    (config.SIDECAR_PRIORITY_CHOICES); returns what it runs at now: "idle"
    (SCHED_IDLE), "low" (nice 19) or "normal"; "gone" when the thread
    ended before it could be lowered (nothing was refused)."""
    if level not in ("idle", "low"):
        return "normal"
    if level == "idle":
        try:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            return "idle"
        except OSError as e:
            if e.errno == errno.ESRCH:
                return "gone"
            # a sandbox that refuses it: nice 19 then
        except AttributeError:  # not Linux
            pass
    try:
        os.setpriority(os.PRIO_PROCESS, tid, max(NICE_LOW, os.getpriority(os.PRIO_PROCESS, tid)))
        return "low"
    except OSError as e:
        return "gone" if e.errno == errno.ESRCH else "normal"
    except AttributeError:
        return "normal"


def lower_threads(level: str, keep: Collection[int], tasks: str = TASKS) -> str:
    """Lowers every thread of this process but those whose native ids are
    in `keep`; returns what they run at ("idle", "low" or "normal"; a
    mix says the weakest). Where neither SCHED_IDLE nor nice 19 is
    allowed, one log line says so."""
    if level not in ("idle", "low"):
        return "normal"
    got: List[str] = []
    done = set(keep)
    for _ in range(2):  # twice: a thread started by one not yet lowered while the first pass ran
        try:
            tids = [int(t) for t in os.listdir(tasks) if t.isdigit()]
        except OSError:
            tids = []
        for tid in tids:
            if tid not in done:
                done.add(tid)
                now = lower(tid, level)
                if now != "gone":  # a thread that ended between the listing and the call refused nothing
                    got.append(now)
    if not got:
        return "normal"
    applied = min(got, key=("normal", "low", "idle").index)
    if applied == "normal":
        logger.warning("graphsignal: the sidecar runs at the workload's priority: this system refuses both "
                       "SCHED_IDLE and nice %d", NICE_LOW)
    elif applied != level:
        logger.info("graphsignal: the sidecar runs at nice %d (SCHED_IDLE was refused)", NICE_LOW)
    return applied
