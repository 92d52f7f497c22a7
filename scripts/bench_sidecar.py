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

  python scripts/bench_sidecar.py [--reps 10] [--idle-seconds 10]
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


def summary(bench, config, values, **extra):
    emit(bench=bench, config=config, stat="median", reps=len(values), value=round(statistics.median(values), 4),
         min=round(min(values), 4), max=round(max(values), 4), **extra)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    args = ap.parse_args()
    gs, how = gs_run()
    env = quiet_env()
    emit(bench="setup", graphsignal_run=" ".join(gs), how=how, cpu_count=os.cpu_count(),
         python=sys.version.split()[0], load=os.getloadavg()[0])
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
