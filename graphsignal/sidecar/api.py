"""Where the sidecar talks to the Graphsignal API (uploads, the version
check), and the HTTP session both use."""
import logging
from typing import Optional
from urllib.parse import urlsplit

import requests
from requests.utils import get_environ_proxies

from graphsignal import config

logger = logging.getLogger("graphsignal")

ENV_API_BASE = config.API_BASE_ENV
DEFAULT_API_BASE = config.DEFAULT_API_BASE


class BadBase(ValueError):
    pass


def api_base(given: Optional[str]) -> str:
    """The API base URL (no trailing slash) from GRAPHSIGNAL_API_BASE's
    value (config.Settings.api_base), or the default when None; raises
    BadBase for anything but an http(s) URL."""
    raw = (given or "").strip() or DEFAULT_API_BASE
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError as e:
        raise BadBase("%s=%r is not a URL: %s" % (ENV_API_BASE, config.shown_url(raw), config.shown_url(str(e))))
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise BadBase("%s=%r is not an http(s) URL like %s" % (ENV_API_BASE, config.shown_url(raw), DEFAULT_API_BASE))
    return raw.rstrip("/")


def session(url: str) -> requests.Session:
    """A requests session that sends only what we give it: proxies from
    the environment are honoured (and NO_PROXY), but no .netrc
    credentials are added to our requests."""
    s = requests.Session()
    s.trust_env = False
    s.proxies.update(get_environ_proxies(url))
    return s
