"""What the sidecar's server (graphsignal.sidecar.server) and
graphsignal-server's front (graphsignal.fleet.serving) share of serving
HTTP: Werkzeug's request handler, quiet."""
import logging

from werkzeug.serving import WSGIRequestHandler


class QuietHandler(WSGIRequestHandler):
    """No per-request log lines (the sidecar's stderr is the workload's);
    errors go to `logger` at debug level. A server's subclass names its
    own logger."""

    logger = logging.getLogger("graphsignal")

    def log_request(self, code="-", size="-"):
        pass

    def log(self, type, message, *args):
        if type == "error":
            self.logger.debug("graphsignal: server: " + message, *args)
