#!/usr/bin/env python3
"""What graphsignal-run costs at start, at exit and at rest (JSON lines).

  start_latency  launch -> the workload's first instruction: a C program
                 that prints CLOCK_REALTIME as its first act, started bare
                 and under graphsignal-run (seconds)
  true           wall and CPU seconds of `graphsignal-run true` and of a
                 bare `true` (CPU: user + system of every process of the
                 run, from RUSAGE_CHILDREN once all are reaped)
  threads        threads of each profiler process while a workload sleeps
  idle_cpu       CPU % of one core of each profiler process (and of the
                 workload) over --idle-seconds while the workload sleeps,
                 after the endpoint is up; NVML, when this host has it, is on;
                 reader=none: nobody has read /signals, reader=read_once:
                 right after one read (the sidecar then prerenders changed
                 series every 50 ms for a minute)

Bare and wrapped runs are interleaved; each summary line is the median over
--reps repetitions. Targets (issue 13): `graphsignal-run true` <= 0.3 s wall
and 0.3 CPU-s on the 16-core GPU host (<= 0.4 s wall on the CPU machine);
the sidecar's idle CPU <= 1 % of a core.

--loaded measures the sidecar under load instead (and only that):

  loaded         a C workload writing --load-rate kernel records/s into its
                 ring (about what llama-server's 4-client decode makes under
                 CUPTI) while a reader GETs /signals every --reader-interval
                 seconds (as scripts/engine_e2e.py does); over --load-seconds:
                 the sidecar's CPU seconds per wall second (all its threads),
                 its wakeups per second (voluntary context switches of all
                 its threads: sleeps that ended) and involuntary switches
                 per second (preempted), and the records: written by the
                 workload, recorded in the final payload, and dropped (the
                 ring's graphsignal_dropped_records): recorded + dropped ==
                 written, or a loss went uncounted. Each configuration of
                 --configs runs once per repetition, interleaved: a
                 GRAPHSIGNAL_SIDECAR_PRIORITY value ("unset" leaves it
                 unset), optionally after PATH: (another checkout's
                 graphsignal-run, native parts built in it: a baseline, or
                 a snapshot of this one that edits cannot change mid-run);
                 --hog N adds N busy processes competing for every core (a
                 starved drain must still count what it lost).

  python scripts/bench_sidecar.py [--reps 10] [--idle-seconds 10]
  python scripts/bench_sidecar.py --loaded [--configs normal,idle] [--reps 5] [--hog 2]
  python scripts/bench_sidecar.py --loaded --configs /tmp/base:unset,/tmp/snap:normal,/tmp/snap:idle
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from benchutil import compile_c, emit  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def gs_run():
    """The console script next to this interpreter (what users run), else -m."""
    exe = os.path.join(os.path.dirname(sys.executable), "graphsignal-run")
    if os.access(exe, os.X_OK):
        return [exe], "console script"
    return [sys.executable, "-m", "graphsignal.cli.run"], "python -m"


def quiet_env():
    env = dict(os.environ)
    env["GRAPHSIGNAL_LOG_LEVEL"] = "error"
    env.pop("GRAPHSIGNAL_SIGNALS_FILE", None)
    env.pop("GRAPHSIGNAL_LINGER", None)
    return env


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(cmd, env, capture=False):
    """(wall seconds, CPU seconds of the whole process tree, stdout)."""
    c0 = children_cpu()
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                         stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    return wall, children_cpu() - c0, out.stdout


def start_latency(cmd, env):
    t0 = time.time_ns()
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, check=True).stdout
    return (int(out.split()[-1]) - t0) / 1e9


# -- processes of a live run ----------------------------------------------------------
def _stat(pid):
    with open("/proc/%d/stat" % pid, "rb") as f:
        raw = f.read()
    rest = raw[raw.rfind(b")") + 2:].split()
    return {"ppid": int(rest[1]), "cpu_ticks": int(rest[11]) + int(rest[12])}


def _threads(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return None


def _cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]


def descendants(root):
    by_parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                by_parent.setdefault(_stat(int(name))["ppid"], []).append(int(name))
            except OSError:
                pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(by_parent.get(p, []))
    return out


def roles(root, workload_name):
    """{role: pid}: graphsignal-run (the process we started), the sidecar
    (a profiler process it started, if any) and the workload."""
    out = {"graphsignal-run": root}
    for pid in descendants(root):
        if pid == root:
            continue
        try:
            cmd = _cmdline(pid)
        except OSError:
            continue
        if cmd and os.path.basename(cmd[0]) == workload_name:
            out["workload"] = pid
        elif any("graphsignal" in a for a in cmd):
            out["sidecar"] = pid
    return out


def live_run(gs, env, idle_seconds):
    port = free_port()
    p = subprocess.Popen(gs + ["--listen-port", str(port), "sleep", str(2 * int(idle_seconds) + 30)], env=env,
                         stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                # /health, not /signals: a read of /signals makes the sidecar
                # prerender for the next minute (measured below as "read")
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1) as r:
                    r.read()
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(2.0)  # past start-up: the first polls and the first history snapshot
        who = roles(p.pid, "sleep")
        for role, pid in who.items():
            emit(bench="threads", process=role, threads=_threads(pid))
        for reader in ("none", "read_once"):
            if reader == "read_once":
                # an agent that read /signals once: the sidecar prerenders for a minute after
                with urllib.request.urlopen("http://127.0.0.1:%d/signals" % port, timeout=5) as r:
                    json.loads(r.read())
            t0 = time.monotonic()
            c0 = {role: _stat(pid)["cpu_ticks"] for role, pid in who.items()}
            time.sleep(idle_seconds)
            dt = time.monotonic() - t0
            for role, pid in who.items():
                ticks = _stat(pid)["cpu_ticks"] - c0[role]
                emit(bench="idle_cpu", process=role, reader=reader, seconds=round(dt, 2),
                     cpu_percent=round(100.0 * ticks / CLK_TCK / dt, 3))
    finally:
        p.terminate()
        p.wait(30)


# -- a sidecar under load -------------------------------------------------------------
def _task_switches(pid):
    """(voluntary, involuntary) context switches of every live thread of pid."""
    vol = invol = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        invol += int(line.split()[1])
        except OSError:
            pass  # a thread that just ended
    return vol, invol


def _reader(url, interval, halt, out):
    while not halt.wait(interval):
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                r.read()
            out.append(time.perf_counter() - t0)
        except OSError:
            out.append(None)


def _recorded(doc, pid):
    """Kernel launches the payload recorded for process pid, and its ring's
    dropped records."""
    launches = dropped = 0
    for m in doc.get("metrics") or ():
        if (m.get("tags") or {}).get("process.pid") != str(pid):
            continue
        if m["name"] == "cuda_kernels_nanoseconds":
            launches += sum(f.get("samples") or 0 for f in (m["stats"].get("frames") or ()))
        elif m["name"] == "graphsignal_dropped_records":
            dropped += m["stats"].get("total") or 0
    return launches, dropped


def loaded_run(config, writer, rate, seconds, reader_interval, env):
    """One run of the ring writer under graphsignal-run with `config`
    (see the module doc); returns its measurements."""
    import tempfile
    import threading

    e = dict(env)
    gs, cwd = gs_run()[0], None
    tree, _, level = config.rpartition(":")
    if tree:
        gs = [sys.executable, "-m", "graphsignal.cli.run"]
        e["PYTHONPATH"] = tree
        cwd = tempfile.mkdtemp(prefix="gs-bench-cwd-")  # python -m: the current folder would come first
    e.pop("GRAPHSIGNAL_SIDECAR_PRIORITY", None)
    if level != "unset":
        e["GRAPHSIGNAL_SIDECAR_PRIORITY"] = level
    fd, out_file = tempfile.mkstemp(prefix="gs-bench-", suffix=".json")
    os.close(fd)
    os.unlink(out_file)
    e["GRAPHSIGNAL_SIGNALS_FILE"] = out_file
    port = free_port()
    total = int(rate * (seconds + 6.0))
    p = subprocess.Popen(gs + ["--listen-port", str(port), writer, str(total), str(rate), "1"], env=e,
                         stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=cwd)
    res = {"config": config}
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1) as r:
                    r.read()
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(2.0)  # past start-up
        who = roles(p.pid, os.path.basename(writer))
        sc = who.get("sidecar")
        if sc is None:
            return dict(res, error="no sidecar process found")
        halt, lat = threading.Event(), []
        reader = threading.Thread(target=_reader, args=("http://127.0.0.1:%d/signals" % port, reader_interval,
                                                        halt, lat))
        reader.start()
        t0, c0, s0 = time.monotonic(), _stat(sc)["cpu_ticks"], _task_switches(sc)
        time.sleep(seconds)
        dt, c1, s1 = time.monotonic() - t0, _stat(sc)["cpu_ticks"], _task_switches(sc)
        threads = _threads(sc)
        halt.set()
        reader.join()
        res.update(seconds=round(dt, 2), cpu_s_per_s=round((c1 - c0) / CLK_TCK / dt, 4),
                   wakeups_per_s=round((s1[0] - s0[0]) / dt, 1), preempted_per_s=round((s1[1] - s0[1]) / dt, 1),
                   threads=threads, reads=len(lat), read_failures=sum(1 for x in lat if x is None),
                   read_p50_ms=round(1e3 * statistics.median([x for x in lat if x is not None]), 2)
                   if any(x is not None for x in lat) else None)
        out = p.communicate(timeout=seconds + 120)[0].split()
        accepted, wdropped = int(out[-3]), int(out[-2])  # the writer: into the ring, dropped
        with open(out_file) as f:
            recorded, dropped = _recorded(json.load(f), who["workload"])
        res.update(written=total, recorded=recorded, dropped=dropped, writer_accepted=accepted,
                   writer_dropped=wdropped, accounted=recorded + dropped == total)
        return res
    finally:
        if p.poll() is None:
            p.terminate()
            p.wait(30)
        for path in (out_file,):
            try:
                os.unlink(path)
            except OSError:
                pass
        if cwd:
            os.rmdir(cwd)


def hogs(n):
    """n busy processes (one per core they take), to be terminated."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def loaded(args, env):
    writer = compile_c("ring_writer.c")
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    hog = hogs(args.hog)
    got = {c: [] for c in configs}
    try:
        for rep in range(args.reps):
            k = rep % len(configs)
            for c in configs[k:] + configs[:k]:
                r = loaded_run(c, writer, args.load_rate, args.load_seconds, args.reader_interval, env)
                emit(bench="loaded", rep=rep, rate_per_s=args.load_rate, hog=args.hog, **r)
                if "error" not in r:
                    got[c].append(r)
    finally:
        for h in hog:
            h.terminate()
            h.wait()
    for c in configs:
        runs = got[c]
        if not runs:
            continue
        for key in ("cpu_s_per_s", "wakeups_per_s", "preempted_per_s", "read_p50_ms"):
            vals = [r[key] for r in runs if r.get(key) is not None]
            if vals:
                summary("loaded_" + key, c, vals, hog=args.hog, rate_per_s=args.load_rate)
        emit(bench="loaded_records", config=c, hog=args.hog, runs=len(runs),
             written=sum(r["written"] for r in runs), recorded=sum(r["recorded"] for r in runs),
             dropped=sum(r["dropped"] for r in runs), all_accounted=all(r["accounted"] for r in runs))


def summary(bench, config, values, **extra):
    emit(bench=bench, config=config, stat="median", reps=len(values), value=round(statistics.median(values), 4),
         min=round(min(values), 4), max=round(max(values), 4), **extra)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--loaded", action="store_true", help="measure the sidecar under load (only that)")
    ap.add_argument("--configs", default="normal,idle",
                    help="--loaded: GRAPHSIGNAL_SIDECAR_PRIORITY values to compare, 'unset', or tree=PATH")
    ap.add_argument("--load-rate", type=int, default=50000, help="--loaded: records per second")
    ap.add_argument("--load-seconds", type=float, default=10.0)
    ap.add_argument("--reader-interval", type=float, default=0.5)
    ap.add_argument("--hog", type=int, default=0, help="--loaded: busy processes competing for the cores")
    args = ap.parse_args()
    gs, how = gs_run()
    env = quiet_env()
    emit(bench="setup", graphsignal_run=" ".join(gs), how=how, cpu_count=os.cpu_count(),
         python=sys.version.split()[0], load=os.getloadavg()[0])
    if args.loaded:
        loaded(args, env)
        return
    clock = compile_c("print_time.c")
    true = subprocess.run(["sh", "-c", "command -v true"], capture_output=True, text=True).stdout.strip() or "true"

    for cmd in ([clock], gs + ["--listen-port", "0", clock]):  # warm caches once
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL)
    lat = {"bare": [], "graphsignal": []}
    wall = {"bare": [], "graphsignal": []}
    cpu = {"bare": [], "graphsignal": []}
    for rep in range(args.reps):
        order = ("bare", "graphsignal") if rep % 2 == 0 else ("graphsignal", "bare")
        for config in order:
            prefix = [] if config == "bare" else gs + ["--listen-port", "0"]
            s = start_latency(prefix + [clock], env)
            lat[config].append(s)
            emit(bench="start_latency", config=config, rep=rep, seconds=round(s, 4))
        for config in order:
            prefix = [] if config == "bare" else gs + ["--listen-port", "0"]
            w, c, _ = timed(prefix + [true], env)
            wall[config].append(w)
            cpu[config].append(c)
            emit(bench="true", config=config, rep=rep, wall_s=round(w, 4), cpu_s=round(c, 4))
    for config in ("bare", "graphsignal"):
        summary("start_latency", config, lat[config], unit="s")
        summary("true_wall", config, wall[config], unit="s")
        summary("true_cpu", config, cpu[config], unit="s")
    live_run(gs, env, args.idle_seconds)


if __name__ == "__main__":
    main()
