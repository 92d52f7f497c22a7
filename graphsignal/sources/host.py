"""Host and process metrics (psutil).

Host: CPU (top's convention: 100 = one core busy; the host resource
carries the core count) and memory. Processes: the workload's child and
every descendant, found as they appear: CPU %, RSS and virtual memory,
plus a process resource with its parent and command line.

Command lines are redacted before they are stored (redact_command_line):
the payload is served over HTTP, to the network with --listen-host.
"""
import os
import re

import psutil

from graphsignal.sources import Source, SourceUnavailable
from graphsignal.sources.twins import ProcessCpuTotals


# A name "says" a secret when one of its words is one of these ("--api-key",
# "HF_TOKEN", "apiKey", "db.password"); "--tokenizer" and "--max-tokens" do not.
SECRET_WORDS = frozenset(("key", "apikey", "token", "authtoken", "accesstoken", "secret", "password", "passwd",
                          "auth", "authorization", "credential", "credentials"))
REDACTED = "***"
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_NAME = re.compile(r"^(-{0,2})([A-Za-z_][\w.\-]*)$")
_ASSIGN = re.compile(r"^(-{0,2}[A-Za-z_][\w.\-]*)=(.*)$", re.S)
_HEADER = re.compile(r"^([A-Za-z][\w\-]*):\s*(\S.*)$", re.S)  # curl -H "Authorization: Bearer ..."
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][\w+.\-]*://[^/:@\s]*:)[^/@\s]+@")


def says_secret(name):
    return any(w.lower() in SECRET_WORDS for w in _WORDS.findall(name))


def redact_command_line(args):
    """args with the values of secret-named options and NAME=value pairs
    replaced by ***, names kept: "--api-key X", "--hf-token=X", "HF_TOKEN=X",
    a header "Authorization: X", and the password of a URL
    (scheme://user:X@host)."""
    out = []
    redact_next = False
    for arg in args:
        if redact_next and not arg.startswith("-"):
            out.append(REDACTED)
            redact_next = False
            continue
        redact_next = False
        m = _ASSIGN.match(arg)
        if m and says_secret(m.group(1)):
            out.append(m.group(1) + "=" + REDACTED)
            continue
        m = _NAME.match(arg)
        if m and m.group(1) and says_secret(m.group(2)):
            out.append(arg)
            redact_next = True
            continue
        m = _HEADER.match(arg)
        if m and says_secret(m.group(1)):
            out.append(m.group(1) + ": " + REDACTED)
            continue
        out.append(_URL_PASSWORD.sub(lambda u: u.group(1) + REDACTED + "@", arg))
    return out


class ProcessTree:
    """The workload's processes: the root and its descendants."""

    def __init__(self, root_pid_fn):
        self.root_pid_fn = root_pid_fn
        self.procs = {}  # pid -> psutil.Process (kept so cpu_percent has a baseline)

    def refresh(self):
        root = self.root_pid_fn()
        if root is None:
            return []
        try:
            rp = self.procs.get(root) or psutil.Process(root)
            found = [rp] + rp.children(recursive=True)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            found = []
        alive = {}
        for p in found:
            alive[p.pid] = self.procs.get(p.pid) or p
        self.procs = alive
        return list(alive.values())

    def pids(self):
        return sorted(self.procs)


class HostSource(Source):
    name = "host"
    interval = 1.0

    def __init__(self, store, root_pid_fn, clock=None):
        self.store = store
        self.tree = ProcessTree(root_pid_fn)
        self.cmdline_read = set()  # pids whose command line is in their resource
        self.cpu_count = psutil.cpu_count() or os.cpu_count() or 1
        self.cpu_totals = ProcessCpuTotals()  # process_cpu_time_nanoseconds over the tree

    def setup(self):
        try:
            psutil.cpu_percent(interval=None)  # baseline for the first reading
        except Exception as e:
            raise SourceUnavailable("psutil cannot read host CPU: %s" % e)

    def poll(self):
        s = self.store
        ts = s.clock()
        # psutil's system-wide figure is normalized to all cores; report it
        # the way top reports a process (100 = one core fully busy)
        s.set_gauge("host_cpu_usage_percent", {}, round(psutil.cpu_percent(interval=None) * self.cpu_count, 2), ts)
        vm = psutil.virtual_memory()
        s.set_gauge("host_memory_usage_bytes", {}, int(vm.total - vm.available), ts)
        s.set_gauge("host_memory_total_bytes", {}, int(vm.total), ts)
        s.set_gauge("host_memory_available_bytes", {}, int(vm.available), ts)
        root = self.tree.root_pid_fn()
        for p in self.tree.refresh():
            try:
                with p.oneshot():
                    cpu = p.cpu_percent(interval=None)
                    times = p.cpu_times()
                    started = p.create_time()
                    mem = p.memory_info()
                    ppid = p.ppid()
                    # a command line does not change: read it once per process
                    cmd = p.cmdline() if p.pid not in self.cmdline_read else None
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
            tags = {"process.pid": str(p.pid)}
            s.set_gauge("process_cpu_usage_percent", tags, round(cpu, 2), ts)
            # its cumulative twin: the process's own user + system time
            # (children it reaped are counted as themselves, while alive)
            cpu_ns = int(round((times.user + times.system) * 1e9))
            s.set_counter("process_cpu_time_nanoseconds", tags, cpu_ns, ts)
            self.cpu_totals.update(p.pid, started, cpu_ns)
            s.set_gauge("process_memory_usage_bytes", tags, int(mem.rss), ts)
            s.set_gauge("process_memory_virtual_bytes", tags, int(mem.vms), ts)
            rtags = {"process.pid": str(p.pid), "process.root_pid": str(root)}
            attrs = {"process.parent_pid": str(ppid)}
            if cmd is not None:
                attrs["process.command_line"] = " ".join(redact_command_line(cmd))
                self.cmdline_read.add(p.pid)
            s.set_resource("process", rtags, attrs, ts)
        if root is not None:
            self.cpu_totals.retire(set(self.tree.procs))
            s.set_counter("process_cpu_time_nanoseconds", {"process.root_pid": str(root), "scope": "process_tree"},
                          self.cpu_totals.total(), ts)
