"""graphsignal-server [--host 127.0.0.1] [--port 18260] [--database PATH|URL] [--api-key-file PATH]

Serves the Signals API (graphsignal.fleet.app) from one SQLite file, or
from PostgreSQL (any number of these processes on one database).
"""
import argparse
import os
import signal
import socket
import sys
import threading

from graphsignal import __version__, config, gctune
from graphsignal.cli import args
from graphsignal.fleet import settings

PROG = "graphsignal-server"

DESCRIPTION = """Receives the signals graphsignal-run uploads (GRAPHSIGNAL_API_KEY and
GRAPHSIGNAL_API_BASE=http://HOST:PORT on the sidecar) and serves them back:
GET /api/v1/instances and GET /api/v1/signals?instance_id=ID[&window=N].
Under a WSGI server instead: graphsignal.fleet.app:create_app, configured
by the environment variables below (see README)."""

EPILOG = """environment (the flags win; keys from every source add up):
  %s=KEY1,KEY2      accepted keys
  %s=PATH       a key file, as --api-key-file
  %s=PATH|URL            the database, as --database
  %s=PATH  as --database-password-file
  %s=DAYS     as --retention-days
  %s=normal|full       as --sync
  PGPASSWORD, PGPASSFILE (~/.pgpass)      PostgreSQL's password, read by libpq""" % (
    settings.API_KEYS_ENV, settings.API_KEY_FILE_ENV, settings.DB_ENV, settings.DB_PASSWORD_FILE_ENV,
    settings.RETENTION_ENV, settings.SYNC_ENV)

DEFAULT_HOST = config.DEFAULT_LISTEN_HOST
DEFAULT_PORT = config.DEFAULT_SERVER_PORT
ENV_KEYS = settings.API_KEYS_ENV

UsageError = args.UsageError
ServerConfig = settings.ServerConfig


def _checked(check):
    """An argparse type from a settings check that raises ValueError."""

    def parse(text):
        try:
            return check(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e))

    return parse


def parser():
    p = args.Parser(PROG, usage="%(prog)s [OPTIONS]", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--host", type=args.non_empty, default=DEFAULT_HOST,
                   help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=args.port(config.BIND_PORT), default=DEFAULT_PORT,
                   help="port to listen on (default: %(default)s)")
    p.add_argument("--database", "--db", dest="db", metavar="PATH|URL", type=_checked(settings.database),
                   help="a SQLite file (a path, or sqlite:///PATH) or a PostgreSQL database "
                        "(postgresql://USER@HOST:PORT/DB, needs pip install 'graphsignal[server-pg]'; the password "
                        "from PGPASSWORD, ~/.pgpass or --database-password-file, never in this URL) (default: $%s, "
                        "else $XDG_DATA_HOME/graphsignal/server.db, i.e. ~/.local/share/graphsignal/server.db)"
                   % settings.DB_ENV)
    p.add_argument("--database-password-file", metavar="PATH",
                   help="PostgreSQL's password: the first line of this file (chmod 600); also $%s"
                        % settings.DB_PASSWORD_FILE_ENV)
    p.add_argument("--api-key-file", metavar="PATH", action="append", default=[],
                   help="accepted API keys, one a line (blank lines and lines starting with # are skipped); the "
                        "file must not be readable or writable by other users (chmod 600); also $%s"
                        % settings.API_KEY_FILE_ENV)
    p.add_argument("--api-key", metavar="KEY", nargs="+", action="extend", default=[],
                   help="accepted API keys on the command line, where every user of this machine can read them "
                        "(ps, /proc/PID/cmdline): prefer --api-key-file or %s=KEY1,KEY2 (the environment of a "
                        "process is readable by its user only); keys from all of them are accepted together"
                        % ENV_KEYS)
    p.add_argument("--retention-days", metavar="DAYS", type=_checked(settings.retention_days),
                   help="history and silent instances are kept this long (default: $%s, else 7)"
                        % settings.RETENTION_ENV)
    p.add_argument("--sync", type=_checked(settings.sync_mode), metavar="{normal,full}",
                   help="SQLite's synchronous mode, not PostgreSQL's (default: $%s, else normal: nothing "
                        "acknowledged is lost when the server is killed; full: nor on power loss)" % settings.SYNC_ENV)
    p.add_argument("--max-connections", metavar="N", type=args.number(int, 16, 1_000_000),
                   default=1024, help="connections open at once (default: 1024, and never more than the "
                                      "open-file limit leaves room for); when full, the oldest idle connection "
                                      "makes way")
    p.add_argument("--workers", metavar="N", type=args.number(int, 1, 256), default=8,
                   help="threads that answer requests (default: 8); idle and slow connections take none")
    return p


def parse_args(argv, environ):
    """Parses the options, reads key files and the key variables (flags
    win over graphsignal.fleet.settings' variables); raises UsageError."""
    ns = parser().parse(list(argv))
    if ns.show_help or ns.show_version:
        return ServerConfig(show_help=ns.show_help, show_version=ns.show_version)
    if ns.db and settings.is_postgresql(ns.db) and settings.url_has_password(ns.db):
        raise UsageError("--database: a password in the URL is visible to every user of this machine (ps, "
                         "/proc/PID/cmdline): give it with PGPASSWORD, ~/.pgpass or --database-password-file")
    try:
        return settings.resolve(environ, db=ns.db, key_files=ns.api_key_file, keys=ns.api_key,
                                db_password_file=ns.database_password_file,
                                retention=ns.retention_days, sync=ns.sync, host=ns.host, port=ns.port,
                                max_connections=ns.max_connections, workers=ns.workers,
                                key_on_command_line=bool(ns.api_key))
    except settings.SettingError as e:
        raise UsageError(str(e))


def main(argv=None, environ=None) -> int:
    environ = os.environ if environ is None else environ
    cfg, status = args.start(PROG, lambda a: parse_args(a, environ), lambda: parser().format_help(), argv)
    if cfg is None:
        return status
    if not cfg.api_keys:
        return args.usage_error(PROG, settings.no_keys_message())
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
    from graphsignal.fleet.serving import FleetServer, Limits
    from graphsignal.fleet.storage import Unavailable

    gctune.tune()
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    path = cfg.db or settings.default_db(environ)
    if settings.is_postgresql(path):
        path = settings.redacted(path)
    try:
        db, path = settings.open_db(cfg, environ)
    except (OSError, RuntimeError, sqlite3.Error, Unavailable) as e:
        sys.stderr.write("graphsignal-server: error: cannot open the database %s: %s\n" % (path, e))
        return 1
    try:
        family, stype, proto, _, addr = socket.getaddrinfo(cfg.host, cfg.port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, stype, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(512)
        # the file takes one writer at a time: a key's requests run one at a time, so a key's flood waits behind
        # itself; PostgreSQL takes a key's uploads side by side: up to half the workers, the rest for other keys
        inflight = max(1, cfg.workers // 2) if settings.is_postgresql(cfg.db) else 1
        srv = FleetServer(sock, make_app(db, cfg.api_keys), tenant_of(cfg.api_keys),
                          Limits(max_connections=cfg.max_connections, workers=cfg.workers, max_body=ingest.MAX_BODY,
                                 tenant_inflight=inflight))
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
