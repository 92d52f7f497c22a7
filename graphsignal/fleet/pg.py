"""graphsignal-server on PostgreSQL (psycopg 3, `pip install
'graphsignal[server-pg]'`; imported only for a postgresql:// URL): the
storage of graphsignal.fleet.storage, for any number of replicas on one
database.

What differs from the SQLite file, and why:

  connections  a pool per process (Pool): as many as the server has
               workers; a connection that failed is closed, not reused,
               so a restarted PostgreSQL costs the requests in flight, not
               the process. psycopg prepares a statement once it was run a
               few times on a connection (prepare_threshold).
  writes       one transaction per upload (READ COMMITTED), its instance
               row held (SELECT ... FOR UPDATE) before anything of the
               instance is written: two replicas taking uploads of one
               instance apply them one after the other. The series rows
               go in one batch (executemany, pipelined). A deadlock or
               serialization failure runs the upload again (at most
               RETRIES times), committed before it is acknowledged.
  retention    a pass takes a transaction-scoped advisory lock
               (pg_try_advisory_xact_lock): one replica runs it at a time,
               the others skip; the instances it deletes are taken FOR
               UPDATE SKIP LOCKED, so an upload in flight is never waited
               on (nor deleted).
  schema       versioned in graphsignal_schema; made or upgraded under a
               session advisory lock (pg_advisory_lock), so replicas that
               start together make it once: the others wait, then see it
               current and go on. Version 2 keeps each series' state
               beside its stats, as the file's version 6 does (the upgrade
               gives the series stored before the state their stats give).
  reads        one REPEATABLE READ, READ ONLY transaction each: a snapshot's
               instance row and its series are of one moment.
  text         instance ids and owners are COLLATE "C" (byte order, as
               SQLite's BINARY), so lists come in the same order; blobs
               are bytea holding the same bytes the file holds.
  failures     a connection that cannot be made or is lost is Unavailable
               (503 with Retry-After); a full disk (SQLSTATE 53100,
               disk_full) is NoSpace, as SQLITE_FULL is.

The password never comes from the command line: libpq's own PGPASSWORD
and ~/.pgpass (PGPASSFILE), or the `password` given here (from a file,
graphsignal.fleet.settings).
"""
import contextlib
import threading
import time

import psycopg
from psycopg import errors as pgerrors

from graphsignal.fleet.settings import redacted
from graphsignal.fleet.rows import fill_states, schema
from graphsignal.fleet.storage import NoSpace, Storage, Unavailable, logger

SCHEMA_VERSION = 2  # PostgreSQL's own numbering: version 1 is the SQLite file's version 5, 2 its 6
RETRIES = 3  # a write run again after a deadlock or serialization failure
# advisory lock keys (64-bit): made from the text, fixed forever
MIGRATE_LOCK = int.from_bytes(b"gs-mgrt", "big")
EXPIRE_LOCK = int.from_bytes(b"gs-expr", "big")
CONNECT_TIMEOUT = 10  # seconds
POOL_WAIT = 30.0  # seconds a request waits for a free connection

_SCHEMA = schema('TEXT COLLATE "C"', "BYTEA", "BIGINT", " WITH (fillfactor = 50)", "", "owner, last_seen_ns")
# Every upload rewrites its series' rows: half of each page is left free (fillfactor) so the
# new version of a row fits beside the old one and no index is touched (a HOT update), which
# the next visit to the page prunes. History rows are zlib'd already: TOAST stores them as they
# are (EXTERNAL) instead of trying to compress them again.
_STORAGE = ["ALTER TABLE history ALTER COLUMN snapshot SET STORAGE EXTERNAL"]


class Pool:
    """At most `size` connections, made as needed and kept idle for the
    next request. connect() makes one. A connection handed back in a bad
    state (closed, or not idle after its transaction) is closed."""

    def __init__(self, connect, size):
        self.connect, self.size = connect, size
        self.idle = []
        self.lock = threading.Lock()
        self.free = threading.BoundedSemaphore(size)
        self.closed = False

    @contextlib.contextmanager
    def connection(self):
        if not self.free.acquire(timeout=POOL_WAIT):
            raise Unavailable("no free database connection in %d s (all %d busy)" % (POOL_WAIT, self.size))
        conn = None
        try:
            with self.lock:
                conn = self.idle.pop() if self.idle else None
            if conn is None:
                conn = self.connect()
            yield conn
        finally:
            self._put(conn)
            self.free.release()

    def _put(self, conn):
        if conn is None:
            return
        ok = not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        with self.lock:
            if ok and not self.closed:
                self.idle.append(conn)
                return
        conn.close()

    def close(self):
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
        for c in idle:
            c.close()


def _map_errors(e):
    """The storage's exception for a psycopg one, or None to re-raise it."""
    if isinstance(e, pgerrors.DiskFull):
        return NoSpace(str(e).strip())
    if isinstance(e, psycopg.OperationalError) and not isinstance(e, (pgerrors.DeadlockDetected,
                                                                      pgerrors.SerializationFailure)):
        return Unavailable(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
    return None


def _mode(conn, isolation, read_only):
    """The next transaction's mode: psycopg says it in its BEGIN, no round trip of its own."""
    if conn.isolation_level != isolation:
        conn.isolation_level = isolation
    if conn.read_only != read_only:
        conn.read_only = read_only


class PgDB(Storage):
    """graphsignal-server's storage on PostgreSQL."""

    FOR_UPDATE = " FOR UPDATE"
    SKIP_LOCKED = " FOR UPDATE SKIP LOCKED"
    SHARED = True  # replicas: the history is the stored one, a point a minute

    def __init__(self, url, retention_days=7.0, clock=None, elapsed=None, password=None, pool_size=8):
        """url: a postgresql:// URL (libpq's); password: when not from
        libpq's own sources (PGPASSWORD, ~/.pgpass); clock and elapsed as
        graphsignal.fleet.db.DB's."""
        Storage.__init__(self, retention_days, clock or time.time_ns, elapsed or clock or time.monotonic_ns)
        self.url = url
        self.path = redacted(url)
        extra = {"password": password} if password is not None else {}

        def connect():
            try:
                return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                                       application_name="graphsignal-server", **extra)
            except psycopg.OperationalError as e:
                raise Unavailable(str(e).strip().splitlines()[0] if str(e).strip() else "cannot connect") from None

        self.pool = Pool(connect, max(1, pool_size))
        try:
            self._migrate()
            self._start_clock()
        except BaseException:
            self.pool.close()
            raise

    def _sql(self, text, _cache={}):
        # every parameter goes in binary (%b): bytea as its bytes, not escaped to text and parsed
        # back (an upload's series blobs cost several times the CPU on both sides in text)
        out = _cache.get(text)
        if out is None:
            out = _cache[text] = text.replace("?", "%b")
        return out

    def _migrate(self):
        """Makes the schema, once, whatever number of replicas start at once."""
        with self.pool.connection() as conn:
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATE_LOCK,))
                try:
                    with conn.transaction():
                        conn.execute("CREATE TABLE IF NOT EXISTS graphsignal_schema (version INTEGER NOT NULL)")
                        row = conn.execute("SELECT MAX(version) FROM graphsignal_schema").fetchone()
                        version = row[0] or 0
                        if version > SCHEMA_VERSION:
                            raise RuntimeError("%s has graphsignal schema version %d; this graphsignal-server reads "
                                               "versions 1 to %d" % (self.path, version, SCHEMA_VERSION))
                        if version < 1:
                            conn.execute(_SCHEMA)
                            for stmt in _STORAGE:
                                conn.execute(stmt)
                        elif version < 2:
                            conn.execute("ALTER TABLE series ADD COLUMN IF NOT EXISTS state BYTEA")
                            fill_states(conn.cursor(), self._sql)
                        if version < SCHEMA_VERSION:
                            conn.execute("DELETE FROM graphsignal_schema")
                            conn.execute("INSERT INTO graphsignal_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATE_LOCK,))
            except psycopg.Error as e:
                # at start: one line, whatever it was (no right to create tables, a read-only replica, ...)
                raise (_map_errors(e) or RuntimeError(str(e).strip().splitlines()[0])) from None

    @contextlib.contextmanager
    def _transaction(self, isolation, read_only):
        """A cursor in one transaction of a pooled connection in that mode; a
        driver error the storage names (_map_errors) comes out under its name."""
        with self.pool.connection() as conn:
            _mode(conn, isolation, read_only)
            try:
                with conn.transaction():
                    yield conn.cursor()
            except psycopg.Error as e:
                mapped = _map_errors(e)
                if mapped is None:
                    raise
                raise mapped from None

    def _write(self):
        return self._transaction(None, None)

    def _writing(self, fn):
        for attempt in range(RETRIES):
            try:
                with self._write() as c:
                    return fn(c)
            except (pgerrors.DeadlockDetected, pgerrors.SerializationFailure) as e:
                if attempt == RETRIES - 1:
                    raise
                logger.debug("graphsignal-server: a write ran into %s; running it again", type(e).__name__)

    def _read(self):
        return self._transaction(psycopg.IsolationLevel.REPEATABLE_READ, True)

    def _upsert_series(self, c, rows):
        # one statement over arrays: the executor starts once for an upload's series, not once a row
        # (a row a statement costs several times the server's CPU). A series twice in one upload
        # would be one row changed twice by one statement, which PostgreSQL refuses: those go a row
        # at a time, in order, as SQLite takes them.
        keys = [r[2] for r in rows]
        if len(set(keys)) != len(keys):
            return Storage._upsert_series(self, c, rows)
        c.execute("INSERT INTO series (owner, instance_id, skey, doc, state, updated_ns) "
                  "SELECT %b, %b, k, d, s, u FROM unnest(%b::bytea[], %b::bytea[], %b::bytea[], %b::bigint[]) "
                  "AS t(k, d, s, u) " + self.SERIES_UPSERT,
                  (rows[0][0], rows[0][1], keys, [r[3] for r in rows], [r[4] for r in rows], [r[5] for r in rows]))

    def _may_expire(self, c):
        return bool(c.execute("SELECT pg_try_advisory_xact_lock(%s)", (EXPIRE_LOCK,)).fetchone()[0])

    def close(self):
        self.pool.close()

    def size_bytes(self):
        """Bytes the database takes on disk (pg_database_size: tables,
        indexes, TOAST; not the server's write-ahead log)."""
        with self._read() as c:
            return int(c.execute("SELECT pg_database_size(current_database())").fetchone()[0])
