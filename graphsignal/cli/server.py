"""graphsignal-server [--host 127.0.0.1] [--port 18260] [--db PATH] [--api-key-file PATH]

Serves the Signals API (graphsignal.fleet.app) from one SQLite file.
"""
import argparse
import os
import signal
import socket
import stat
import sys
import threading
from dataclasses import dataclass
from typing import Optional, Tuple

from graphsignal import __version__, config
from graphsignal.cli import args

PROG = "graphsignal-server"

DESCRIPTION = """Receives the signals graphsignal-run uploads (GRAPHSIGNAL_API_KEY and
GRAPHSIGNAL_API_BASE=http://HOST:PORT on the sidecar) and serves them back:
GET /api/v1/instances and GET /api/v1/signals?instance_id=ID[&window=N].
Under a WSGI server instead: graphsignal.fleet.app:create_app, configured
from the environment (see README)."""

DEFAULT_HOST = config.DEFAULT_LISTEN_HOST
DEFAULT_PORT = config.DEFAULT_SERVER_PORT
ENV_KEYS = config.SERVER_API_KEYS_ENV


UsageError = args.UsageError


@dataclass(frozen=True)
class ServerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    db: Optional[str] = None
    api_keys: Tuple[str, ...] = ()
    retention_days: float = 7.0
    sync: str = "normal"
    max_connections: int = 1024
    workers: int = 8
    show_help: bool = False
    show_version: bool = False
    key_on_command_line: bool = False  # --api-key was given: main() warns


def default_db(environ):
    base = environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "graphsignal", "server.db")


def read_key_file(path):
    """The keys in a key file (one a line; blank lines and # comments
    skipped). Raises UsageError for a file that is not a regular file of
    ours (or root's), one other users may read or write, one that cannot
    be read, or one without keys."""
    try:
        # O_NONBLOCK: a FIFO must not hang the start; it is refused below
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise UsageError("--api-key-file %s is not a regular file" % path)
            if st.st_uid not in (0, os.geteuid()):
                raise UsageError("--api-key-file %s belongs to uid %d, who could change the keys at will: use a "
                                 "file of your own" % (path, st.st_uid))
            if stat.S_IMODE(st.st_mode) & (stat.S_IROTH | stat.S_IWOTH):
                raise UsageError("--api-key-file %s is readable or writable by other users (mode %04o): "
                                 "chmod o-rw %s" % (path, stat.S_IMODE(st.st_mode), path))
            data = f.read(1 << 20)
    except OSError as e:
        raise UsageError("--api-key-file %s: %s" % (path, e.strerror or e))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("--api-key-file %s is not UTF-8 text" % path)
    keys = [line.strip() for line in text.splitlines()]
    keys = [k for k in keys if k and not k.startswith("#")]
    if not keys:
        raise UsageError("--api-key-file %s has no keys (one a line)" % path)
    return keys


def parser():
    p = args.Parser(PROG, usage="%(prog)s [OPTIONS]", description=DESCRIPTION)
    p.add_argument("--host", type=args.non_empty, default=DEFAULT_HOST,
                   help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=args.port(config.BIND_PORT), default=DEFAULT_PORT,
                   help="port to listen on (default: %(default)s)")
    p.add_argument("--db", metavar="PATH", type=args.non_empty,
                   help="SQLite database file (default: $XDG_DATA_HOME/graphsignal/server.db, i.e. "
                        "~/.local/share/graphsignal/server.db)")
    p.add_argument("--api-key-file", metavar="PATH", action="append", default=[],
                   help="accepted API keys, one a line (blank lines and lines starting with # are skipped); the "
                        "file must not be readable or writable by other users (chmod 600)")
    p.add_argument("--api-key", metavar="KEY", nargs="+", action="extend", default=[],
                   help="accepted API keys on the command line, where every user of this machine can read them "
                        "(ps, /proc/PID/cmdline): prefer --api-key-file or %s=KEY1,KEY2 (the environment of a "
                        "process is readable by its user only); keys from all three are accepted together"
                        % ENV_KEYS)
    p.add_argument("--retention-days", metavar="DAYS", type=_days, default=7.0,
                   help="history and silent instances are kept this long (default: 7)")
    p.add_argument("--sync", type=args.choice(SYNC_CHOICES), default="normal", metavar="{normal,full}",
                   help="SQLite synchronous mode (default: normal: nothing acknowledged is lost when the server "
                        "is killed; full: nor on power loss)")
    p.add_argument("--max-connections", metavar="N", type=args.number(int, 16, 1_000_000),
                   default=1024, help="connections open at once (default: 1024, and never more than the "
                                      "open-file limit leaves room for); when full, the oldest idle connection "
                                      "makes way")
    p.add_argument("--workers", metavar="N", type=args.number(int, 1, 256), default=8,
                   help="threads that answer requests (default: 8); idle and slow connections take none")
    return p


SYNC_CHOICES = ("normal", "full")


def _days(text):
    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expects a number of days, got %r" % text)
    if not 1 <= days <= 3650:
        raise argparse.ArgumentTypeError("must be between 1 and 3650, got %s" % text)
    return days


def check_keys(keys):
    """The accepted keys, stripped, without blanks and repeats; raises
    UsageError for one no header can carry."""
    keys = [k.strip() for k in keys if k.strip()]
    for k in keys:
        if not (k.isascii() and k.isprintable()) or len(k) > 1024:
            raise UsageError("an API key must be printable ASCII of at most 1024 characters")
    return tuple(dict.fromkeys(keys))


def env_keys(environ):
    """The keys of GRAPHSIGNAL_SERVER_API_KEYS (a comma list)."""
    return [k for k in (environ.get(ENV_KEYS) or "").split(",")]


def parse_args(argv, environ):
    """Parses the options, reads key files and the key variable; raises
    UsageError."""
    ns = parser().parse(list(argv))
    keys = []
    if not (ns.show_help or ns.show_version):
        for path in ns.api_key_file:
            keys += read_key_file(path)
    keys += ns.api_key + env_keys(environ)
    return ServerConfig(host=ns.host, port=ns.port, db=ns.db, api_keys=check_keys(keys),
                        retention_days=ns.retention_days, sync=ns.sync, max_connections=ns.max_connections,
                        workers=ns.workers, show_help=ns.show_help, show_version=ns.show_version,
                        key_on_command_line=bool(ns.api_key))


def main(argv=None, environ=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    environ = os.environ if environ is None else environ
    try:
        cfg = parse_args(argv, environ)
    except UsageError as e:
        return args.usage_error(PROG, e)
    if args.help_or_version(cfg, parser().format_help(), "graphsignal-server %s" % __version__):
        return 0
    if not cfg.api_keys:
        sys.stderr.write("graphsignal-server: error: no API keys: give --api-key-file PATH or %s=KEY1,KEY2 "
                         "(uploads and reads need one)\n" % ENV_KEYS)
        return 2
    if cfg.key_on_command_line:
        sys.stderr.write("graphsignal-server: warning: a key given with --api-key is visible to every user of this "
                         "machine (ps, /proc/PID/cmdline); use --api-key-file PATH (chmod 600) or %s instead\n"
                         % ENV_KEYS)
    return serve(cfg, environ)


def serve(cfg, environ):
    import logging
    import sqlite3

    from graphsignal.fleet import ingest
    from graphsignal.fleet.app import make_app, tenant_of
    from graphsignal.fleet.db import DB
    from graphsignal.fleet.serving import FleetServer, Limits

    import gc

    # An upload of 50,000 series makes about a million objects: at the default
    # thresholds the collector ran some 500 times per such upload (a third of its
    # CPU), each pass stopping every thread, up to 0.3 s; JSON trees hold no
    # cycles, so it runs a hundred times less often (longest pause 0.05 s; beside
    # a flood of such uploads a small one's p50 0.05-0.09 -> 0.03 s, and the flood
    # itself goes through 13-28 -> 29-32 uploads in 22 s: bench_fleet's fairness).
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    path = cfg.db or default_db(environ)
    try:
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        db = DB(path, cfg.retention_days, cfg.sync)
    except (OSError, RuntimeError, sqlite3.Error) as e:
        sys.stderr.write("graphsignal-server: error: cannot open the database %s: %s\n" % (path, e))
        return 1
    try:
        family, stype, proto, _, addr = socket.getaddrinfo(cfg.host, cfg.port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, stype, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(512)
        srv = FleetServer(sock, make_app(db, cfg.api_keys), tenant_of(cfg.api_keys),
                          Limits(max_connections=cfg.max_connections, workers=cfg.workers, max_body=ingest.MAX_BODY))
    except OSError as e:
        db.close()
        sys.stderr.write("graphsignal-server: error: cannot listen on %s:%d: %s (pick another with --port)\n"
                         % (cfg.host, cfg.port, e.strerror or e))
        return 1
    halt = threading.Event()

    def stop(signum, frame):
        halt.set()
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    sys.stderr.write("graphsignal-server %s: serving http://%s:%d (database %s, %d key%s, at most %d connections)\n"
                     % (__version__, cfg.host, sock.getsockname()[1], path, len(cfg.api_keys),
                        "" if len(cfg.api_keys) == 1 else "s", srv.max_connections))
    sys.stderr.flush()
    try:
        srv.serve_forever()
    finally:
        srv.server_close()
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
