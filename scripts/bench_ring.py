#!/usr/bin/env python3
"""Ring benchmarks (JSON lines).

1. drain_rate: a C writer writes kernel records as fast as it can; the
   poller drains and aggregates on this thread. Reported: records drained
   per CPU-second of the poller thread (target >= 20 million/s).
2. steady: a C writer at a steady 2 million records/s for 10 s into a ring
   of the default size for this /dev/shm (GRAPHSIGNAL_RING_CAPACITY=65536 is
   the default in Docker's 64 MB one), the poller running on its own thread
   at its default (adaptive) interval. Reported: dropped records (target 0) and the poller's
   CPU as % of one core (target <= 15%).
3. contended: the protocol with both sides busy (SPSCQueue's benchmark):
   one C writer thread puts --contended-total records through a
   65536-record ring as fast as it can, writing a refused record again
   (after a sched_yield), while a C reader thread in the same process drains it as the sidecar
   does (scripts/c/ring_contended.c), so the reader's index keeps moving
   under every reserve. Reported: records per second through the ring (all
   of them arrive), and the refusals on the way.
"""
import argparse
import os
import subprocess
import threading
import time
import uuid

from benchutil import compile_c, emit

from graphsignal.sidecar.poller import Poller
from graphsignal.sidecar.store import MetricStore


def drain_rate(exe, total):
    run_id = "bench" + uuid.uuid4().hex[:8]
    store = MetricStore()
    poller = Poller(store, run_id)
    env = dict(os.environ, GRAPHSIGNAL_RUN_ID=run_id)
    proc = subprocess.Popen([exe, str(total), "0", "1"], env=env, stdout=subprocess.PIPE, text=True)
    cpu = 0.0
    try:
        while proc.poll() is None:
            t0 = time.thread_time()
            poller.poll_once()
            cpu += time.thread_time() - t0
        t0 = time.thread_time()
        poller.poll_once(final=True)
        cpu += time.thread_time() - t0
        written, dropped, secs = proc.stdout.read().split()
        emit(bench="drain_rate", records=poller.records_total, poller_cpu_s=round(cpu, 3),
             records_per_cpu_second=round(poller.records_total / cpu), writer_written=int(written),
             writer_dropped=int(dropped), writer_seconds=float(secs), target_records_per_cpu_second=20_000_000)
    finally:
        poller.cleanup_all()


def steady(exe, rate, seconds):
    run_id = "bench" + uuid.uuid4().hex[:8]
    store = MetricStore()
    poller = Poller(store, run_id)
    env = dict(os.environ, GRAPHSIGNAL_RUN_ID=run_id)
    cpu_box = {}

    def thread_body():
        t0 = time.thread_time()
        poller._run()
        cpu_box["cpu"] = time.thread_time() - t0

    th = threading.Thread(target=thread_body)
    th.start()
    w0 = time.monotonic()
    proc = subprocess.Popen([exe, str(int(rate * seconds)), str(rate), "1"], env=env, stdout=subprocess.PIPE,
                            text=True)
    out = proc.communicate()[0].split()
    time.sleep(0.2)
    poller._halt.set()
    th.join()
    wall = time.monotonic() - w0
    poller.poll_once(final=True)
    written, dropped, secs = int(out[0]), int(out[1]), float(out[2])
    emit(bench="steady", rate_per_s=rate, seconds=seconds, writer_seconds=secs, written=written, dropped=dropped,
         drained=poller.records_total, poller_cpu_percent_of_one_core=round(100.0 * cpu_box["cpu"] / wall, 2),
         ring_capacity=ring_capacity(), target_dropped=0,
         target_cpu_percent=15)
    poller.cleanup_all()


def contended(exe, total, capacity=1 << 16, writers=1):
    name = "gs-bench%s-%d-test" % (uuid.uuid4().hex[:8], os.getpid())
    out = subprocess.run([exe, name, str(writers), str(total), str(capacity)], stdout=subprocess.PIPE, text=True,
                         check=True).stdout.split()
    written, refused, read, secs = int(out[0]), int(out[1]), int(out[2]), float(out[3])
    assert read == written == total // writers * writers, (read, written)
    emit(bench="contended", writers=writers, ring_capacity=capacity, records=read, refused=refused, seconds=secs,
         records_per_second=round(read / secs))


def ring_capacity():
    """The capacity the writer used: the variable, or the default for this /dev/shm."""
    from graphsignal.rings import layout as L

    if os.environ.get("GRAPHSIGNAL_RING_CAPACITY"):
        cap = 1
        while cap < int(os.environ["GRAPHSIGNAL_RING_CAPACITY"]):
            cap <<= 1
        return cap
    return int(L.lib.graphsignal_ring_default_capacity())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--total", type=int, default=50_000_000, help="records for the drain-rate run")
    ap.add_argument("--rate", type=int, default=2_000_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--contended-total", type=int, default=20_000_000, help="records for the contended run")
    args = ap.parse_args()
    exe = compile_c("ring_writer.c")
    drain_rate(exe, args.total)
    steady(exe, args.rate, args.seconds)
    contended(compile_c("ring_contended.c"), args.contended_total)


if __name__ == "__main__":
    main()
