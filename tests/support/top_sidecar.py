"""A live sidecar for graphsignal-top's tests: graphsignal-run around
tests/data/top_probe_child.py, which writes probe and CUPTI-like records
into rings of the run, so every section of the screen has data."""
import os
import subprocess
import sys
import tempfile

from graphsignal.top.client import fetch
from support.gsrun import free_port, wait_for  # noqa: F401  (wait_for is used by the top tests)

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
CHILD = os.path.join(HERE, "data", "top_probe_child.py")
TOP = [sys.executable, "-m", "graphsignal.cli.top"]


class Sidecar:
    def __init__(self, child_seconds=90):
        self.child_seconds = child_seconds
        self.port = free_port()
        self.proc = None
        self.log = tempfile.TemporaryFile()

    def __enter__(self):
        env = dict(os.environ, GRAPHSIGNAL_LOG_LEVEL="error", GS_CHILD_SECONDS=str(self.child_seconds))
        self.proc = subprocess.Popen([sys.executable, "-m", "graphsignal.cli.run", "--listen-port", str(self.port),
                                      sys.executable, CHILD], env=env, stdout=subprocess.DEVNULL,
                                     stderr=self.log, stdin=subprocess.DEVNULL)
        if not wait_for(self._ready, 30.0):
            self.__exit__(None, None, None)
            self.log.seek(0)
            raise RuntimeError("sidecar not ready: %s" % self.log.read().decode(errors="replace")[-2000:])
        return self

    def _ready(self):
        if self.proc.poll() is not None:
            raise RuntimeError("graphsignal-run exited with %s" % self.proc.returncode)
        payload, err, _ = fetch("127.0.0.1", self.port, 5, timeout=1.0)
        if payload is None:
            return False
        names = {m["name"] for m in payload["metrics"]}
        win = payload.get("window") or {}
        kernels = [m for m in payload["metrics"] if m["name"] == "cuda_kernels_nanoseconds" and m["stats"]["frames"]]
        procs = [m for m in payload["metrics"] if m["name"] == "process_cpu_usage_percent"]
        # rates need a window of at least a second; the host source needs one poll
        return bool({"myengine_tokens", "myengine_batch_duration_nanoseconds"} <= names and kernels and procs
                    and (win.get("covered_seconds") or 0) >= 1.0)

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # forwarded to the child; the sidecar exits like it
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
        return False
