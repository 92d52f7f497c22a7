"""A sidecar thread that dies of an exception is one line on the shared
stderr, never a traceback in the workload's console."""
import logging
import subprocess
import sys
import threading

from graphsignal.sidecar import process


def test_a_dying_thread_is_one_line_with_where(caplog, capsys):
    def boom():
        raise AttributeError("'Poller' object has no attribute 'x'")

    old = threading.excepthook
    threading.excepthook = process._thread_died
    try:
        with caplog.at_level(logging.WARNING, logger="graphsignal"):
            t = threading.Thread(target=boom, name="graphsignal-poller")
            t.start()
            t.join()
    finally:
        threading.excepthook = old
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert lines[0].startswith("graphsignal: sidecar thread graphsignal-poller stopped: AttributeError: ")
    assert "test_sidecar_threads.py:" in lines[0] and "\n" not in lines[0]
    assert "Traceback" not in capsys.readouterr().err


def test_main_installs_the_hook():
    # main() ends its process (os._exit) at once on bad arguments, after
    # installing the hook: run it in a child that reports before exiting
    code = ("import os, threading; from graphsignal.sidecar import process\n"
            "real = os._exit\n"
            "os._exit = lambda rc: (print(threading.excepthook is process._thread_died, flush=True), real(0))\n"
            "process.main(['--channel-fd'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert out.stdout == b"True\n", out
    assert b"Traceback" not in out.stderr
