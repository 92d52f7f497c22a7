"""How graphsignal-server's rows are written and read, whatever the
database (graphsignal.fleet.storage keeps them by its rules): the tables
in each backend's words; the upload's integers, stored minus 2^63 so a
signed 64-bit column holds 0 to 2^64-1 exactly and in order; a series'
key, the state stored beside its stats and its whole state; a history
row's blob, read back with its size and nesting bounded; an instance's
errors merged; and what its engine summary and resources say of it.
"""
import zlib

import orjson

from graphsignal import jsonsafe, windowmath

MAX_ERRORS = 100  # kept per instance
MAX_ROW = 64 << 20  # bytes of a history row's JSON: what one upload may gunzip to (ingest.MAX_JSON)
MAX_ROW_DEPTH = 8  # nesting of a history row: {key: [count, sum, {"idx": [...]}]} is 4
OFFSET = 1 << 63  # stored = value - OFFSET for the upload's own integers
U64_MAX = (1 << 64) - 1


# The tables, once for both backends: schema() fills in a backend's types and table options.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS instances (
  owner {text} NOT NULL, instance_id {text} NOT NULL,
  context {blob} NOT NULL, profiler {blob}, start_ns {int}, payload_ns {int} NOT NULL,
  first_seen_ns {int} NOT NULL, last_seen_ns {int} NOT NULL,
  last_seq {int}, uploads {int} NOT NULL DEFAULT 0, dropped_errors {int},
  resources {blob}, engine {blob}, errors {blob},
  history_minute {int}, ended_ns {int}, exit_status INTEGER, seen_up_ns {int} NOT NULL DEFAULT 0,
  PRIMARY KEY (owner, instance_id)
){rewritten};
CREATE INDEX IF NOT EXISTS instances_last_seen ON instances ({last_seen});
CREATE INDEX IF NOT EXISTS instances_seen_up ON instances (seen_up_ns);
CREATE TABLE IF NOT EXISTS series (
  owner {text} NOT NULL, instance_id {text} NOT NULL, skey {blob} NOT NULL,
  doc {blob} NOT NULL, updated_ns {int}, state {blob},
  PRIMARY KEY (owner, instance_id, skey)
){rewritten};
CREATE TABLE IF NOT EXISTS history (
  owner {text} NOT NULL, instance_id {text} NOT NULL, ts_ns {int} NOT NULL,
  snapshot {blob} NOT NULL, kept_up_ns {int} NOT NULL DEFAULT 0,
  PRIMARY KEY (owner, instance_id, ts_ns)
){appended};
CREATE INDEX IF NOT EXISTS history_kept_up ON history (owner, instance_id, kept_up_ns);
"""


def schema(text, blob, integer, rewritten, appended, last_seen):
    """The tables in a backend's words: its text (compared as bytes), blob
    and 64-bit integer types, the options of the tables whose rows each
    upload rewrites (instances, series) and of the history, to which rows
    are appended, and the columns of the index that lists a key's
    instances by last seen."""
    return _SCHEMA.format(text=text, blob=blob, int=integer, rewritten=rewritten, appended=appended,
                          last_seen=last_seen)


class BadRow(ValueError):
    """A stored history row that cannot be read; the message says why."""


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


def series_key(m):
    return orjson.dumps([m["name"], m["type"], m["tags"]], option=orjson.OPT_SORT_KEYS)


def state_of(m):
    """What is stored beside a checked upload series' stats: the state it
    carries (schema 2; a profile's, the frames its stats do not list);
    for schema 1, what its stats give (a profile's: null, its stats are
    all there is)."""
    if "state" in m:
        return m["state"]
    return None if m["type"] == windowmath.PROFILE else windowmath.stored_state(m["type"], m["stats"])


def whole_state(type_, stats, stored):
    """A series' state in windowmath's JSON form from its stats and what is
    stored beside them (state_of): a profile's listed frames joined with
    the rest, another type's as stored."""
    if type_ == windowmath.PROFILE:
        return windowmath.stored_state(type_, stats, stored)
    return stored


def upload_state(m):
    """The whole state of a checked upload series (the recent tier's)."""
    return whole_state(m["type"], m["stats"], state_of(m))


def _stored(m):
    """(the series as the snapshot shows it: the upload's without its
    state, what is stored beside it: state_of), both JSON."""
    if "state" not in m:
        return orjson.dumps(m), orjson.dumps(state_of(m))
    state = m.pop("state")  # out for the doc's encoding (no copy of the series), then back, last as it was
    try:
        return orjson.dumps(m), orjson.dumps(state)
    finally:
        m["state"] = state


def fill_states(c, sql, batch=1000):
    """Gives every stored series the state a schema 1 upload of its stats
    would have (state_of), a batch at a time in key order: the schema
    upgrade that added the column (both backends'). A doc that cannot be
    read gets a null state (its windows are empty, its snapshot as it
    was). Returns how many were looked at."""
    n = 0
    after = None
    while True:
        rows = c.execute(sql("SELECT owner, instance_id, skey, doc FROM series WHERE state IS NULL%s "
                             "ORDER BY owner, instance_id, skey LIMIT %d"
                             % ("" if after is None else " AND (owner, instance_id, skey) > (?, ?, ?)", batch)),
                         after or ()).fetchall()
        if not rows:
            return n
        out = []
        for owner, iid, skey, doc in rows:
            try:
                m = orjson.loads(bytes(doc))
                state = orjson.dumps(state_of({"type": m["type"], "stats": m["stats"]}))
            except (ValueError, TypeError, KeyError, AttributeError):  # orjson's errors are ValueErrors
                state = b"null"
            out.append((state, owner, iid, skey))
        c.executemany(sql("UPDATE series SET state=? WHERE owner=? AND instance_id=? AND skey=?"), out)
        n += len(rows)
        after = tuple(rows[-1][:3])


def _described(engine_blob, resources_blob):
    """(GPUs, service) of an instance from its stored engine summary and
    resources (see Storage.instances)."""
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


def merge_errors(blob, new):
    """The stored errors (JSON bytes, or None) with an upload's merged in:
    a known error (same time, level, text, tags) takes the higher count;
    the newest MAX_ERRORS are kept."""
    if not new:
        return blob
    errors = orjson.loads(blob) if blob else []
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
