"""The one retry policy of the uploader and the OTLP exporter
(graphsignal.sidecar.retry): full jitter, Retry-After, refused
credentials tried every few minutes, and the lines it says. Draws come
from seeded generators, so every bound below holds on every run."""
import logging
import random

from graphsignal.sidecar import retry
from graphsignal.sidecar.retry import Retry, full_jitter
from graphsignal.sidecar.store import MetricStore


def test_full_jitter_draws_spread_over_zero_to_the_capped_exponential():
    rng = random.Random(20261202)
    for failures in range(1, 12):
        ceiling = min(retry.CAP, retry.BASE * 2 ** (failures - 1))
        draws = [full_jitter(failures, rng.random) for _ in range(4000)]
        assert all(0.0 <= d <= ceiling for d in draws), failures
        # the whole range is used: no floor, no bunching at the ceiling
        assert min(draws) < 0.01 * ceiling and max(draws) > 0.99 * ceiling, (failures, min(draws), max(draws))
        mean = sum(draws) / len(draws)
        assert 0.45 * ceiling < mean < 0.55 * ceiling, (failures, mean)
        # and about evenly: each tenth of the range holds 7-13% of the draws
        tenths = [0] * 10
        for d in draws:
            tenths[min(9, int(10 * d / ceiling))] += 1
        assert all(280 <= n <= 520 for n in tenths), (failures, tenths)
    # the ceiling with the largest draw: the exponential, capped at 30 s
    assert [full_jitter(n, lambda: 1.0) for n in range(1, 9)] == [1, 2, 4, 8, 16, 30, 30, 30]
    assert full_jitter(10 ** 6, lambda: 1.0) == retry.CAP  # no overflow after a week of failures


def test_a_fleet_that_failed_together_does_not_retry_together():
    senders = [Retry("uploads", "key", rand=random.Random(seed).random, clock=lambda: 0.0) for seed in range(50)]
    waits = [[s.failed(503, "HTTP 503", now=0.0) for _ in range(6)][-1] for s in senders]
    assert len({round(w, 3) for w in waits}) == 50
    assert max(waits) - min(waits) > 20  # spread over most of the 30 s


def test_refused_credentials_wait_four_to_five_minutes_and_say_one_line(caplog):
    store = MetricStore()
    rng = random.Random(5)
    r = Retry("uploads to http://x", "the API key was not accepted (check GRAPHSIGNAL_API_KEY)", store, "upload",
              clock=lambda: 0.0, rand=rng.random)
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        waits = [r.failed(401, "HTTP 401", now=float(i)) for i in range(200)]
        waits += [r.failed(403, "HTTP 403", now=1000.0)]
    assert all(retry.AUTH_MIN <= w <= retry.AUTH_MAX for w in waits)
    assert max(waits) - min(waits) > 40  # jittered too
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 1, lines
    assert "HTTP 401: the API key was not accepted (check GRAPHSIGNAL_API_KEY)" in lines[0]
    assert "every 4 to 5 minutes" in lines[0]
    assert [e["message"] for e in store.errors] == [lines[0].split("graphsignal: ", 1)[1]]


def test_a_failure_that_changes_kind_says_so_once_and_recovery_says_it_once(caplog):
    r = Retry("exports to http://x", "refused", clock=lambda: 0.0, rand=lambda: 0.5)
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        r.failed(None, "no connection within 3 s", now=0.0)
        r.failed(None, "no connection within 3 s", now=1.0)
        r.failed(401, "HTTP 401", now=2.0)  # the server is back, and refuses the key
        r.failed(401, "HTTP 401", now=300.0)
        r.failed(503, "HTTP 503", now=600.0)  # the key is fixed; the server is busy
        r.failed(503, "HTTP 503", now=601.0)
        assert not r.due(601.0)
        r.succeeded(now=700.0)
        assert r.due(700.0) and r.failures == 0
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 4, lines
    assert "failing: no connection" in lines[0]
    assert "HTTP 401: refused" in lines[1]
    assert "failing: HTTP 503" in lines[2]
    assert "recovered after 6 failed attempts in 700 s" in lines[3]


def test_retry_after_is_a_floor_for_429_and_503_and_is_bounded():
    assert retry.retry_after("120") == 120.0
    assert retry.retry_after(" 7 ") == 7.0
    assert retry.retry_after("86400") == retry.MAX_RETRY_AFTER
    for bad in (None, "", "soon", "-3", "1.5", "Wed, 21 Oct 2026 07:28:00 GMT", "9" * 40):
        assert retry.retry_after(bad) is None, bad
    r = Retry("x", "y", clock=lambda: 0.0, rand=lambda: 0.0)
    assert r.failed(503, "busy", now=0.0, after=120.0) == 120.0
    assert r.failed(429, "busy", now=0.0, after=12.0) == 12.0
    assert r.failed(500, "error", now=0.0, after=120.0) == 0.0  # only where the status means "later"
