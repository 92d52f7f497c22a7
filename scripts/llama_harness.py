"""A llama.cpp llama-server run for measurements, shared by
scripts/engine_e2e.py (decode speed under each profiler mode),
scripts/record_findings_cases.py and the llama-server GPU tests: the
server process (bare, under graphsignal-run, or behind another command:
Mode), its closed-loop load of /completion requests (Load), a /signals
poller, what a payload shows (payload_facts, engine_shown, wait_scraped),
and building llama-server and writing a model (build_server, make_model).
engine_e2e.py's header says how each is used.
"""
import http.client
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PORT_FIELD = "{port}"  # in a --run command: the port its /signals should listen on
CMAKE_FLAGS = ["-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
               "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF",
               "-DCMAKE_BUILD_TYPE=Release"]
DEFAULT_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def log(msg):
    sys.stderr.write("engine_e2e: %s\n" % msg)
    sys.stderr.flush()


def percentile(values, q):
    """Nearest-rank percentile (q in 0-100) of a list; None when empty."""
    v = sorted(values)
    if not v:
        return None
    i = min(len(v) - 1, max(0, int(round(q / 100.0 * (len(v) - 1)))))
    return v[i]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# -- modes ------------------------------------------------------------------------


class Mode:
    """How to run the server: bare, under graphsignal-run with options and
    environment variables (spec), or behind another command (command: a
    --run template, see the module doc)."""

    def __init__(self, name, spec="", command=None):
        self.name = name
        self.spec = spec
        self.command = shlex.split(command) if command is not None else None
        if self.command is not None:
            if not self.command:
                raise ValueError("--run %s: the command is empty" % name)
            self.bare, self.options, self.env = False, [], {}
            return
        words = shlex.split(spec)
        self.bare = "bare" in words
        self.options, self.env = [], {}
        for w in words:
            if w == "bare":
                continue
            if "=" in w and not w.startswith("-"):
                k, v = w.split("=", 1)
                self.env[k] = v
            else:
                self.options.append(w)
        if self.bare and (self.options or self.env):
            raise ValueError("mode %s: 'bare' takes no graphsignal-run options or variables" % name)

    @property
    def external(self):
        """Run behind a --run command, not this checkout's graphsignal-run."""
        return self.command is not None

    @property
    def serves_signals(self):
        """Whether the run has a /signals endpoint to poll: graphsignal-run
        modes always, a --run command when its template takes {port}."""
        if self.bare:
            return False
        return not self.external or any(PORT_FIELD in w for w in self.command)

    def prefix(self, listen_port):
        """The words of a --run command, {port} filled in."""
        return [w.replace(PORT_FIELD, str(listen_port)) for w in self.command]

    def describe(self):
        d = {"name": self.name, "bare": self.bare, "options": self.options, "env": self.env}
        if self.external:
            d.update(command=self.command, signals=self.serves_signals)
        return d


def without_checkout(pythonpath):
    """PYTHONPATH without this checkout: a --run command brings its own
    graphsignal (an older build, another version), which this checkout on
    its path would shadow."""
    here = os.path.realpath(ROOT)
    keep = [p for p in (pythonpath or "").split(os.pathsep) if p and os.path.realpath(p) != here]
    return os.pathsep.join(keep)


# -- the server ---------------------------------------------------------------------


class Server:
    """One llama-server process: bare, under graphsignal-run, or behind a
    --run command."""

    def __init__(self, server_bin, model, port, *, mode=None, listen_port=None, ngl=99, ctx=8192, parallel=4,
                 server_args=(), gs_run=None, signals_file=None, env=None, log_path=None, cwd=None):
        server_bin, model = os.path.abspath(server_bin), os.path.abspath(model)
        self.server_bin = server_bin
        self.port = port
        self.mode = mode or Mode("bare", "bare")
        self.listen_port = listen_port
        self.signals_file = signals_file
        cmd = [server_bin, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-ngl", str(ngl),
               "--metrics", "-c", str(ctx), "-np", str(parallel)] + list(server_args)
        e = dict(os.environ if env is None else env)
        bindir = os.path.dirname(os.path.abspath(server_bin))
        # a build with its backends as loadable modules looks for them next to the binary
        e["LD_LIBRARY_PATH"] = bindir + (os.pathsep + e["LD_LIBRARY_PATH"] if e.get("LD_LIBRARY_PATH") else "")
        if self.mode.external:
            cmd = self.mode.prefix(listen_port) + cmd
            pp = without_checkout(e.get("PYTHONPATH"))
            if pp:
                e["PYTHONPATH"] = pp
            else:
                e.pop("PYTHONPATH", None)
        elif not self.mode.bare:
            gs = list(gs_run or [sys.executable, "-m", "graphsignal.cli.run"])
            cmd = gs + ["--listen-port", str(listen_port)] + self.mode.options + cmd
            e["PYTHONPATH"] = ROOT + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
        if not self.mode.bare:
            e.setdefault("GRAPHSIGNAL_LOG_LEVEL", "warning")
            if signals_file:
                e["GRAPHSIGNAL_SIGNALS_FILE"] = signals_file
            e.update(self.mode.env)
        self.cmd = cmd
        self.log_path = log_path
        self._log = open(log_path, "ab") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, env=e, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)
        self.returncode = None

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    @property
    def signals_url(self):
        return "http://127.0.0.1:%d/signals" % self.listen_port if self.mode.serves_signals else None

    def wait_healthy(self, timeout=300.0):
        """Polls GET /health until it answers 200 (503 while the model
        loads); raises RuntimeError if the process exits or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("llama-server exited with %s before it was healthy (log: %s)"
                                   % (self.proc.returncode, self.log_path))
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        raise RuntimeError("llama-server not healthy after %d s (log: %s)" % (timeout, self.log_path))

    def stop(self, timeout=20.0):
        """SIGTERM (graphsignal-run forwards it; llama-server shuts down
        cleanly), SIGKILL to the whole group after `timeout`; returns the
        exit status."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log("%s did not stop in %d s; killing it" % (self.mode.name, timeout))
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        # whatever the server started (nothing, normally) goes with it
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self._log is not subprocess.DEVNULL:
            self._log.close()
        self.returncode = self.proc.returncode
        return self.returncode


# -- the load -----------------------------------------------------------------------


def completion(conn, prompt, n_predict, extra=None):
    """One POST /completion on a kept-alive connection: (tokens, seconds,
    the server's own generation milliseconds `timings.predicted_ms`, or
    None)."""
    body = {"prompt": prompt, "n_predict": n_predict, "ignore_eos": True}
    if extra:
        body.update(extra)
    data = json.dumps(body).encode()
    t0 = time.monotonic()
    conn.request("POST", "/completion", body=data, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read()
    dt = time.monotonic() - t0
    if resp.status != 200:
        raise RuntimeError("HTTP %d: %s" % (resp.status, raw[:200]))
    doc = json.loads(raw)
    timings = doc.get("timings") or {}
    n = timings.get("predicted_n", doc.get("tokens_predicted"))
    gen_ms = timings.get("predicted_ms")
    gen_ms = float(gen_ms) if isinstance(gen_ms, (int, float)) and not isinstance(gen_ms, bool) and gen_ms > 0 else None
    return int(n or 0), dt, gen_ms


class Load:
    """`clients` threads POSTing /completion back to back from start() until
    stop(); each completed request is kept as (completed at, tokens,
    seconds, generation ms or None) in monotonic time."""

    def __init__(self, port, clients, prompt=DEFAULT_PROMPT, n_predict=128, extra=None, timeout=300.0):
        self.port, self.clients, self.prompt, self.n_predict = port, clients, prompt, n_predict
        self.extra, self.timeout = extra, timeout
        self.done = []
        self.errors = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = []

    def _client(self):
        conn = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
                n, dt, gen_ms = completion(conn, self.prompt, self.n_predict, self.extra)
                with self._lock:
                    self.done.append((time.monotonic(), n, dt, gen_ms))
            except (OSError, http.client.HTTPException, RuntimeError, ValueError) as e:
                with self._lock:
                    self.errors.append("%s: %s" % (type(e).__name__, str(e)[:200]))
                if conn is not None:
                    conn.close()
                conn = None
                self._stop.wait(0.05)
        if conn is not None:
            conn.close()

    def start(self):
        for _ in range(self.clients):
            t = threading.Thread(target=self._client, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout=None):
        self._stop.set()
        for t in self._threads:
            t.join(timeout)

    def window(self, t0, t1):
        """(tokens inside [t0, t1], [latency seconds of the requests completed
        in it]): each request's tokens prorated by the share of its time
        (completed at t, took dt) that lies inside the window."""
        with self._lock:
            done = list(self.done)
        tokens = 0.0
        for t, n, dt, _ in done:
            overlap = min(t, t1) - max(t - dt, t0)
            if overlap > 0:
                tokens += n * (overlap / dt if dt > 0 else 1.0)
        return tokens, [dt for t, n, dt, _ in done if t0 <= t <= t1]

    def decode_rate(self, t0, t1):
        """The server's own decode speed over the requests that ended in
        [t0, t1]: their tokens over their generation time
        (timings.predicted_ms), tokens per second of one request's
        generation; None without those timings. It leaves out what lies
        around the decode loop (HTTP, the prompt, the clients)."""
        with self._lock:
            done = [(n, ms) for t, n, dt, ms in self.done if t0 <= t <= t1 and ms]
        ms = sum(m for _, m in done)
        return round(1000.0 * sum(n for n, _ in done) / ms, 2) if ms > 0 else None


class SignalsPoller:
    """GETs /signals every `interval` seconds while the load runs: client-side
    latency of the whole answer (status line to last byte)."""

    def __init__(self, url, interval=0.5):
        self.url, self.interval = url, interval
        self.latencies = []
        self.failures = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=5) as r:
                    r.read()
                self.latencies.append(time.perf_counter() - t0)
            except (urllib.error.URLError, ConnectionError, OSError):
                self.failures += 1
            self._stop.wait(self.interval)

    def start(self):
        self._t.start()
        return self

    def stop(self):
        self._stop.set()
        self._t.join(10)


# -- reading a payload --------------------------------------------------------------


def payload_facts(doc):
    """What a point reports from a /signals payload."""
    if not doc:
        return {"payload": False}
    dropped, frames, replays, kernels, ksamples, errors, captures = 0, set(), 0, set(), 0, [], 0
    for m in doc.get("metrics") or ():
        name, st = m.get("name"), m.get("stats") or {}
        if name == "graphsignal_dropped_records":
            dropped += st.get("total") or 0
        elif name == "cuda_graph_captures":
            captures += st.get("total") or 0
        elif name == "cuda_graphs_nanoseconds":
            for f in st.get("frames") or ():
                frames.add(f["name"])
                replays += f.get("samples") or 0
        elif name == "cuda_kernels_nanoseconds":
            for f in st.get("frames") or ():
                kernels.add(f["name"])
                ksamples += f.get("samples") or 0
    for e in doc.get("errors") or ():
        if e.get("resolved_ns") is None and e.get("level") in ("error", "critical"):
            errors.append(e.get("message"))
    engine = doc.get("engine") or {}
    # graph_captures: instantiations and in-place updates (an engine that re-captures its decode graph
    # every step pays the capture's launches and the update on every token)
    return {"payload": True, "dropped_records": dropped, "graph_frames": len(frames), "graph_replays": replays,
            "graph_captures": captures,
            "kernel_symbols": len(kernels), "kernel_launches": ksamples, "errors": errors[-5:],
            "engine": engine.get("engine"), "engine_generation_tokens_total": engine.get("generation_tokens_total")}


ENGINE_PREFIX = "llamacpp:"  # llama-server's metric names, as a profiler re-serves them


def engine_shown(doc, after_ns=0):
    """How a /signals document shows a good scrape of the engine at a time
    after `after_ns` (epoch ns): "scrape" (this project's
    prometheus_scrape_up and _timestamp_ns say so), "metrics" (only with
    after_ns 0: llama-server's own series are there, which is how another
    build or tool that lacks those two shows it), or None."""
    stats, engine = {}, False
    for m in doc.get("metrics") or ():
        name = m.get("name") or ""
        if name in ("prometheus_scrape_up", "prometheus_scrape_timestamp_ns"):
            stats[name] = (m.get("stats") or {}).get("value")
        elif name.startswith(ENGINE_PREFIX):
            engine = True
    if stats.get("prometheus_scrape_up") == 1 and (stats.get("prometheus_scrape_timestamp_ns") or 0) > after_ns:
        return "scrape"
    return "metrics" if engine and not after_ns and "prometheus_scrape_up" not in stats else None


def wait_scraped(signals_url, timeout=60.0, after_ns=0):
    """(seconds until /signals showed a good scrape of the engine at a time
    after `after_ns` (engine_shown), how it showed it); (None, None) if
    that did not happen within `timeout`. graphsignal-run's backoff while
    the model loaded may delay the first scrape."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            with urllib.request.urlopen(signals_url, timeout=5) as r:
                doc = json.loads(r.read())
            how = engine_shown(doc, after_ns) if isinstance(doc, dict) else None
            if how:
                return round(time.monotonic() - t0, 3), how
        except (urllib.error.URLError, ConnectionError, OSError, ValueError):
            pass
        time.sleep(0.2)
    return None, None


# -- build / model ------------------------------------------------------------------


def build_server(src, build_dir, cpu_only=False, cuda_arch="90", jobs=None):
    flags = ["-DGGML_CUDA=OFF"] if cpu_only else ["-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=%s" % cuda_arch]
    subprocess.run(["cmake", "-S", src, "-B", build_dir] + flags + CMAKE_FLAGS, check=True,
                   stdout=sys.stderr)
    subprocess.run(["cmake", "--build", build_dir, "--target", "llama-server", "-j", str(jobs or os.cpu_count())],
                   check=True, stdout=sys.stderr)
    exe = os.path.join(build_dir, "bin", "llama-server")
    if not os.access(exe, os.X_OK):
        raise SystemExit("engine_e2e: the build made no %s" % exe)
    return exe


def make_model(script, src, out, extra):
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    subprocess.run([sys.executable, script, src, out] + shlex.split(extra or ""), check=True, stdout=sys.stderr)
