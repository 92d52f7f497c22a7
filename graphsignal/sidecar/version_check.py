"""Once per run, in the background: is there a newer graphsignal?

GET {GRAPHSIGNAL_API_BASE or https://api.graphsignal.com}/api/v1/version?current=<our version>
with a 2 s timeout. The request carries our version and nothing else: no
key, no host name, no command line, no cookies or .netrc credentials;
its User-Agent is "graphsignal/<version>". The answer is JSON
{"latest": "X.Y.Z"} (graphsignal-server answers it too, with its own
version, so a self-hosted fleet is told to match its server).

A newer release is one line on stderr (at the default log level, so that
people who never set GRAPHSIGNAL_LOG_LEVEL see it; GRAPHSIGNAL_LOG_LEVEL=error
silences it) and the host resource's `profiler.latest_version` attribute.
Any failure (offline hosts are the norm) is a debug line only.
GRAPHSIGNAL_DISABLE_VERSION_CHECK=1 turns the check off. It runs on a
daemon thread started after the workload, so it never delays the
workload's start nor graphsignal-run's exit.
"""
import logging
import re
import threading
from typing import Any, Optional, Tuple

import requests

from graphsignal import __version__, jsonsafe
from graphsignal.sidecar import api

logger = logging.getLogger("graphsignal")

VERSION_PATH = "/api/v1/version"
TIMEOUT = 2.0  # seconds, connect and read each
MAX_ANSWER = 4096  # bytes read of the answer

_RELEASE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


def release(text: Any) -> Optional[Tuple[int, int, int]]:
    """(major, minor, patch) of a final release "X.Y[.Z]"; None for
    anything else (pre-releases and dev builds are never announced)."""
    m = _RELEASE.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def newer(latest: Any, current: str = __version__) -> bool:
    """True when `latest` is a final release above `current`."""
    a, b = release(latest), release(current.split("+")[0].split(".dev")[0])
    return a is not None and b is not None and a > b


def check(base: str, http: Optional[requests.Session] = None, current: str = __version__) -> Optional[str]:
    """The latest release the server names when it is newer than ours, else
    None. Raises nothing."""
    url = base + VERSION_PATH
    try:
        s = http or api.session(url)
        resp = s.get(url, params={"current": current}, timeout=(TIMEOUT, TIMEOUT), allow_redirects=False,
                     stream=True, headers={"User-Agent": "graphsignal/%s" % current, "Accept": "application/json"})
        try:
            if resp.status_code != 200:
                logger.debug("graphsignal: version check: HTTP %d from %s", resp.status_code, url)
                return None
            latest = jsonsafe.loads(resp.raw.read(MAX_ANSWER, decode_content=True), 8).get("latest")
        finally:
            resp.close()
    except (requests.RequestException, ValueError, AttributeError, OSError) as e:
        logger.debug("graphsignal: version check failed: %s: %s", type(e).__name__, e)
        return None
    return str(latest) if newer(latest, current) else None


def run(store: Any, base: str, http: Optional[requests.Session] = None) -> None:
    latest = check(base, http)
    if latest is None:
        return
    logger.warning("graphsignal: version %s is available (this is %s): pip install -U graphsignal", latest,
                   __version__)
    store.set_resource("host", {}, {"profiler.latest_version": latest})


def start(store: Any, base: Optional[str] = None) -> Optional[threading.Thread]:
    """Starts the check on a daemon thread (the caller asks only when
    GRAPHSIGNAL_DISABLE_VERSION_CHECK is not set: config.Settings.version_check);
    None when the base URL (None: the default) is not usable (silently:
    offline and odd setups are normal)."""
    try:
        base = api.api_base(base)
    except api.BadBase as e:
        logger.debug("graphsignal: version check: %s", e)
        return None
    t = threading.Thread(target=run, args=(store, base), name="graphsignal-version-check", daemon=True)
    t.start()
    return t
