"""Error capture from the workload's console.

The supervisor's pump threads write the child's stdout and stderr through
unchanged and then hand each chunk to ConsoleCapture.feed(). We record
error entries (store.add_error) for:

  Python tracebacks       the whole traceback (chained ones included) as
                          `exception`, its last exception line as `message`
  faulthandler blocks     "Fatal Python error: ..." with its stacks
  engine log lines        ERROR / CRITICAL / FATAL lines of vLLM, SGLang,
                          TensorRT-LLM, llama.cpp, uvicorn, logging, glog
  CUDA errors             "CUDA error: ...", illegal memory access,
                          device-side assert, CUBLAS/CUDNN status, ...
  out of memory           PyTorch's OutOfMemoryError, CUDA's, bad_alloc
  NCCL                    NCCL WARN lines (warning), NCCL errors, watchdog
                          timeouts
  engine notices          a request over the context size (error), a
                          context shift (warning), llama.cpp's "offloaded
                          N/M layers to GPU" when N < M (warning): what
                          graphsignal.findings reads
  C/C++ crashes           "terminate called ..." with its what(), failed
                          assertions, "Segmentation fault" from shells,
                          Rust panics

The process dying by a signal or exiting non-zero is recorded by the
supervisor (Supervisor._record_exit), not here.

Each entry: level ("warning" / "error" / "critical"), message, exception
(the block's text or null), tags {process.pid, stream, error.kind}. The pid
comes from a worker prefix such as "(VllmWorker rank=0 pid=123)" or an
NCCL line, else from the root child.

Cost and bounds. feed() runs on a pump thread after the bytes went through,
so the common chunk costs one regex search (TRIGGER) and a few bytes.find
calls and no Python work per line; lines are only looked at around a
trigger, or one by one while a traceback is open. A line longer than MAX_LINE bytes is cut
(the rest is skipped without being buffered: a 10 MB line costs a few
memchr scans). Only matched lines are ever decoded or kept: arbitrary output
(prompts, completions) is never recorded. Entries are rate-limited (token
bucket); repeats are counted by the store; entries dropped by the limit are
counted in the `console_errors_dropped_total` counter.

feed() only queues the chunk for a scanner thread, so the pump goes back to
the workload's pipe at once: a flood of tracebacks costs the sidecar CPU,
never the workload's time. Output that arrives while MAX_QUEUED bytes are
still waiting is not scanned (`console_unscanned_bytes_total`).
"""
import collections
import logging
import re
import threading
import time
from typing import Any, Callable, Deque, Dict, Optional, OrderedDict, Set, Tuple

from graphsignal.channel import CUT, MAX_LINE  # a line keeps its first MAX_LINE bytes, the rest is cut
from graphsignal.report import Reporter
from graphsignal.textsafe import clean

MAX_BLOCK_HEAD = 20  # first lines of a traceback kept...
MAX_BLOCK_TAIL = 100  # ...and its last lines (the exception is at the end)
MAX_OPEN = 16  # tracebacks collected at once per stream (one per process prefix)
IDLE_CLOSE = 200  # lines of other processes after which an open traceback is closed
FLUSH_AFTER = 0.5  # seconds of quiet after which an open traceback is recorded
RATE = 20.0  # entries per second, sustained...
BURST = 100.0  # ...after a burst of this many
DROPPED_METRIC = "console_errors_dropped_total"
UNSCANNED_METRIC = "console_unscanned_bytes_total"
MAX_QUEUED = 4 << 20  # bytes waiting for the scanner; beyond, output is passed through unscanned
CLOSE_WAIT = 2.0  # seconds close_stream waits for the scanner to reach the end of the stream

logger = logging.getLogger("graphsignal")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
RECENT = 100  # entries remembered as recent: their repeats are counted without taking a token

# Cheap pre-filter over whole chunks: a line without any of these is never
# looked at; everything the classifier below matches contains one. Kept to
# literals that start with an uppercase letter (Python's re then skips most
# positions at C speed) plus a few lowercase ones found with bytes.find.
TRIGGER = re.compile(
    rb"Traceback \(most recent|ERROR|CRITICAL|FATAL|Fatal Python|CUDA|CUBLAS|CUDNN|NCCL|Error|"
    rb"Segmentation fault|Bus error|Illegal instruction|Aborted|Floating point exception|Assertion|TRT-LLM|"
    rb"E0\d\d\d |E1\d\d\d |F0\d\d\d |F1\d\d\d ")
TRIGGER_LOWER = (b"terminate called", b"bad_alloc", b"panicked at", b": error", b"of memory", b"context size",
                 b"context shift", b"context length", b" layers to GPU", b"truncated = 1")
# llama.cpp's per-request fields in a slot's lines ("id  3 | task 8028 |"): a notice's text without them,
# so one kind of line on every slot and request is one entry the store counts, not one entry per request
SLOT_TASK = re.compile(r"\bid +\d+ \| task -?\d+ \|")
# ... and a context notice's per-request numbers ("n_tokens = 255", "task id = 12", "request (161 tokens)"),
# the context's own size kept
NOTICE_NUMBER = re.compile(r"(?<== )(?<!truncated = )-?\d+|(?<=\brequest \()\d+(?= tokens\))")

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# "(VllmWorker rank=0 pid=123) ", "(EngineCore_DP0 pid=9) ", "(RayWorkerWrapper pid=5, ip=..) "
PROC_PREFIX = re.compile(r"^\(([^()]{1,120})\) ")  # one space: the indentation after it is the line's
PID_IN_PREFIX = re.compile(r"\bpid=(\d+)")
NCCL_PID = re.compile(r"^[\w.\-]+:(\d+):\d+ \[\d+\]")  # "host:pid:tid [rank] NCCL WARN ..."

# Log headers, stripped from a line's start; `lvl` is the level they state.
LOG_HEADERS = [
    # vLLM: "ERROR 10-09 12:00:00 [core.py:700] "
    re.compile(r"^(?P<lvl>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?"
               r"\s+\[[^\]]{0,200}\]\s?"),
    # logging.basicConfig "ERROR:name:msg", uvicorn "ERROR:    msg"
    re.compile(r"^(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?:[\w.\-]{1,100}:)?\s*"),
    # timestamp first: "2025-01-01 10:00:00,123 - name - ERROR - msg", "[2025-01-01T10:00:00Z] [ERROR] msg"
    re.compile(r"^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[\d.,:+\-Z]*\]?\s*(?:-\s*)?(?:[\w.\-]{1,100}\s+-\s+)?"
               r"\[?(?P<lvl>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\]?\s*(?:-\s*)?"),
    # SGLang: "[2025-01-01 10:00:00 TP0] " (no level)
    re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]{0,60}\]\s?"),
    # TensorRT-LLM C++: "[TensorRT-LLM][ERROR] "
    re.compile(r"^\[TensorRT-LLM\](?:\[[^\]]{1,40}\])*?\[(?P<lvl>ERROR|WARNING|INFO|DEBUG|TRACE|FATAL)\]\s?"),
    # TensorRT-LLM Python: "[01/01/2025-10:00:00] [TRT-LLM] [E] "
    re.compile(r"^(?:\[[^\]]{1,40}\]\s*)?\[TRT-LLM\]\s*(?:\[[^\]]{1,40}\]\s*)?\[(?P<lvl>[EWIVDF])\]\s?"),
    # glog (absl, C++ plugins): "E0101 10:00:00.123456  1234 file.cc:12] "
    re.compile(r"^(?P<lvl>[EFWI])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s+[^\]]{1,200}\]\s?"),
    # llama.cpp with timestamps: "0.00.123.456 E "
    re.compile(r"^\d+\.\d+\.\d+\.\d+ (?P<lvl>[EWIDF]) "),
]
_LEVELS = {"ERROR": "error", "E": "error", "CRITICAL": "critical", "FATAL": "critical", "F": "critical",
           "WARNING": "warning", "WARN": "warning", "W": "warning"}

# (kind, level, pattern): technical strings searched anywhere in a line.
PATTERNS = [
    ("nccl", "warning", re.compile(r"NCCL WARN")),
    ("nccl", "error", re.compile(r"NCCL error|nccl(?:Internal|System|UnhandledCuda|Remote)Error|"
                                 r"ncclInvalid(?:Usage|Argument)|Watchdog caught collective operation timeout")),
    ("oom", "error", re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory|std::bad_alloc|"
                                r"CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY")),
    ("cuda", "error", re.compile(r"CUDA error|CUDA_ERROR_[A-Z_]+|cudaError[A-Z]\w*|illegal memory access|"
                                 r"device-side assert|CUBLAS_STATUS_[A-Z_]+|CUDNN_STATUS_[A-Z_]+|"
                                 r"unspecified launch failure")),
    ("crash", "critical", re.compile(r"Segmentation fault|Bus error|Illegal instruction|Aborted \(core dumped\)|"
                                     r"Floating point exception")),
    ("assert", "error", re.compile(r"Assertion [`'].*[`'] failed")),
    ("panic", "error", re.compile(r"panicked at")),
    ("log", "error", re.compile(r"^[\w.]{1,80}: error\b")),  # llama.cpp "main: error: ..."
]
_RANK = {"warning": 1, "error": 2, "critical": 3}
# lines an engine prints, whatever level it gives them, that graphsignal.findings reads: a request that
# did not fit its context (llama.cpp, vLLM, SGLang), a context shift (llama.cpp truncating a slot), a
# request cut short when its slot's context filled (llama.cpp's "stop processing: ..., truncated = 1",
# printed at info level with context shift off, its default), and a model loaded with layers left on
# the CPU (llama.cpp, only when fewer than all are on the GPU)
NOTICES = [
    ("context", "error", re.compile(r"exceeds the available context size|maximum context length is|"
                                    r"longer than the model's context length")),
    ("context", "warning", re.compile(r"slot context shift|stop processing: n_tokens = \d+, truncated = 1")),
    ("offload", "warning", re.compile(r"offloaded (\d+)/(\d+) layers to GPU")),
]

TRACEBACK = "Traceback (most recent call last)"
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
_FATAL_CONT = ("Current thread", "Thread 0x", "Extension modules", "<no Python frame>", "Stack (most recent",
               "Python runtime state")


class _Block:
    """A multi-line entry being collected: a traceback, a faulthandler dump,
    or a `terminate called` line waiting for its what()."""

    __slots__ = ("kind", "level", "pid", "ts", "head", "tail", "cut", "message", "phase", "idle", "last")

    def __init__(self, kind, level, pid, ts, first, now):
        self.kind, self.level, self.pid, self.ts = kind, level, pid, ts
        self.head = [first]
        self.tail = collections.deque(maxlen=MAX_BLOCK_TAIL)
        self.cut = 0
        self.message = None
        self.phase = "frames"
        self.idle = 0
        self.last = now

    def add(self, line):
        if len(self.head) < MAX_BLOCK_HEAD:
            self.head.append(line)
            return
        if len(self.tail) == self.tail.maxlen:
            self.cut += 1
        self.tail.append(line)

    def text(self):
        lines = list(self.head)
        if self.cut:
            lines.append("... (%d lines cut) ..." % self.cut)
        lines.extend(self.tail)
        while lines and not lines[-1].strip():
            lines.pop()
        return "\n".join(lines)


class _Stream:
    __slots__ = ("name", "pending", "skipping", "blocks")

    def __init__(self, name):
        self.name = name
        self.pending = b""  # the unfinished last line, at most MAX_LINE bytes
        self.skipping = False  # inside a line longer than MAX_LINE: drop until its end
        self.blocks = collections.OrderedDict()  # process prefix -> _Block


class ConsoleCapture:
    """Turns console bytes into error entries. feed() and close_stream()
    never raise for any input; they are called from the pump threads."""

    def __init__(self, store: Any, pid_fn: Callable[[], Any], clock: Callable[[], float] = time.monotonic,
                 max_queued: int = MAX_QUEUED) -> None:
        self.store = store
        self.pid_fn = pid_fn
        self.clock = clock
        self.max_queued = max_queued
        # feed() only queues: the pump that calls it goes back to the workload's
        # pipe at once, and a flood the scanner cannot keep up with is skipped
        # (counted), never waited for
        # (stream, bytes or None for "closed", resync, done event)
        self._queue: Deque[Tuple[str, Optional[bytes], bool, Optional[threading.Event]]] = collections.deque()
        self._queued = 0
        self._qlock = threading.Condition(threading.Lock())
        self._worker = None
        self._resync: Set[str] = set()  # streams with skipped bytes since their last queued chunk
        self.unscanned = 0  # bytes skipped
        self._lock = threading.Lock()
        self._streams: Dict[str, _Stream] = {}
        self._tokens = BURST
        self._refill_at = clock()
        self._recent: OrderedDict[Any, bool] = collections.OrderedDict()  # recent entries (their repeats cost no token)
        self._flusher = None
        self._reporter = Reporter()  # a log line only: the capture's own bug is no workload error
        self.dropped = 0

    # -- input ------------------------------------------------------------------
    def feed(self, stream: str, data: bytes) -> None:
        """Queues a chunk (bytes) of `stream` ("stdout"/"stderr") for the
        scanner thread; never waits for it. Beyond max_queued bytes waiting,
        the chunk is not scanned (counted in UNSCANNED_METRIC)."""
        with self._qlock:
            if self._queued + len(data) > self.max_queued:
                self.unscanned += len(data)
                self._resync.add(stream)
                skipped = len(data)
            else:
                resync = stream in self._resync
                self._resync.discard(stream)
                self._queue.append((stream, data, resync, None))
                self._queued += len(data)
                skipped = 0
                self._start_worker()
                self._qlock.notify()
        if skipped:
            self.store.add_counter(UNSCANNED_METRIC, {"stream": stream}, skipped)

    def close_stream(self, stream: str, timeout: float = CLOSE_WAIT) -> None:
        """At EOF: the unfinished last line and every open block are
        recorded, once what was queued before is scanned (waits at most
        `timeout` seconds for that)."""
        done = threading.Event()
        with self._qlock:
            self._queue.append((stream, None, False, done))
            self._start_worker()
            self._qlock.notify()
        done.wait(timeout)

    def _start_worker(self):
        if self._worker is None:  # with _qlock held
            self._worker = threading.Thread(target=self._work, name="graphsignal-console", daemon=True)
            self._worker.start()

    def _work(self):
        while True:
            with self._qlock:
                while not self._queue:
                    self._qlock.wait()
                stream, data, resync, done = self._queue.popleft()
                if data is not None:
                    self._queued -= len(data)
            try:
                if data is None:
                    self._close(stream)
                else:
                    self._scan_chunk(stream, data, resync)
            finally:
                if done is not None:
                    done.set()

    def _scan_chunk(self, stream, data, resync):
        with self._lock:
            st = self._streams.get(stream)
            if st is None:
                st = self._streams[stream] = _Stream(stream)
            try:
                if resync:
                    # bytes before this chunk were not scanned: the line under way is
                    # cut, and open blocks are recorded as they are
                    for key in list(st.blocks):
                        self._finish(st, key)
                    st.skipping = True
                self._feed(st, data)
            except Exception as e:  # a bug here must cost this chunk's entries only
                self._streams[stream] = _Stream(stream)
                self._reporter.once("capture", "console error capture: %s: %s" % (type(e).__name__, e), entry=False)

    def _close(self, stream):
        with self._lock:
            st = self._streams.get(stream)
            if st is None:
                return
            if st.pending:
                line, st.pending = st.pending, b""
                self._scan(st, line + (CUT if st.skipping else b""))
            st.skipping = False
            for key in list(st.blocks):
                self._finish(st, key)

    def _feed(self, st, data):
        if st.skipping:
            end, nxt = _eol(data, 0)
            if end == len(data):
                return
            line, st.pending, st.skipping = st.pending + CUT, b"", False
            self._scan(st, line)
            data = data[nxt:]
        last = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if last < 0:
            st.pending += data
            if len(st.pending) > MAX_LINE:
                st.pending, st.skipping = st.pending[:MAX_LINE], True
            return
        block = st.pending + data[:last + 1] if st.pending else data[:last + 1]
        rest = data[last + 1:]
        st.pending, st.skipping = rest[:MAX_LINE], len(rest) > MAX_LINE
        self._scan(st, block)

    def _scan(self, st, block):
        """Classifies the complete lines in `block` (bytes)."""
        pos, n = 0, len(block)
        while pos < n:
            if st.blocks:  # a traceback is open: every line counts
                end, nxt = _eol(block, pos)
                self._line(st, block[pos:end])
                pos = nxt
                continue
            s = _next_hit(block, pos)
            if s < 0:
                return
            start = max(block.rfind(b"\n", pos, s), block.rfind(b"\r", pos, s)) + 1
            if start <= 0:
                start = pos
            end, nxt = _eol(block, s)
            self._line(st, block[start:end])
            pos = nxt

    # -- lines --------------------------------------------------------------------
    def _line(self, st, raw):
        if len(raw) > MAX_LINE + len(CUT):
            raw = raw[:MAX_LINE] + CUT
        text = raw.decode("utf-8", "replace")
        if "\x1b" in text:
            text = ANSI.sub("", text)
        if _CONTROL.search(text):
            text = clean(text, multiline=True)  # entries reach terminals (graphsignal-top) and agents
        key, pid, level, body = self._split(text)
        now = self.clock()
        for k in list(st.blocks):
            if k != key:
                b = st.blocks[k]
                b.idle += 1
                if b.idle > IDLE_CLOSE:
                    self._finish(st, k)
        b = st.blocks.get(key)
        if b is not None:
            b.last = now
            if self._continue(st, key, b, body):
                return
        self._classify(st, key, pid, level, body, now)

    def _split(self, text):
        """(process prefix, pid or None, header level or None, body)."""
        key, pid = "", None
        m = PROC_PREFIX.match(text)
        if m:
            key = m.group(1)
            p = PID_IN_PREFIX.search(key)
            pid = p.group(1) if p else None
            text = text[m.end():]
        level = None
        if text[:1] not in (" ", "\t", ""):
            for hdr in LOG_HEADERS:
                h = hdr.match(text)
                if h:
                    lvl = h.groupdict().get("lvl")
                    level = _LEVELS.get(lvl, "info") if lvl else None
                    text = text[h.end():]
                    break
        if pid is None:
            p = NCCL_PID.match(text)
            if p:
                pid = p.group(1)
        return key, pid, level, text.rstrip()

    def _continue(self, st, key, b, body):
        """Adds `body` to the open block b when it belongs there; finishes b
        (and returns False) when the line starts something else."""
        if b.kind == "terminate":
            if body.lstrip().startswith("what():"):
                b.add(body)
                b.message += ": " + body.split("what():", 1)[1].strip()
                self._finish(st, key)
                return True
            self._finish(st, key)
            return False
        if b.kind == "fatal":
            if not body or body.startswith((" ", "\t")) or body.startswith(_FATAL_CONT):
                b.add(body)
                return True
            self._finish(st, key)
            return False
        # a Python traceback
        if b.phase == "frames":
            if not body or body.startswith((" ", "\t", "[Previous line repeated")):
                b.add(body)
                return True
            b.add(body)
            if TRACEBACK in body:
                return True
            b.message = body
            b.phase = "after"
            return True
        if not body:
            b.add(body)
            return True
        if body.startswith(_CHAIN):
            b.add(body)
            b.phase = "chain"
            return True
        if TRACEBACK in body and b.phase == "chain":
            b.add(body)
            b.phase = "frames"
            return True
        # anything else, a new traceback right after this one's exception
        # line included, starts a new entry
        self._finish(st, key)
        return False

    def _classify(self, st, key, pid, level, body, now):
        if TRACEBACK in body:
            self._open(st, key, _Block("exception", _max(level, "error"), pid, self.store.clock(), body, now))
            return
        if "Fatal Python error" in body:
            b = _Block("fatal", "critical", pid, self.store.clock(), body, now)
            b.message = body[body.index("Fatal Python error"):]
            self._open(st, key, b)
            return
        if "terminate called" in body:
            b = _Block("terminate", "critical", pid, self.store.clock(), body, now)
            b.message = body[body.index("terminate called"):]
            self._open(st, key, b)
            return
        for kind, lvl, pat in NOTICES:
            m = pat.search(body)
            if m and (kind != "offload" or int(m.group(1)) < int(m.group(2))):
                text = SLOT_TASK.sub("id * | task * |", body)
                if kind == "context":
                    text = NOTICE_NUMBER.sub("*", text)
                self._emit(st, kind, lvl, text, None, pid, self.store.clock())
                return
        if level == "info":
            return  # the engine itself says this line is informational
        for kind, lvl, pat in PATTERNS:
            if pat.search(body):
                if level == "warning" and kind != "nccl":
                    lvl = "warning"
                self._emit(st, kind, _max(level, lvl), body, None, pid, self.store.clock())
                return
        if level in ("error", "critical"):
            self._emit(st, "log", level, body, None, pid, self.store.clock())

    # -- blocks ------------------------------------------------------------------
    def _open(self, st, key, b):
        if key in st.blocks:
            self._finish(st, key)
        if len(st.blocks) >= MAX_OPEN:
            self._finish(st, next(iter(st.blocks)))
        st.blocks[key] = b
        self._ensure_flusher()

    def _finish(self, st, key):
        b = st.blocks.pop(key, None)
        if b is None:
            return
        if b.kind == "terminate":
            self._emit(st, "terminate", b.level, b.message, None, b.pid, b.ts)
            return
        text = b.text()
        message = b.message
        if message is None:  # cut short: the last line says most
            message = text.rsplit("\n", 1)[-1].strip() or text.split("\n", 1)[0]
        kind = "crash" if b.kind == "fatal" else b.kind
        if kind == "exception":
            if message.startswith("MemoryError"):  # the host's, as Python raises it
                kind = "oom"
            for k, _, pat in PATTERNS:  # an OOM, CUDA or NCCL error raised as a Python exception
                if k in ("oom", "cuda", "nccl") and pat.search(message):
                    kind = k
                    break
        self._emit(st, kind, b.level, message, text, b.pid, b.ts)

    def _ensure_flusher(self):
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._flush_loop, name="graphsignal-console-flush", daemon=True)
            self._flusher.start()

    def _flush_loop(self):
        """Records tracebacks that went quiet: the line that would end them
        may never come (a server that logs one and idles)."""
        while True:
            time.sleep(FLUSH_AFTER / 2)
            with self._lock:
                now = self.clock()
                for st in self._streams.values():
                    for key in [k for k, b in st.blocks.items() if now - b.last >= FLUSH_AFTER]:
                        self._finish(st, key)
                if not any(st.blocks for st in self._streams.values()):
                    self._flusher = None
                    return

    # -- output ------------------------------------------------------------------
    def _emit(self, st, kind, level, message, exception, pid, ts):
        if pid is None:
            try:
                pid = self.pid_fn()
            except Exception:
                pid = None
        tags = {"stream": st.name, "error.kind": kind}
        if pid is not None:
            tags["process.pid"] = str(pid)
        entry = (level, message, exception, tuple(sorted(tags.items())))
        if entry in self._recent:
            self._recent.move_to_end(entry)  # a repeat: the store counts it
        elif not self._take_token():
            self.dropped += 1
            self.store.add_counter(DROPPED_METRIC, {"stream": st.name}, 1)
            return
        else:
            self._recent[entry] = True
            if len(self._recent) > RECENT:
                self._recent.popitem(last=False)
        self.store.add_error(level, message, exception=exception, tags=tags, ts=ts)

    def _take_token(self):
        now = self.clock()
        self._tokens = min(BURST, self._tokens + (now - self._refill_at) * RATE)
        self._refill_at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


def _next_hit(block, pos):
    """Offset of the first trigger at or after pos, or -1."""
    m = TRIGGER.search(block, pos)
    best = m.start() if m else len(block)
    for lit in TRIGGER_LOWER:
        i = block.find(lit, pos, best + len(lit))
        if 0 <= i < best:
            best = i
    return best if best < len(block) else -1


def _eol(block, pos):
    """(end of the line at pos, start of the next line); a line ends at
    \n, \r or \r\n (progress bars redraw with a bare \r)."""
    n = len(block)
    i = block.find(b"\n", pos)
    j = block.find(b"\r", pos, i if i >= 0 else n)
    if j >= 0:
        return j, (j + 2 if block[j + 1:j + 2] == b"\n" else j + 1)
    if i >= 0:
        return i, i + 1
    return n, n


def _max(a, b):
    if a not in _RANK:
        return b
    if b not in _RANK:
        return a
    return a if _RANK[a] >= _RANK[b] else b
