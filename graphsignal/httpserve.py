"""What the sidecar's server (graphsignal.sidecar.server) and
graphsignal-server's front (graphsignal.fleet.serving) share of serving
HTTP: Werkzeug's request handler, quiet."""
import logging
from typing import Any, Union

from werkzeug.serving import WSGIRequestHandler


class QuietHandler(WSGIRequestHandler):
    """No per-request log lines (the sidecar's stderr is the workload's);
    errors go to `logger` at debug level. A server's subclass names its
    own logger."""

    logger = logging.getLogger("graphsignal")

    def log_request(self, code: Union[int, str] = "-", size: Union[int, str] = "-") -> None:
        pass

    def log(self, type: str, message: str, *args: Any) -> None:
        if type == "error":
            self.logger.debug("graphsignal: server: " + message, *args)
