import ctypes
import logging
import os
import sys

import pytest

# Every graphsignal-run the tests start would ask api.graphsignal.com for a
# newer release, and upload wherever a developer's key points: neither, unless
# a test asks for it.
os.environ["GRAPHSIGNAL_DISABLE_VERSION_CHECK"] = "1"
for _name in ("GRAPHSIGNAL_API_KEY", "GRAPHSIGNAL_API_BASE"):
    os.environ.pop(_name, None)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = os.path.join(ROOT, "include")
DATA = os.path.join(ROOT, "tests", "data")


def _has_gpu():
    if os.environ.get("GRAPHSIGNAL_TEST_NO_GPU"):
        return False
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    n = ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(n)) != 0:
        return False
    return n.value > 0


HAS_GPU = _has_gpu()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU here (gpu tests run on a GPU host: scripts/run_gpu_suite.sh)")
    for item in items:
        # the marker, not the keyword: every test under tests/gpu/ has "gpu" among its keywords
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture
def python_exe():
    return sys.executable


@pytest.fixture(autouse=True)
def _graphsignal_logger_as_found():
    """A test that sets up logging the way the CLI does (propagate off, a
    stderr handler, a level) must not hide the next tests' records from caplog:
    the "graphsignal" logger is put back as it was after every test."""
    logger = logging.getLogger("graphsignal")
    state = (logger.propagate, logger.level, list(logger.handlers), logger.disabled)
    yield
    logger.propagate, level, handlers, logger.disabled = state
    logger.setLevel(level)
    logger.handlers[:] = handlers


@pytest.fixture(scope="session")
def pg_server():
    """The session's real PostgreSQL (tests/support/pg.py); skips the test
    with one line where it cannot run."""
    from support import pg

    s = pg.server()
    if s is None:
        pytest.skip(pg.why_not())
    return s


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request, tmp_path):
    """Where a graphsignal-server keeps its fleet (support.fleet.Backend):
    a SQLite file, then a new database on the session's PostgreSQL."""
    from support.fleet import Backend

    if request.param == "sqlite":
        b = Backend("sqlite", str(tmp_path / "fleet.db"))
    else:
        from support import pg

        b = Backend("postgresql", request.getfixturevalue("pg_server").new_database(), pg.PASSWORD)
    yield b
    b.close_all()


def pytest_sessionfinish(session, exitstatus):
    pg = sys.modules.get("support.pg")
    if pg is not None:
        pg.shutdown()
