"""graphsignal-server's configuration, checked in one place for its two
ways to start: the command (graphsignal.cli.server: flags, then these
variables) and a WSGI server (graphsignal.fleet.app.create_app: these
variables alone).

  GRAPHSIGNAL_SERVER_API_KEYS       accepted keys, a comma list
  GRAPHSIGNAL_SERVER_API_KEY_FILE   a file of accepted keys, one a line (# comments),
                                    a regular file of ours or root's, not readable
                                    or writable by other users
  GRAPHSIGNAL_SERVER_DB             the database: a SQLite file's path (or sqlite:///PATH; default:
                                    $XDG_DATA_HOME/graphsignal/server.db), or a postgresql:// URL
  GRAPHSIGNAL_SERVER_DB_PASSWORD_FILE  PostgreSQL's password, the first line of a file checked as key
                                    files are (libpq's PGPASSWORD and ~/.pgpass work too)
  GRAPHSIGNAL_SERVER_RETENTION_DAYS history and silent instances are kept this long (1..3650, default 7)
  GRAPHSIGNAL_SERVER_SYNC           normal | full (SQLite's synchronous mode)

Keys from every source are accepted together. A value that cannot be used
raises SettingError with one line naming the flag or variable it came
from; nothing starts without a key.
"""
import os
import re
import stat
import urllib.parse
from dataclasses import dataclass, field
from typing import Optional, Tuple

from graphsignal import config

API_KEYS_ENV = config.SERVER_API_KEYS_ENV
API_KEY_FILE_ENV = "GRAPHSIGNAL_SERVER_API_KEY_FILE"
DB_ENV = "GRAPHSIGNAL_SERVER_DB"
DB_PASSWORD_FILE_ENV = "GRAPHSIGNAL_SERVER_DB_PASSWORD_FILE"
RETENTION_ENV = "GRAPHSIGNAL_SERVER_RETENTION_DAYS"
SYNC_ENV = "GRAPHSIGNAL_SERVER_SYNC"
SYNC_CHOICES = ("normal", "full")
DEFAULT_RETENTION_DAYS = 7.0
MAX_KEY = 1024  # characters of a key (an HTTP header carries it)


class SettingError(ValueError):
    """A setting that cannot be used; the message is one line."""


@dataclass(frozen=True)
class ServerConfig:
    host: str = config.DEFAULT_LISTEN_HOST
    port: int = config.DEFAULT_SERVER_PORT
    db: Optional[str] = None  # a SQLite path or a postgresql:// URL (database()); None: default_db()
    db_password: Optional[str] = field(default=None, repr=False)  # PostgreSQL's, from a file
    api_keys: Tuple[str, ...] = ()
    retention_days: float = DEFAULT_RETENTION_DAYS
    sync: str = "normal"
    max_connections: int = 1024
    workers: int = 8
    show_help: bool = False
    show_version: bool = False
    key_on_command_line: bool = False  # --api-key was given: the command warns


def default_db(environ):
    base = environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "graphsignal", "server.db")


def database(text):
    """A --database value as stored in ServerConfig.db: a postgresql://
    URL as given, a SQLite path (sqlite:///PATH or the path itself);
    raises ValueError for another scheme."""
    text = text.strip()
    if text.startswith(("postgresql://", "postgres://")):
        return text
    if text.startswith("sqlite://"):
        path = text[len("sqlite://"):]
        if not path:
            raise ValueError("sqlite:// needs a path: sqlite:///var/lib/graphsignal/server.db")
        return path
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text):
        raise ValueError("%r is neither a SQLite path (or sqlite:///PATH) nor a postgresql:// URL"
                         % text.split("://")[0] + "://...")
    return text


def is_postgresql(db):
    return bool(db) and db.startswith(("postgresql://", "postgres://"))


def url_has_password(url):
    """Whether a postgresql:// URL carries a password (user:PASSWORD@ or ?password=)."""
    try:
        parts = urllib.parse.urlsplit(url)
        return parts.password is not None or "password" in urllib.parse.parse_qs(parts.query)
    except ValueError:
        return False


def redacted(url):
    """A postgresql:// URL without its password (for log lines)."""
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:
        return "postgresql://..."
    userinfo, _, hostport = parts.netloc.rpartition("@")
    return urllib.parse.urlunsplit(parts._replace(netloc="%s:***@%s" % (userinfo.split(":", 1)[0], hostport)))


def retention_days(text):
    """The days of `text` (1 to 3650); raises ValueError with the reason."""
    try:
        days = float(text)
    except ValueError:
        raise ValueError("expects a number of days, got %r" % text)
    if not 1 <= days <= 3650:
        raise ValueError("must be between 1 and 3650, got %s" % text)
    return days


def sync_mode(text):
    if text not in SYNC_CHOICES:
        raise ValueError("must be one of %s, got %r" % ("|".join(SYNC_CHOICES), text))
    return text


def read_key_file(path, what="--api-key-file"):
    """The keys in a key file (one a line; blank lines and # comments
    skipped). Raises SettingError (naming it as `what`) for a file that is
    not a regular file of ours (or root's), one other users may read or
    write, one that cannot be read, or one without keys."""
    text = _read_private(path, what)
    keys = [line.strip() for line in text.splitlines()]
    keys = [k for k in keys if k and not k.startswith("#")]
    if not keys:
        raise SettingError("%s %s has no keys (one a line)" % (what, path))
    return keys


def read_password_file(path, what="--database-password-file"):
    """The password in a file (its first line, without the line end),
    checked as key files are."""
    lines = _read_private(path, what).splitlines()
    if not lines or not lines[0]:
        raise SettingError("%s %s is empty (the password is its first line)" % (what, path))
    return lines[0]


def _read_private(path, what):
    """The text of a private file (see read_key_file); raises SettingError."""
    try:
        # O_NONBLOCK: a FIFO must not hang the start; it is refused below
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise SettingError("%s %s is not a regular file" % (what, path))
            if st.st_uid not in (0, os.geteuid()):
                raise SettingError("%s %s belongs to uid %d, who could change the keys at will: use a file of your "
                                   "own" % (what, path, st.st_uid))
            if stat.S_IMODE(st.st_mode) & (stat.S_IROTH | stat.S_IWOTH):
                raise SettingError("%s %s is readable or writable by other users (mode %04o): chmod o-rw %s"
                                   % (what, path, stat.S_IMODE(st.st_mode), path))
            data = f.read(1 << 20)
    except OSError as e:
        raise SettingError("%s %s: %s" % (what, path, e.strerror or e))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SettingError("%s %s is not UTF-8 text" % (what, path))


def check_keys(keys):
    """The accepted keys, stripped, without blanks and repeats; raises
    SettingError for one no header can carry."""
    keys = [k.strip() for k in keys if k.strip()]
    for k in keys:
        if not (k.isascii() and k.isprintable()) or len(k) > MAX_KEY:
            raise SettingError("an API key must be printable ASCII of at most %d characters" % MAX_KEY)
    return tuple(dict.fromkeys(keys))


def resolve(environ, db=None, key_files=(), keys=(), retention=None, sync=None, db_password_file=None, **rest):
    """A ServerConfig: the values given (the command's flags, already
    checked) win, then the environment's; key files are read and keys from
    every source accepted together. Raises SettingError."""
    if db is None:
        raw = (environ.get(DB_ENV) or "").strip()
        try:
            db = database(raw) if raw else None
        except ValueError as e:
            raise SettingError("%s: %s" % (DB_ENV, e))
    password = None
    what = "--database-password-file"
    if db_password_file is None:
        db_password_file, what = (environ.get(DB_PASSWORD_FILE_ENV) or "").strip() or None, DB_PASSWORD_FILE_ENV
    if db_password_file:
        if not is_postgresql(db):
            raise SettingError("%s is for a postgresql:// database (--database URL)" % what)
        password = read_password_file(db_password_file, what)
    if retention is None:
        retention = _from_env(environ, RETENTION_ENV, retention_days, DEFAULT_RETENTION_DAYS)
    if sync is None:
        sync = _from_env(environ, SYNC_ENV, lambda raw: sync_mode(raw.lower()), "normal")
    all_keys = []
    for path in key_files:
        all_keys += read_key_file(path)
    env_file = (environ.get(API_KEY_FILE_ENV) or "").strip()
    if env_file:
        all_keys += read_key_file(env_file, API_KEY_FILE_ENV)
    all_keys += list(keys) + (environ.get(API_KEYS_ENV) or "").split(",")
    return ServerConfig(db=db, db_password=password, api_keys=check_keys(all_keys), retention_days=retention,
                        sync=sync, **rest)


def _from_env(environ, name, parse, default):
    """parse(the variable's value), or default when it is not set; raises
    SettingError naming the variable."""
    raw = (environ.get(name) or "").strip()
    try:
        return parse(raw) if raw else default
    except ValueError as e:
        raise SettingError("%s %s" % (name, e))


def no_keys_message():
    return ("no API keys: give --api-key-file PATH, %s=PATH or %s=KEY1,KEY2 (uploads and reads need one)"
            % (API_KEY_FILE_ENV, API_KEYS_ENV))


def open_db(cfg, environ):
    """(the storage of cfg, its path or URL without a password); raises
    OSError, RuntimeError, sqlite3.Error or storage.Unavailable when it
    cannot be opened. psycopg is imported here, for a postgresql:// URL
    only."""
    if is_postgresql(cfg.db):
        try:
            from graphsignal.fleet import pg
        except ImportError as e:
            raise RuntimeError("a postgresql:// database needs psycopg 3 (pip install 'graphsignal[server-pg]'): %s"
                               % e)
        # a connection per worker, and one for a retention pass that runs beside them
        db = pg.PgDB(cfg.db, cfg.retention_days, password=cfg.db_password, pool_size=cfg.workers + 1)
        return db, db.path
    from graphsignal.fleet.db import DB

    path = cfg.db or default_db(environ)
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    return DB(path, cfg.retention_days, cfg.sync), path

