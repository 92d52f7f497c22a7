"""graphsignal-server's default storage: one SQLite file in WAL mode
(graphsignal.fleet.storage says what is kept and by which rules; this
module is how SQLite keeps it).

All access goes through one connection under one lock: SQLite has one
writer at a time anyway, and reads are rare next to uploads. A commit
happens before an upload is acknowledged, and synchronous=NORMAL in WAL
mode keeps every commit across a kill of the server (a power loss may
lose the last commits; --sync full keeps those too, at a few ms per
upload). A full disk (SQLITE_FULL) rolls the upload back whole: NoSpace.

The file's schema is versioned in PRAGMA user_version and upgraded step
by step when an older file is opened, each step in one transaction:
version 1 held the upload's integers as they were (opening it subtracts
2^63); 3 added the run's end; versions 1 to 3 kept history states in a
form of their own (a histogram as [count, sum, bin upper bounds, counts],
a profile as [[frame, value, samples]]), rewritten as windowmath's; 5
judges age by the server's up time: a database upgraded to it counts every
instance as seen at the upgrade (it cannot tell a true last_seen_ns from
a stepped one) and each history row as old as it was on its instance's
clock (as earlier servers judged it); 6 keeps each series' state beside
its stats (graphsignal.fleet.storage), given to the series stored before
from their stats, as earlier servers computed it on every read.
"""
import contextlib
import os
import sqlite3
import threading
import time
import zlib

import orjson

from graphsignal import windowmath
from graphsignal.fleet.rows import (OFFSET, BadRow, dec, enc, enc_bound, fill_states, load_row,  # noqa: F401
                                    schema, series_key)
from graphsignal.fleet.storage import (HOUR_NS, MINUTE_NS, MINUTE_ROWS_NS, NS, Full, NoSpace, Storage,  # noqa: F401
                                       Unavailable, logger, owner_of)

SCHEMA_VERSION = 6
MAX_AGE_NS = 3650 * 86400 * NS  # the longest retention: an upgraded row's age is clamped to it
_ENCODED = (("instances", ("start_ns", "payload_ns", "last_seq", "dropped_errors")), ("series", ("updated_ns",)),
            ("history", ("ts_ns",)))
SQLITE_FULL = 13


def _is_full(e):
    """Whether a sqlite3 error is SQLITE_FULL (a full disk, or the file at
    its max_page_count); by its code where Python says it (3.11+)."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == SQLITE_FULL
    return "full" in str(e)


_TYPES = (windowmath.GAUGE, windowmath.COUNTER, windowmath.HISTOGRAM, windowmath.PROFILE)
# what reading arbitrary stored bytes as history can raise (a row of another
# shape than expected fails in the conversion's unpacking and indexing)
_ROW_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError)


def _state_of_3(type_, old):
    """A state as schema versions 1 to 3 stored it, as windowmath's."""
    if type_ == windowmath.HISTOGRAM:
        count, total, bins, counts = old
        old = {"count": count, "sum": total, "bins": bins, "counts": counts}
    elif type_ == windowmath.PROFILE:
        old = {"frames": [{"name": n, "value": v, "samples": s} for n, v, s in old]}
    else:
        return old
    return windowmath.stored_state(type_, old)


_SCHEMA = schema("TEXT", "BLOB", "INTEGER", " WITHOUT ROWID", " WITHOUT ROWID", "last_seen_ns")


class DB(Storage):
    """One SQLite file, one connection, one lock."""

    def __init__(self, path, retention_days=7.0, sync="normal", clock=None, elapsed=None):
        """clock: the wall clock (epoch ns) of first/last_seen_ns;
        elapsed: a clock that never steps (ns) for the up time
        (graphsignal.fleet.storage): the monotonic clock, or `clock` when
        only that is given (tests that simulate time move both at once)."""
        Storage.__init__(self, retention_days, clock or time.time_ns, elapsed or clock or time.monotonic_ns)
        self.path = path
        self.lock = threading.Lock()
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=%s" % ("FULL" if sync == "full" else "NORMAL"))
        self.conn.execute("PRAGMA busy_timeout=5000")
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if not 0 <= version <= SCHEMA_VERSION:
            raise RuntimeError("%s has schema version %d; this graphsignal-server reads versions 1 to %d"
                               % (path, version, SCHEMA_VERSION))
        if version == 1:
            self._upgrade_from_1()
        if version in (1, 2):
            self._upgrade_from_2()
        if version in (1, 2, 3):
            self._upgrade_from_3()
        if version in (1, 2, 3, 4):
            self._upgrade_from_4()
        if version in (1, 2, 3, 4, 5):
            self._upgrade_from_5()
        self.conn.executescript(_SCHEMA)
        self.conn.execute("PRAGMA user_version=%d" % SCHEMA_VERSION)
        self._start_clock()

    @contextlib.contextmanager
    def _write(self):
        with self.lock:
            c = self.conn
            try:
                c.execute("BEGIN IMMEDIATE")
                yield c
                c.execute("COMMIT")
            except BaseException as e:
                self._rollback()
                if isinstance(e, sqlite3.OperationalError) and _is_full(e):
                    raise NoSpace(str(e)) from None
                raise

    @contextlib.contextmanager
    def _read(self):
        with self.lock:
            yield self.conn

    def _migrate(self, step, to_version):
        """step(cursor) and the new user_version in one transaction: a file
        is at one version or the next, never between."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            step(c)
            c.execute("PRAGMA user_version=%d" % to_version)
            c.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _upgrade_from_4(self):
        """Version 5 judges age by the server's up time (module docstring):
        every instance counts as seen at the upgrade (up time 0), every
        history row as written its age on its instance's clock before it."""
        def step(c):
            have = {r[1] for r in c.execute("PRAGMA table_info(instances)")}
            if have and "seen_up_ns" not in have:
                c.execute("ALTER TABLE instances ADD COLUMN seen_up_ns INTEGER NOT NULL DEFAULT 0")
            have = {r[1] for r in c.execute("PRAGMA table_info(history)")}
            if have and "kept_up_ns" not in have:
                c.execute("ALTER TABLE history ADD COLUMN kept_up_ns INTEGER NOT NULL DEFAULT 0")
                if "seen_up_ns" in {r[1] for r in c.execute("PRAGMA table_info(instances)")}:
                    # ts_ns and payload_ns are stored with the same offset: their difference is exact
                    c.execute("UPDATE history SET kept_up_ns = COALESCE(MAX(-?, MIN(0, ts_ns - (SELECT i.payload_ns "
                              "FROM instances i WHERE i.owner = history.owner AND "
                              "i.instance_id = history.instance_id))), 0)", (MAX_AGE_NS,))
        self._migrate(step, 5)

    def _upgrade_from_5(self):
        """Version 6 keeps each series' state beside its stats: the column,
        and for every stored series the state its stats give."""
        def step(c):
            have = {r[1] for r in c.execute("PRAGMA table_info(series)")}
            if have and "state" not in have:
                c.execute("ALTER TABLE series ADD COLUMN state BLOB")
            if have:
                fill_states(c, self._sql)
        self._migrate(step, 6)

    def _rollback(self):
        """Rolls back the open transaction, if SQLite has not already (it
        has after SQLITE_FULL and some I/O errors): a failing ROLLBACK must
        not hide the error that made it necessary."""
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.OperationalError as e:
                logger.debug("graphsignal-server: ROLLBACK failed: %s", e)

    def _upgrade_from_1(self):
        """Version 1 stored the upload's integers as they were (all below
        2^63: larger ones were refused): subtract 2^63."""
        def step(c):
            for table, cols in _ENCODED:
                # x - (2^63 - 1) - 1: 2^63 itself is no SQLite integer literal
                c.execute("UPDATE %s SET %s" % (table, ", ".join("%s = %s - ? - 1" % (col, col) for col in cols)),
                          [OFFSET - 1] * len(cols))
        self._migrate(step, 2)

    def _upgrade_from_2(self):
        """Version 3 keeps the workload's end (ended_ns, exit_status) per
        instance: two columns, null for what was uploaded before."""
        def step(c):
            have = {r[1] for r in c.execute("PRAGMA table_info(instances)")}
            for col in ("ended_ns", "exit_status"):
                if have and col not in have:
                    c.execute("ALTER TABLE instances ADD COLUMN %s INTEGER" % col)
        self._migrate(step, 3)

    def _upgrade_from_3(self):
        """Version 4 keeps history states in graphsignal.windowmath's form
        (see the module doc): every row is rewritten. A row that cannot be
        read (load_row) or converted is deleted, not kept in a form this
        server cannot read: the upgrade goes on, and says how many in one
        line."""
        bad = []  # (instance id, ts, why) of each dropped row

        def step(c):
            bad.clear()  # a retried step counts afresh
            if c.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='history'").fetchone() is None:
                return
            types = {}  # series key -> type
            after = None
            while True:  # a thousand rows at a time, in key order
                rows = c.execute("SELECT owner, instance_id, ts_ns, snapshot FROM history %s"
                                 "ORDER BY owner, instance_id, ts_ns LIMIT 1000"
                                 % ("" if after is None else "WHERE (owner, instance_id, ts_ns) > (?, ?, ?) "),
                                 after or ()).fetchall()
                if not rows:
                    return
                for owner, iid, ts, blob in rows:
                    try:
                        states = load_row(blob)
                        for k, v in states.items():
                            t = types.get(k)
                            if t is None:
                                t = orjson.loads(k)[1]
                                if t not in _TYPES:
                                    raise BadRow("a series key of unknown type %r" % str(t)[:40])
                                types[k] = t
                            states[k] = _state_of_3(t, v)
                        new = zlib.compress(orjson.dumps(states), 6)
                    except _ROW_ERRORS as e:  # BadRow is one
                        bad.append((iid, dec(ts) if isinstance(ts, int) else ts, str(e)[:200]))
                        c.execute("DELETE FROM history WHERE owner=? AND instance_id=? AND ts_ns=?", (owner, iid, ts))
                        continue
                    c.execute("UPDATE history SET snapshot=? WHERE owner=? AND instance_id=? AND ts_ns=?",
                              (new, owner, iid, ts))
                after = rows[-1][:3]
        self._migrate(step, 4)
        if bad:
            iid, ts, why = bad[0]
            logger.warning("graphsignal-server: the schema upgrade of %s dropped %d history row%s it could not "
                           "read (the first: instance %r at ts_ns %s: %s)", self.path, len(bad),
                           "" if len(bad) == 1 else "s", str(iid)[:80], ts, why)

    def close(self):
        with self.lock:
            self.conn.close()

    def size_bytes(self):
        """Bytes on disk (database and write-ahead log)."""
        total = 0
        for suffix in ("", "-wal", "-shm"):
            try:
                total += os.path.getsize(self.path + suffix)
            except OSError:
                pass
        return total

    def checkpoint(self):
        with self.lock:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
