"""An engine whose metrics endpoint does not answer (still loading, or a
wrong --metrics-port) is said where people look: one line on
graphsignal-run's stderr with the address and what it got, an `errors`
entry, and graphsignal-top's engine block names the address and the
reason (it said only "no engine metrics")."""
import signal
import subprocess
import sys

from support.gsrun import GS_RUN, free_port, get_json, json_or_none, quiet_env, wait_for
from support.top_sidecar import TOP


def test_a_wrong_metrics_port_is_one_line_an_entry_and_named_in_top():
    port, dead = free_port(), free_port()  # nothing listens on `dead`
    url = "http://127.0.0.1:%d/metrics" % dead
    env = quiet_env(GRAPHSIGNAL_DISABLE_VERSION_CHECK="1")
    env.pop("GRAPHSIGNAL_LOG_LEVEL", None)  # the default level: what a user sees
    proc = subprocess.Popen(GS_RUN + ["--listen-port", str(port), "--metrics-port", str(dead),
                                      sys.executable, "-c", "import time; time.sleep(30)"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        base = "http://127.0.0.1:%d" % port

        def entry():
            doc = json_or_none(base + "/signals")
            for e in (doc or {}).get("errors") or []:
                if (e.get("tags") or {}).get("source") == "prometheus":
                    return e
            return None

        assert wait_for(entry, timeout=30), get_json(base + "/signals")[1].get("errors")
        e = entry()
        assert e["level"] == "info" and e["tags"]["url"] == url and e["resolved_ns"] is None
        assert url in e["message"] and "refuses connections" in e["message"]
        top = subprocess.run(TOP + ["--once", "--port", str(port)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, timeout=30)
        assert top.returncode == 0, top.stderr
        (line,) = [ln for ln in top.stdout.decode().splitlines() if ln.startswith(" ENGINE ")]
        assert "no engine metrics from %s" % url in line and "refuses connections" in line, line
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    said = [ln for ln in err.decode().splitlines() if "no engine metrics yet" in ln]
    assert len(said) == 1 and url in said[0], err.decode()
