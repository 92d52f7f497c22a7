"""graphsignal-server's storage: one SQLite file in WAL mode.

What it keeps, per API key (stored as the SHA-256 of the key, never the
key) and instance (one graphsignal-run):

  instances  identity (context, profiler), first/last seen (server clock,
             epoch ns), the instance's own start_ns and latest payload_ns,
             its latest resources and engine summary, and its latest
             MAX_ERRORS errors (repeats counted, as in /signals)
  series     the latest stats of every series it reported: together, the
             instance's snapshot in /signals's shape
  history    cumulative snapshots of every series' state (what windows
             need: graphsignal.windowmath's states, in its JSON form), one
             per minute of the instance's clock for the last 24 h, one per
             hour beyond that, none beyond the retention (7 days by
             default); zlib-compressed JSON {series key: state}

Retention never trusts one reading of a wall clock: a step of the
server's clock (or of a sidecar's) must not delete a fleet. What is
deleted for age is judged on the server's own up time (UpClock: the
nanoseconds it has been running, over every run, from a clock that never
steps; a wall clock's jump forward is no elapsed time, and the time it was
down does not count either, since nobody could upload then):

  instances  seen_up_ns, the up time of its latest upload: an instance
             silent for the retention period of up time is deleted with
             its history, at most EXPIRE_BATCH instances a pass (a pass an
             hour of up time, a minute while more are due)
  history    kept_up_ns, the up time a row was written: rows older than
             the retention are deleted as the instance's new rows are
             written, at most HISTORY_BATCH a time. Thinning the rows past
             24 h to one an hour goes by the instance's own clock (the
             rows' ts_ns): a step of that clock costs resolution, not rows.

The up time goes on from the newest seen_up_ns when the server starts.
Version 5 added both columns; a database upgraded to it counts every
instance as seen at the upgrade (it cannot tell a true last_seen_ns from
a stepped one) and each history row as old as it was on its instance's
clock (as earlier servers judged it).

A commit happens before an upload is acknowledged, and
synchronous=NORMAL in WAL mode keeps every commit across a kill of the
server (a power loss may lose the last commits; --sync full keeps those
too, at a few ms per upload).

Ingest is idempotent: a series update older than what is stored is
ignored, an error already stored updates its count, so a body resent
after a lost acknowledgement changes nothing.

The integers an upload carries (start_ns, payload_ns, seq, dropped_errors,
a series' updated_ns, and the history's ts_ns, which is a payload_ns) may
be anything from 0 to 2^64-1, and SQLite's INTEGER is signed 64-bit: those
columns hold the value minus 2^63 (enc/dec), which keeps every value
exact and their order (MAX(), comparisons, ORDER BY) the same. Schema
version 1 held them as they were; opening such a file converts it.
Versions 1 to 3 kept history states in a form of their own (a histogram
as [count, sum, bin upper bounds, counts], a profile as [[frame, value,
samples]]); opening such a file rewrites them as windowmath's.
"""
import hashlib
import logging
import sqlite3
import threading
import time
import zlib

import orjson

from graphsignal import jsonsafe, windowmath

logger = logging.getLogger("graphsignal.fleet")

NS = 1_000_000_000
MINUTE_NS = 60 * NS
HOUR_NS = 3600 * NS
MINUTE_ROWS_NS = 24 * HOUR_NS  # per-minute history this far back, hourly beyond
MAX_ERRORS = 100  # kept per instance
MAX_SERIES = 20_000  # per instance (a sidecar holds at most 5,000)
MAX_INSTANCES = 10_000  # per key
SCHEMA_VERSION = 5
EXPIRE_BATCH = 100  # instances deleted for silence in one pass: a wrong clock can cost a pass, not a fleet
HISTORY_BATCH = 16  # history rows deleted for age as one row is written (one crosses the retention an hour)
MAX_AGE_NS = 3650 * 86400 * NS  # the longest retention: an upgraded row's age is clamped to it
MAX_ROW = 64 << 20  # bytes of a history row's JSON: what one upload may gunzip to (ingest.MAX_JSON)
MAX_ROW_DEPTH = 8  # nesting of a history row: {key: [count, sum, {"idx": [...]}]} is 4
OFFSET = 1 << 63  # stored = value - OFFSET for the upload's own integers (module docstring)
U64_MAX = (1 << 64) - 1
_ENCODED = (("instances", ("start_ns", "payload_ns", "last_seq", "dropped_errors")), ("series", ("updated_ns",)),
            ("history", ("ts_ns",)))


class Full(Exception):
    """A key or an instance is at its cap; the message says which."""


class NoSpace(Exception):
    """The disk under the database is full (SQLITE_FULL): the write was
    rolled back whole; it may be sent again once there is room."""


SQLITE_FULL = 13


def _is_full(e):
    """Whether a sqlite3 error is SQLITE_FULL (a full disk, or the file at
    its max_page_count); by its code where Python says it (3.11+)."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == SQLITE_FULL
    return "full" in str(e)


class BadRow(ValueError):
    """A stored history row that cannot be read; the message says why."""


_TYPES = (windowmath.GAUGE, windowmath.COUNTER, windowmath.HISTOGRAM, windowmath.PROFILE)
# what reading arbitrary stored bytes as history can raise (a row of another
# shape than expected fails in the conversion's unpacking and indexing)
_ROW_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError)


def load_row(blob, max_bytes=MAX_ROW):
    """{series key: state} of a stored history row (zlib'd JSON). Raises
    BadRow for one that is not zlib, expands past max_bytes (read no
    further: memory stays bounded by a bomb), is truncated, or is not a
    JSON object nesting at most MAX_ROW_DEPTH levels."""
    if not isinstance(blob, bytes):
        raise BadRow("not a blob (%s)" % type(blob).__name__)
    d = zlib.decompressobj()
    try:
        data = d.decompress(blob, max_bytes + 1)
        if len(data) > max_bytes or d.unconsumed_tail:
            raise BadRow("expands past %d MiB" % (max_bytes >> 20))
        data += d.flush()
    except zlib.error as e:
        raise BadRow("not zlib data: %s" % e)
    if not d.eof or len(data) > max_bytes:
        raise BadRow("truncated zlib data" if not d.eof else "expands past %d MiB" % (max_bytes >> 20))
    try:
        states = jsonsafe.loads(data, MAX_ROW_DEPTH)
    except ValueError as e:  # orjson's JSONDecodeError and TooDeep are ValueErrors
        raise BadRow("not JSON: %s" % str(e)[:200])
    if not isinstance(states, dict):
        raise BadRow("not a JSON object")
    return states


def enc(v):
    """An integer from 0 to 2^64-1 as stored (None stays None)."""
    return None if v is None else v - OFFSET


def dec(v):
    """A stored integer as the value it was (None stays None)."""
    return None if v is None else v + OFFSET


def enc_bound(v):
    """A computed bound (now - retention, ...) as stored, clamped to the
    values an upload can carry."""
    return min(max(v, 0), U64_MAX) - OFFSET


def owner_of(key):
    """The stored identity of an API key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def series_key(m):
    return orjson.dumps([m["name"], m["type"], m["tags"]], option=orjson.OPT_SORT_KEYS)


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


def _described(engine_blob, resources_blob):
    """(GPUs, service) of an instance from its stored engine summary and
    resources (see DB.instances)."""
    engine = orjson.loads(engine_blob) if engine_blob else None
    resources = orjson.loads(resources_blob) if resources_blob else []
    resources = [r for r in resources if isinstance(r, dict)] if isinstance(resources, list) else []
    gpus = sum(1 for r in resources if r.get("kind") == "device")
    service = engine.get("engine") if isinstance(engine, dict) and isinstance(engine.get("engine"), str) else None
    if service is None:
        procs = sorted((r for r in resources if r.get("kind") == "process" and isinstance(r.get("attributes"), dict)),
                       key=lambda r: r.get("first_seen_ts") or 0)
        for r in procs:
            line = r["attributes"].get("process.command_line")
            if isinstance(line, str) and line.split():
                service = line.split()[0].rsplit("/", 1)[-1][:64]
                break
    return gpus, service


def _error_key(e):
    return orjson.dumps((e.get("timestamp_ns"), e.get("level"), e.get("message"), e.get("exception"),
                         e.get("tags") or {}), option=orjson.OPT_SORT_KEYS)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS instances (
  owner TEXT NOT NULL, instance_id TEXT NOT NULL,
  context BLOB NOT NULL, profiler BLOB, start_ns INTEGER, payload_ns INTEGER NOT NULL,
  first_seen_ns INTEGER NOT NULL, last_seen_ns INTEGER NOT NULL,
  last_seq INTEGER, uploads INTEGER NOT NULL DEFAULT 0, dropped_errors INTEGER,
  resources BLOB, engine BLOB, errors BLOB,
  history_minute INTEGER, ended_ns INTEGER, exit_status INTEGER, seen_up_ns INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (owner, instance_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS instances_last_seen ON instances (last_seen_ns);
CREATE INDEX IF NOT EXISTS instances_seen_up ON instances (seen_up_ns);
CREATE TABLE IF NOT EXISTS series (
  owner TEXT NOT NULL, instance_id TEXT NOT NULL, skey BLOB NOT NULL,
  doc BLOB NOT NULL, updated_ns INTEGER,
  PRIMARY KEY (owner, instance_id, skey)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS history (
  owner TEXT NOT NULL, instance_id TEXT NOT NULL, ts_ns INTEGER NOT NULL, snapshot BLOB NOT NULL,
  kept_up_ns INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (owner, instance_id, ts_ns)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS history_kept_up ON history (owner, instance_id, kept_up_ns);
"""


class UpClock:
    """The server's up time in nanoseconds, over every run: starts at
    start_ns and advances as `source` (a clock that never steps, in ns)
    does, never backwards. Callers hold the DB's lock."""

    def __init__(self, start_ns, source):
        self.value = start_ns
        self.source = source
        self.last = source()

    def __call__(self):
        t = self.source()
        if t > self.last:  # a source that went back (a simulated one) adds nothing
            self.value += t - self.last
        self.last = t
        return self.value


class DB:
    """All access goes through one connection under one lock: SQLite has
    one writer at a time anyway, and reads are rare next to uploads."""

    def __init__(self, path, retention_days=7.0, sync="normal", clock=None, elapsed=None):
        """clock: the wall clock (epoch ns) of first/last_seen_ns;
        elapsed: a clock that never steps (ns) for the up time (module
        docstring): the monotonic clock, or `clock` when only that is
        given (tests that simulate time move both at once)."""
        self.path = path
        self.retention_ns = int(retention_days * 86400 * NS)
        self.clock = clock or time.time_ns
        elapsed = elapsed or clock or time.monotonic_ns
        self.lock = threading.Lock()
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=%s" % ("FULL" if sync == "full" else "NORMAL"))
        self.conn.execute("PRAGMA busy_timeout=5000")
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, 1, 2, 3, SCHEMA_VERSION):
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
        self.conn.executescript(_SCHEMA)
        self.conn.execute("PRAGMA user_version=%d" % SCHEMA_VERSION)
        start = self.conn.execute("SELECT MAX(seen_up_ns) FROM instances").fetchone()[0]
        self.up = UpClock(max(start or 0, 0), elapsed)
        self._next_expiry = 0  # up time of the next retention pass

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

    # -- writes ---------------------------------------------------------------------
    def ingest(self, owner, doc):
        """Stores a validated upload (graphsignal.fleet.ingest.validate)
        in one transaction; returns what the acknowledgement says."""
        iid = doc["instance_id"]
        # the rows are made before the lock: a 50,000-series upload holds it
        # only to write them, not to encode them, so others' small uploads wait less
        rows = [(owner, iid, series_key(m), orjson.dumps(m), enc(m.get("updated_ns")))
                for m in doc.get("metrics") or []]
        with self.lock:
            now, up = self.clock(), self.up()
            c = self.conn
            try:
                c.execute("BEGIN IMMEDIATE")
                out = self._ingest(c, owner, iid, doc, now, up, rows)
                c.execute("COMMIT")
            except BaseException as e:
                self._rollback()
                if isinstance(e, sqlite3.OperationalError) and _is_full(e):
                    raise NoSpace(str(e)) from None
                raise
            if up >= self._next_expiry:
                self._next_expiry = up + (MINUTE_NS if self._expire(up) else HOUR_NS)
        return out

    def _ingest(self, c, owner, iid, doc, now, up, rows):
        row = c.execute("SELECT payload_ns, history_minute, errors FROM instances "
                        "WHERE owner=? AND instance_id=?", (owner, iid)).fetchone()
        payload_ns = doc["payload_ns"]
        minute = payload_ns // MINUTE_NS
        if row is None:
            n = c.execute("SELECT COUNT(*) FROM instances WHERE owner=?", (owner,)).fetchone()[0]
            if n >= MAX_INSTANCES:
                raise Full("this key already has %d instances (the most one key keeps)" % MAX_INSTANCES)
            c.execute("INSERT INTO instances (owner, instance_id, context, profiler, start_ns, payload_ns, "
                      "first_seen_ns, last_seen_ns, history_minute, seen_up_ns) VALUES (?,?,?,?,?,?,?,?,?,?)",
                      (owner, iid, orjson.dumps(doc["context"]), orjson.dumps(doc.get("profiler")),
                       enc(doc.get("start_ns")), enc(payload_ns), now, now, minute, up))
            prev_payload, prev_minute, errors_blob = payload_ns, minute, None
        else:
            prev_payload, prev_minute, errors_blob = dec(row[0]), row[1], row[2]
        if prev_minute is not None and minute > prev_minute:
            # the first upload of a new minute: what the series held at the
            # end of the last one is that minute's history row
            self._roll(c, owner, iid, prev_payload, up)
        written = self._series(c, owner, iid, rows)
        errors = self._errors(errors_blob, doc.get("errors") or [])
        sets = ["context=?", "profiler=?", "start_ns=?", "payload_ns=MAX(payload_ns, ?)", "last_seen_ns=?",
                "seen_up_ns=?", "last_seq=MAX(COALESCE(last_seq, ?), ?)", "uploads=uploads+1", "dropped_errors=?",
                "errors=?", "history_minute=MAX(COALESCE(history_minute, 0), ?)"]
        args = [orjson.dumps(doc["context"]), orjson.dumps(doc.get("profiler")), enc(doc.get("start_ns")),
                enc(payload_ns), now, up, enc(0), enc(doc.get("seq") or 0), enc(doc.get("dropped_errors")), errors,
                minute]
        if "resources" in doc and doc["resources"] is not None:
            sets.append("resources=?")
            args.append(orjson.dumps(doc["resources"]))
        if "engine" in doc:
            sets.append("engine=?")
            args.append(orjson.dumps(doc["engine"]))
        if doc.get("ended_ns") is not None:  # a run ends once: later uploads (the final one) keep it
            sets += ["ended_ns=?", "exit_status=?"]
            args += [enc(doc["ended_ns"]), doc.get("exit_status")]
        c.execute("UPDATE instances SET %s WHERE owner=? AND instance_id=?" % ", ".join(sets),
                  args + [owner, iid])
        return {"accepted": True, "instance_id": iid, "seq": doc.get("seq"), "series": written}

    def _series(self, c, owner, iid, rows):
        if not rows:
            return 0
        have = c.execute("SELECT COUNT(*) FROM series WHERE owner=? AND instance_id=?", (owner, iid)).fetchone()[0]
        if have + len(rows) > MAX_SERIES:
            # only updates of known series beyond the cap
            known = {r[0] for r in c.execute("SELECT skey FROM series WHERE owner=? AND instance_id=?",
                                             (owner, iid))}
            room = max(0, MAX_SERIES - have)
            kept = []
            for r in rows:
                if r[2] in known:
                    kept.append(r)
                elif room > 0:
                    kept.append(r)
                    room -= 1
            rows = kept
        c.executemany("INSERT INTO series (owner, instance_id, skey, doc, updated_ns) VALUES (?,?,?,?,?) "
                      "ON CONFLICT (owner, instance_id, skey) DO UPDATE SET doc=excluded.doc, "
                      "updated_ns=excluded.updated_ns "
                      "WHERE excluded.updated_ns IS NULL OR series.updated_ns IS NULL "
                      "OR excluded.updated_ns >= series.updated_ns", rows)
        return len(rows)

    @staticmethod
    def _errors(blob, new):
        errors = orjson.loads(blob) if blob else []
        if not new:
            return blob
        index = {_error_key(e): i for i, e in enumerate(errors)}
        for e in new:
            k = _error_key(e)
            i = index.get(k)
            if i is None:
                index[k] = len(errors)
                errors.append(e)
            else:
                old = errors[i]
                if (e.get("count") or 0) >= (old.get("count") or 0):
                    errors[i] = e
        errors.sort(key=lambda e: e.get("timestamp_ns") or 0)
        return orjson.dumps(errors[-MAX_ERRORS:])

    def _roll(self, c, owner, iid, ts, up):
        states = {}
        for skey, doc in c.execute("SELECT skey, doc FROM series WHERE owner=? AND instance_id=?", (owner, iid)):
            m = orjson.loads(doc)
            states[skey.decode()] = windowmath.stored_state(m["type"], m["stats"])
        c.execute("INSERT OR REPLACE INTO history (owner, instance_id, ts_ns, snapshot, kept_up_ns) "
                  "VALUES (?,?,?,?,?)", (owner, iid, enc(ts), zlib.compress(orjson.dumps(states), 6), up))
        # beyond the retention of up time, none (a few at a time: one row crosses it an hour)
        c.execute("DELETE FROM history WHERE owner=? AND instance_id=? AND ts_ns IN (SELECT ts_ns FROM history "
                  "WHERE owner=? AND instance_id=? AND kept_up_ns < ? ORDER BY kept_up_ns LIMIT ?)",
                  (owner, iid, owner, iid, up - self.retention_ns, HISTORY_BATCH))
        # beyond 24 h of the instance's clock, keep the first row of each hour
        # the rows that just crossed 24 h (and the hour before: a late roll) are thinned to
        # one per hour of the instance's clock, in Python: the stored values are offset
        cutoff = ts - MINUTE_ROWS_NS
        crossing = [dec(t) for (t,) in c.execute(
            "SELECT ts_ns FROM history WHERE owner=? AND instance_id=? AND ts_ns < ? AND ts_ns > ? ORDER BY ts_ns",
            (owner, iid, enc_bound(cutoff), enc_bound(cutoff - 3 * HOUR_NS)))]
        first = {}
        for t in crossing:
            first.setdefault(t // HOUR_NS, t)
        drop = [(owner, iid, enc(t)) for t in crossing if t > cutoff - 2 * HOUR_NS and first[t // HOUR_NS] != t]
        if drop:
            c.executemany("DELETE FROM history WHERE owner=? AND instance_id=? AND ts_ns=?", drop)

    def _expire(self, up):
        """Deletes at most EXPIRE_BATCH instances silent for the retention
        of up time, with their series and history; True when more may be
        due. A failure (a full disk) is one line: the next pass tries again."""
        c = self.conn
        due = c.execute("SELECT owner, instance_id FROM instances WHERE seen_up_ns < ? ORDER BY seen_up_ns LIMIT ?",
                        (up - self.retention_ns, EXPIRE_BATCH)).fetchall()
        if not due:
            return False
        try:
            c.execute("BEGIN IMMEDIATE")
            for owner, iid in due:
                for table in ("series", "history", "instances"):
                    c.execute("DELETE FROM %s WHERE owner=? AND instance_id=?" % table, (owner, iid))
            c.execute("COMMIT")
        except sqlite3.Error as e:
            self._rollback()
            logger.warning("graphsignal-server: deleting %d instances silent for the retention failed (%s); the "
                           "next pass tries again", len(due), e)
            return False
        return len(due) == EXPIRE_BATCH

    # -- reads ------------------------------------------------------------------------
    def instances(self, owner, service=None):
        """The key's instances, newest first: identity, first and last seen
        (server clock), the run's start (start_ns, the sidecar's clock) and
        end (ended_ns, exit_status: null while it runs), its GPUs (device resources) and `service`: the service the
        run named (its context's service.name), else the engine, or the
        program of its first process (null when none is known); service:
        only that service's."""
        with self.lock:
            rows = self.conn.execute("SELECT instance_id, context, first_seen_ns, last_seen_ns, ended_ns, exit_status, "
                                     "engine, resources, start_ns FROM instances WHERE owner=? "
                                     "ORDER BY last_seen_ns DESC, instance_id", (owner,)).fetchall()
        out = []
        for iid, ctx, first, last, ended, status, engine, resources, start in rows:
            context = orjson.loads(ctx)
            gpus, described = _described(engine, resources)
            name = context.get("service.name") if isinstance(context, dict) else None
            name = name if isinstance(name, str) else described
            if service is not None and name != service:
                continue
            out.append({"instance_id": iid, "context": context, "first_seen_ns": first,
                        "last_seen_ns": last, "ended_ns": dec(ended), "exit_status": status, "gpus": gpus,
                        "service": name, "start_ns": dec(start)})
        return out

    def snapshot(self, owner, iid):
        """The instance's latest snapshot in /signals's shape, or None."""
        with self.lock:
            row = self.conn.execute("SELECT context, profiler, start_ns, payload_ns, resources, engine, errors, "
                                    "first_seen_ns, last_seen_ns, uploads, last_seq, dropped_errors, ended_ns, "
                                    "exit_status FROM instances WHERE owner=? AND instance_id=?",
                                    (owner, iid)).fetchone()
            if row is None:
                return None
            rows = self.conn.execute("SELECT doc FROM series WHERE owner=? AND instance_id=?", (owner, iid)).fetchall()
        docs = [orjson.loads(d) for (d,) in rows]  # decoded after the lock: others' uploads need it
        (ctx, prof, start_ns, payload_ns, resources, engine, errors, first, last, uploads, seq, dropped, ended,
         status) = row
        docs.sort(key=lambda m: (m["name"], sorted(m["tags"].items()), m["type"]))
        return {"profiler": orjson.loads(prof) if prof else None, "payload_ns": dec(payload_ns),
                "start_ns": dec(start_ns), "ended_ns": dec(ended), "exit_status": status,
                "context": orjson.loads(ctx), "metrics": docs, "errors": orjson.loads(errors) if errors else [],
                "resources": orjson.loads(resources) if resources else [],
                "engine": orjson.loads(engine) if engine else None,
                "instance": {"instance_id": iid, "first_seen_ns": first, "last_seen_ns": last, "uploads": uploads,
                             "seq": dec(seq), "dropped_errors": dec(dropped)}}

    def history(self, owner, iid, since_ns):
        """[(ts_ns, {series key: state})] from the newest row at or before
        since_ns on, oldest first."""
        with self.lock:
            first = self.conn.execute("SELECT MAX(ts_ns) FROM history WHERE owner=? AND instance_id=? AND ts_ns <= ?",
                                      (owner, iid, enc_bound(since_ns))).fetchone()[0]
            lo = first if first is not None else enc_bound(since_ns)
            rows = self.conn.execute("SELECT ts_ns, snapshot FROM history WHERE owner=? AND instance_id=? "
                                     "AND ts_ns >= ? ORDER BY ts_ns", (owner, iid, lo)).fetchall()
        return [(dec(ts), orjson.loads(zlib.decompress(blob))) for ts, blob in rows]

    def size_bytes(self):
        """Bytes on disk (database and write-ahead log)."""
        import os

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
