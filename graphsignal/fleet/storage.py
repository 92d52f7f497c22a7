"""graphsignal-server's storage, whatever the database: what is kept, the
rules it is kept by, and the one algorithm that writes and reads it. Two
backends run it: one SQLite file (graphsignal.fleet.db, the default) and
PostgreSQL (graphsignal.fleet.pg, for several replicas). They differ in
how a transaction is opened, which rows it locks and how the schema is
made, never in what is stored or answered: the same requests get the
same bytes back from either.

What it keeps, per API key (stored as the SHA-256 of the key, never the
key) and instance (one graphsignal-run):

  instances  identity (context, profiler), first/last seen (server clock,
             epoch ns), the instance's own start_ns and latest payload_ns,
             its latest resources and engine summary, and its latest
             MAX_ERRORS errors (repeats counted, as in /signals)
  series     the latest stats of every series it reported: together, the
             instance's snapshot in /signals's shape; and beside them its
             state as the upload carried it (graphsignal.upload_model): a
             gauge's, counter's or histogram's graphsignal.windowmath state
             in its JSON form, a profile's frames its stats do not list
             (null when the upload did not say: the first schema). An
             upload of the first schema has no states: theirs are its
             stats', converted once as it is stored (state_of). A series'
             whole state is its stats and its stored state together
             (whole_state): a profile's, its listed frames and the rest
  history    cumulative snapshots of every series' state (what windows
             need), one per minute of the instance's clock for the last
             24 h, one per hour beyond that, none beyond the retention (7
             days by default); zlib-compressed JSON {series key: state},
             made of the stored states as they are

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

The up time goes on from the newest seen_up_ns when the server (each
replica) starts.

A commit happens before an upload is acknowledged. Ingest is idempotent:
a series update older than what is stored is ignored, an error already
stored updates its count, so a body resent after a lost acknowledgement
changes nothing. Every write of one instance first holds that instance's
row (SQLite: the one writer; PostgreSQL: SELECT ... FOR UPDATE), so
uploads of one instance through two replicas apply one after the other.

The integers an upload carries (start_ns, payload_ns, seq, dropped_errors,
a series' updated_ns, and the history's ts_ns, which is a payload_ns) may
be anything from 0 to 2^64-1, and both databases' integers are signed
64-bit: those columns hold the value minus 2^63 (enc/dec), which keeps
every value exact and their order (MAX(), comparisons, ORDER BY) the same.

Text is compared as bytes on both (SQLite's BINARY, PostgreSQL's
COLLATE "C"), so instances list in the same order.
"""
import contextlib
import hashlib
import logging
import threading
import zlib
from typing import Any

import orjson

from graphsignal import windowmath
from graphsignal.fleet.rows import _described, _stored, dec, enc, enc_bound, merge_errors, series_key, whole_state

logger = logging.getLogger("graphsignal.fleet")

NS = 1_000_000_000
MINUTE_NS = 60 * NS
HOUR_NS = 3600 * NS
MINUTE_ROWS_NS = 24 * HOUR_NS  # per-minute history this far back, hourly beyond
MAX_SERIES = 20_000  # per instance (a sidecar holds at most 5,000)
MAX_INSTANCES = 10_000  # per key
EXPIRE_BATCH = 100  # instances deleted for silence in one pass: a wrong clock can cost a pass, not a fleet
HISTORY_BATCH = 16  # history rows deleted for age as one row is written (one crosses the retention an hour)


class Full(Exception):
    """A key or an instance is at its cap; the message says which."""


class NoSpace(Exception):
    """The disk under the database is full: the write was rolled back
    whole; it may be sent again once there is room."""


class Unavailable(Exception):
    """The database cannot be reached (PostgreSQL down, a connection
    lost): nothing was stored; it may be sent again."""


def owner_of(key):
    """The stored identity of an API key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class UpClock:
    """The server's up time in nanoseconds, over every run: starts at
    start_ns and advances as `source` (a clock that never steps, in ns)
    does, never backwards. Thread-safe."""

    def __init__(self, start_ns, source):
        self.value = start_ns
        self.source = source
        self.last = source()
        self.lock = threading.Lock()

    def __call__(self):
        with self.lock:
            t = self.source()
            if t > self.last:  # a source that went back (a simulated one) adds nothing
                self.value += t - self.last
            self.last = t
            return self.value


class Storage:
    """The writes and reads of graphsignal-server, over a backend that
    gives transactions (_write, _read), says how rows are locked
    (FOR_UPDATE, SKIP_LOCKED) and whether this process may run a retention
    pass now (_may_expire). Statements are written with `?` parameters;
    a backend that speaks another style rewrites them (_sql)."""

    FOR_UPDATE = ""  # appended to the SELECT of the instance row an upload writes
    SKIP_LOCKED = ""  # appended to the SELECT of instances a retention pass deletes
    path = "the database"  # what log lines call it
    # several server processes may share it (PostgreSQL): a process keeps nothing another would need,
    # so the per-second tier of recent history (graphsignal.fleet.recent, in one process's memory) is off
    SHARED = False

    def __init__(self, retention_days, clock, elapsed):
        self.retention_ns = int(retention_days * 86400 * NS)
        self.clock = clock
        self._elapsed = elapsed
        self.up = lambda: 0  # set by _start_clock once the schema is there
        self._next_expiry = 0  # up time of the next retention pass
        self._expiry_lock = threading.Lock()

    def _start_clock(self):
        with self._read() as c:
            start = c.execute(self._sql("SELECT MAX(seen_up_ns) FROM instances")).fetchone()[0]
        self.up = UpClock(max(start or 0, 0), self._elapsed)

    # -- what a backend gives ------------------------------------------------------------
    def _sql(self, text):
        return text

    def _write(self) -> "contextlib.AbstractContextManager[Any]":
        """A cursor in a write transaction, committed on exit (rolled back
        on an exception); raises NoSpace or Unavailable for the database's
        own failures of that kind."""
        raise NotImplementedError

    def _read(self) -> "contextlib.AbstractContextManager[Any]":
        """A cursor that reads one consistent state."""
        raise NotImplementedError

    def _may_expire(self, c):
        return True

    def _writing(self, fn):
        """fn(cursor) in a write transaction; a backend may run it again
        after a transient conflict (fn must only touch the database)."""
        with self._write() as c:
            return fn(c)

    def close(self):
        raise NotImplementedError

    def size_bytes(self):
        raise NotImplementedError

    def fetchall(self, sql, args=()):
        """Rows of one read statement (`?` parameters): for tests and the
        benchmark, which look at what is stored."""
        with self._read() as c:
            return [tuple(r) for r in c.execute(self._sql(sql), args).fetchall()]

    # -- writes ---------------------------------------------------------------------
    def ingest(self, owner, doc):
        """Stores a validated upload (graphsignal.fleet.ingest.validate, of
        either schema) in one transaction; returns what the
        acknowledgement says."""
        iid = doc["instance_id"]
        # the rows are made before the transaction: a 50,000-series upload holds
        # the database only to write them, not to encode them
        rows = [(owner, iid, series_key(m), *_stored(m), enc(m.get("updated_ns")))
                for m in doc.get("metrics") or []]
        out, up = self._writing(lambda c: self._ingest(c, owner, iid, doc, rows))
        with self._expiry_lock:
            due = up >= self._next_expiry
            if due:  # the next pass's time is set before this one runs: one pass at a time per process
                self._next_expiry = up + HOUR_NS
        if due and self._expire(up):
            with self._expiry_lock:
                self._next_expiry = min(self._next_expiry, up + MINUTE_NS)
        return out

    def _ingest(self, c, owner, iid, doc, rows):
        q = self._sql
        now, up = self.clock(), self.up()
        select = q("SELECT payload_ns, history_minute, errors, last_seq FROM instances "
                   "WHERE owner=? AND instance_id=?" + self.FOR_UPDATE)
        row = c.execute(select, (owner, iid)).fetchone()
        payload_ns = doc["payload_ns"]
        minute = payload_ns // MINUTE_NS
        if row is None:
            n = c.execute(q("SELECT COUNT(*) FROM instances WHERE owner=?"), (owner,)).fetchone()[0]
            if n >= MAX_INSTANCES:
                raise Full("this key already has %d instances (the most one key keeps)" % MAX_INSTANCES)
            c.execute(q("INSERT INTO instances (owner, instance_id, context, profiler, start_ns, payload_ns, "
                        "first_seen_ns, last_seen_ns, history_minute, seen_up_ns) VALUES (?,?,?,?,?,?,?,?,?,?) "
                        "ON CONFLICT (owner, instance_id) DO NOTHING"),
                      (owner, iid, orjson.dumps(doc["context"]), orjson.dumps(doc.get("profiler")),
                       enc(doc.get("start_ns")), enc(payload_ns), now, now, minute, up))
            # another replica may have made it first: then it is held from here like any other
            row = c.execute(select, (owner, iid)).fetchone()
        stored_payload, prev_minute, errors_blob, last_seq = row
        if prev_minute is not None and minute > prev_minute:
            # the first upload of a new minute: what the series held at the
            # end of the last one is that minute's history row
            self._roll(c, owner, iid, dec(stored_payload), up)
        written = self._series(c, owner, iid, rows)
        errors = merge_errors(errors_blob, doc.get("errors") or [])
        # the row is held: the maxima are taken here (stored values keep their order)
        sets = ["context=?", "profiler=?", "start_ns=?", "payload_ns=?", "last_seen_ns=?", "seen_up_ns=?",
                "last_seq=?", "uploads=uploads+1", "dropped_errors=?", "errors=?", "history_minute=?"]
        args = [orjson.dumps(doc["context"]), orjson.dumps(doc.get("profiler")), enc(doc.get("start_ns")),
                max(stored_payload, enc(payload_ns)), now, up,
                max(enc(0) if last_seq is None else last_seq, enc(doc.get("seq") or 0)),
                enc(doc.get("dropped_errors")), errors, max(prev_minute or 0, minute)]
        if "resources" in doc and doc["resources"] is not None:
            sets.append("resources=?")
            args.append(orjson.dumps(doc["resources"]))
        if "engine" in doc:
            sets.append("engine=?")
            args.append(orjson.dumps(doc["engine"]))
        if doc.get("ended_ns") is not None:  # a run ends once: later uploads (the final one) keep it
            sets += ["ended_ns=?", "exit_status=?"]
            args += [enc(doc["ended_ns"]), doc.get("exit_status")]
        c.execute(q("UPDATE instances SET %s WHERE owner=? AND instance_id=?" % ", ".join(sets)),
                  args + [owner, iid])
        return {"accepted": True, "instance_id": iid, "seq": doc.get("seq"), "series": written}, up

    def _series(self, c, owner, iid, rows):
        if not rows:
            return 0
        q = self._sql
        have = c.execute(q("SELECT COUNT(*) FROM series WHERE owner=? AND instance_id=?"), (owner, iid)).fetchone()[0]
        if have + len(rows) > MAX_SERIES:
            # only updates of known series beyond the cap
            known = {bytes(r[0]) for r in c.execute(q("SELECT skey FROM series WHERE owner=? AND instance_id=?"),
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
        self._upsert_series(c, rows)
        return len(rows)

    SERIES_UPSERT = ("ON CONFLICT (owner, instance_id, skey) DO UPDATE SET doc=excluded.doc, "
                     "updated_ns=excluded.updated_ns, state=excluded.state WHERE excluded.updated_ns IS NULL OR "
                     "series.updated_ns IS NULL OR excluded.updated_ns >= series.updated_ns")

    def _upsert_series(self, c, rows):
        """Each (owner, instance id, series key, doc, state, updated_ns)
        stored, in order, unless what is stored is newer."""
        c.executemany(self._sql("INSERT INTO series (owner, instance_id, skey, doc, state, updated_ns) "
                                "VALUES (?,?,?,?,?,?) " + self.SERIES_UPSERT), rows)

    def _roll(self, c, owner, iid, ts, up):
        q = self._sql
        # {series key: whole state}, framed from the stored states' JSON as it is; a profile's
        # joined with its stats
        parts = []
        for skey, state, doc in c.execute(q("SELECT skey, state, doc FROM series WHERE owner=? AND instance_id=?"),
                                          (owner, iid)):
            key = bytes(skey).decode()
            if orjson.loads(key)[1] == windowmath.PROFILE:
                m = orjson.loads(doc)
                state = orjson.dumps(whole_state(m["type"], m["stats"],
                                                 orjson.loads(state) if state is not None else None))
            parts.append(orjson.dumps(key) + b":" + bytes(state if state is not None else b"null"))
        states = b",".join(parts)
        c.execute(q("INSERT INTO history (owner, instance_id, ts_ns, snapshot, kept_up_ns) VALUES (?,?,?,?,?) "
                    "ON CONFLICT (owner, instance_id, ts_ns) DO UPDATE SET snapshot=excluded.snapshot, "
                    "kept_up_ns=excluded.kept_up_ns"),
                  (owner, iid, enc(ts), zlib.compress(b"{" + states + b"}", 6), up))
        # beyond the retention of up time, none (a few at a time: one row crosses it an hour); found
        # first, then deleted by key: PostgreSQL would plan one DELETE ... IN (SELECT ...) as a join over
        # every row of the instance
        old = c.execute(q("SELECT ts_ns FROM history WHERE owner=? AND instance_id=? AND kept_up_ns < ? "
                          "ORDER BY kept_up_ns LIMIT ?"),
                        (owner, iid, up - self.retention_ns, HISTORY_BATCH)).fetchall()
        if old:
            c.executemany(q("DELETE FROM history WHERE owner=? AND instance_id=? AND ts_ns=?"),
                          [(owner, iid, t) for (t,) in old])
        # the rows that just crossed 24 h of the instance's clock (and the hour before: a
        # late roll) are thinned to the first of each hour, in Python: the stored values are offset
        cutoff = ts - MINUTE_ROWS_NS
        crossing = [dec(t) for (t,) in c.execute(
            q("SELECT ts_ns FROM history WHERE owner=? AND instance_id=? AND ts_ns < ? AND ts_ns > ? ORDER BY ts_ns"),
            (owner, iid, enc_bound(cutoff), enc_bound(cutoff - 3 * HOUR_NS)))]
        first = {}
        for t in crossing:
            first.setdefault(t // HOUR_NS, t)
        drop = [(owner, iid, enc(t)) for t in crossing if t > cutoff - 2 * HOUR_NS and first[t // HOUR_NS] != t]
        if drop:
            c.executemany(q("DELETE FROM history WHERE owner=? AND instance_id=? AND ts_ns=?"), drop)

    def _expire(self, up):
        """Deletes at most EXPIRE_BATCH instances silent for the retention
        of up time, with their series and history; True when more may be
        due. A failure (a full disk) is one line: the next pass tries again.
        Instances an upload holds right now are not silent: skipped."""
        q = self._sql

        def step(c):
            if not self._may_expire(c):
                return []
            due = c.execute(q("SELECT owner, instance_id FROM instances WHERE seen_up_ns < ? ORDER BY seen_up_ns "
                              "LIMIT ?" + self.SKIP_LOCKED), (up - self.retention_ns, EXPIRE_BATCH)).fetchall()
            for table in ("series", "history", "instances"):
                c.executemany(q("DELETE FROM %s WHERE owner=? AND instance_id=?" % table), [tuple(r) for r in due])
            return due

        try:
            due = self._writing(step)
        except (NoSpace, Unavailable) as e:
            logger.warning("graphsignal-server: deleting instances silent for the retention failed (%s); the next "
                           "pass tries again", e)
            return False
        return len(due) == EXPIRE_BATCH

    # -- reads ------------------------------------------------------------------------
    def instances(self, owner, service=None):
        """The key's instances, newest first: identity, first and last seen
        (server clock), the run's start (start_ns, the sidecar's clock) and
        end (ended_ns, exit_status: null while it runs), its GPUs (device
        resources) and `service`: the service the run named (its context's
        service.name), else the engine, or the program of its first process
        (null when none is known); service: only that service's."""
        with self._read() as c:
            rows = c.execute(self._sql("SELECT instance_id, context, first_seen_ns, last_seen_ns, ended_ns, "
                                       "exit_status, engine, resources, start_ns FROM instances WHERE owner=? "
                                       "ORDER BY last_seen_ns DESC, instance_id"), (owner,)).fetchall()
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
        return self._snapshot(owner, iid, False)[0]

    def snapshot_states(self, owner, iid):
        """(the latest snapshot or None, {series key: its state} of that
        moment, in windowmath's JSON form), read together."""
        return self._snapshot(owner, iid, True)

    def _snapshot(self, owner, iid, with_states):
        if "\0" in iid:  # no stored id has one (ingest.validate), and PostgreSQL's text cannot
            return None, {}
        with self._read() as c:
            row = c.execute(self._sql("SELECT context, profiler, start_ns, payload_ns, resources, engine, errors, "
                                      "first_seen_ns, last_seen_ns, uploads, last_seq, dropped_errors, ended_ns, "
                                      "exit_status FROM instances WHERE owner=? AND instance_id=?"),
                            (owner, iid)).fetchone()
            if row is None:
                return None, {}
            rows = c.execute(self._sql("SELECT doc, skey, state FROM series WHERE owner=? AND instance_id=?"
                                       if with_states else "SELECT doc FROM series WHERE owner=? AND instance_id=?"),
                             (owner, iid)).fetchall()
        # decoded after the read: others' uploads need the database
        docs = [orjson.loads(r[0]) for r in rows]
        states = {bytes(r[1]).decode(): whole_state(m["type"], m["stats"],
                                                    orjson.loads(r[2]) if r[2] is not None else None)
                  for m, r in zip(docs, rows)} if with_states else {}
        (ctx, prof, start_ns, payload_ns, resources, engine, errors, first, last, uploads, seq, dropped, ended,
         status) = row
        docs.sort(key=lambda m: (m["name"], sorted(m["tags"].items()), m["type"]))
        return {"profiler": orjson.loads(prof) if prof else None, "payload_ns": dec(payload_ns),
                "start_ns": dec(start_ns), "ended_ns": dec(ended), "exit_status": status,
                "context": orjson.loads(ctx), "metrics": docs, "errors": orjson.loads(errors) if errors else [],
                "resources": orjson.loads(resources) if resources else [],
                "engine": orjson.loads(engine) if engine else None,
                "instance": {"instance_id": iid, "first_seen_ns": first, "last_seen_ns": last, "uploads": uploads,
                             "seq": dec(seq), "dropped_errors": dec(dropped)}}, states

    def history(self, owner, iid, since_ns):
        """[(ts_ns, {series key: state})] from the newest row at or before
        since_ns on, oldest first."""
        with self._read() as c:
            first = c.execute(self._sql("SELECT MAX(ts_ns) FROM history WHERE owner=? AND instance_id=? "
                                        "AND ts_ns <= ?"), (owner, iid, enc_bound(since_ns))).fetchone()[0]
            lo = first if first is not None else enc_bound(since_ns)
            rows = c.execute(self._sql("SELECT ts_ns, snapshot FROM history WHERE owner=? AND instance_id=? "
                                       "AND ts_ns >= ? ORDER BY ts_ns"), (owner, iid, lo)).fetchall()
        return [(dec(ts), orjson.loads(zlib.decompress(blob))) for ts, blob in rows]
