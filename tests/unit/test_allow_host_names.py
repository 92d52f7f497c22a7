"""--allow-host / GRAPHSIGNAL_ALLOW_HOSTS: which names are accepted, how
they resolve into Settings (the flags win), cross the channel, show in
--print-config, and what the endpoint's Host check then answers."""
import logging

import pytest
from werkzeug.test import Client

from graphsignal import config
from graphsignal.cli import run as cli_run
from graphsignal.sidecar.server import HostGuard, make_app
from graphsignal.sidecar.store import MetricStore


@pytest.mark.parametrize("raw,want", [
    ("gs.monitoring.svc.cluster.local", "gs.monitoring.svc.cluster.local"),
    ("GS.Monitoring.", "gs.monitoring"), (" my_host-1 ", "my_host-1"), ("10.96.0.15", "10.96.0.15"),
    ("[2001:DB8:0::1]", "2001:db8::1"), ("2001:db8::1", "2001:db8::1"), ("*", "*"),
])
def test_accepted_names_are_written_as_the_check_compares_them(raw, want):
    assert config.allowed_host(raw) == want


@pytest.mark.parametrize("raw,why", [
    ("gs.svc:18259", "without a port"), ("*.svc.cluster.local", "only * alone"), ("", "not a host name"),
    ("http://gs.svc", "not a host name"), ("gs svc", "not a host name"), ("gs..svc", "not a host name"),
    ("-gs.svc", "not a host name"), ("a" * 64 + ".svc", "not a host name"), ("gs.svc/metrics", "not a host name"),
    ("gs\x1b[2J.svc", "not a host name"), ("ｇｓ.svc", "not a host name"),
])
def test_anything_else_is_refused_with_its_reason(raw, why):
    with pytest.raises(ValueError, match=why.replace("*", r"\*")):
        config.allowed_host(raw)


def test_flags_win_over_the_environment_and_everything_crosses_the_channel(caplog):
    env = {config.ALLOW_HOSTS_ENV: "a.svc, b.svc,,a.svc"}
    s = config.from_environ(env)
    assert s.allow_hosts == ("a.svc", "b.svc") and s.origin("allow_hosts") == "environment " + config.ALLOW_HOSTS_ENV
    cfg = cli_run.parse_args(["--allow-host", "C.svc", "--allow-host=c.svc", "--allow-host", "*", "x"])
    s = config.resolve(cfg, env)
    assert s.allow_hosts == ("c.svc", "*") and s.origin("allow_hosts") == "flag --allow-host"
    assert config.Settings.from_dict(s.to_dict()) == s
    rows = {name: (shown, origin) for name, shown, origin in s.describe()}
    assert rows["allow_hosts"] == ("c.svc,*", "flag --allow-host")
    default = {name: (shown, origin) for name, shown, origin in config.from_environ({}).describe()}
    assert default["allow_hosts"] == ("(none: this machine's names only)", "default")
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        s = config.from_environ({config.ALLOW_HOSTS_ENV: "ok.svc,bad:1,x y"})
    assert s.allow_hosts == ("ok.svc",)
    assert len(caplog.records) == 1 and "'bad:1'" in caplog.records[0].getMessage()


def test_more_names_than_the_cap_are_cut_with_one_line(caplog):
    names = ",".join("n%d.svc" % i for i in range(config.MAX_ALLOW_HOSTS + 5))
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        s = config.from_environ({config.ALLOW_HOSTS_ENV: names})
    assert len(s.allow_hosts) == config.MAX_ALLOW_HOSTS and len(caplog.records) == 1


def status(guard, host):
    return Client(make_app(MetricStore(), host_guard=guard)).get("/metrics", headers={"Host": host}).status_code


def test_the_guard_answers_the_allowed_names_on_any_bind():
    for listen in ("127.0.0.1", "0.0.0.0", "10.1.2.3"):
        guard = HostGuard(listen, ("gs.svc", "2001:db8::1"))
        assert status(guard, "gs.svc:18259") == 200 and status(guard, "GS.SVC.") == 200
        assert status(guard, "[2001:db8:0:0::1]:18259") == 200  # the same address, written longer
        assert status(guard, "evil.example.com") == 403 and status(guard, "gs.svc.evil.example.com") == 403
    guard = HostGuard("127.0.0.1", ("*",))
    assert guard.any_host and status(guard, "evil.example.com") == 200
