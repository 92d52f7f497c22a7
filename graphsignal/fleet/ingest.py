"""Reading an upload body: size caps, gzip, JSON, and the shape the
uploader sends (graphsignal.sidecar.upload). Everything is checked before
anything is stored; a body that fails any check is refused whole with one
message that says what was wrong and where.

Limits beyond the shape: objects and lists nest at most MAX_DEPTH levels
anywhere in the body (the body object is level 1; what the sidecar sends
nests 6 deep; checked by decode()), and every integer field (payload_ns,
start_ns, seq, dropped_errors, updated_ns, counts, timestamps) is between
0 and 2^64-1 (the decoder reads a larger one as a float, refused as not an
integer)."""
import zlib

import orjson

from graphsignal import jsonsafe

MAX_BODY = 8 << 20  # bytes on the wire (gzip)
MAX_JSON = 64 << 20  # bytes after gunzip
MAX_METRICS = 50_000  # series per upload
MAX_FRAMES = 1000  # frames per profile (the sidecar sends at most 250)
MAX_COUNT = (1 << 63) - 1  # a bin's count: what the window maths hold in int64
MAX_BINS = 4096  # histogram bins (the sidecar's log-linear layout has 1920)
MAX_ERRORS = 2000
MAX_RESOURCES = 10_000
MAX_TAGS = 64
MAX_NAME = 512  # characters of a metric name, tag key, error level or kind
MAX_TEXT = 1 << 18  # characters of a tag value, frame name, message or exception
MAX_DEPTH = 32  # levels of nested objects and lists, the body itself being 1
U64_MAX = (1 << 64) - 1
SCHEMA = 1
TYPES = ("gauge", "counter", "histogram", "profile")


class BadBody(ValueError):
    """status: the HTTP status to answer with (400, or 413 for size)."""

    def __init__(self, message, status=400):
        ValueError.__init__(self, message)
        self.status = status


def decode(raw, encoding):
    """The JSON document of a raw body (bytes) sent with this
    Content-Encoding (gzip or none)."""
    enc = (encoding or "identity").strip().lower()
    if enc == "gzip":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            data = d.decompress(raw, MAX_JSON)
            if d.unconsumed_tail:
                raise BadBody("body is larger than %d MiB uncompressed" % (MAX_JSON >> 20), 413)
            data += d.flush()
        except zlib.error as e:
            raise BadBody("body is not valid gzip: %s" % e)
        if not d.eof:
            raise BadBody("body is not valid gzip: the stream is truncated")
    elif enc == "identity":
        data = raw
    else:
        raise BadBody("unsupported Content-Encoding %r (send gzip)" % encoding)
    # the nesting first: orjson recurses without a limit of its own (SIGSEGV past ~100,000 levels)
    try:
        return jsonsafe.loads(data, MAX_DEPTH)
    except jsonsafe.TooDeep as e:
        raise BadBody("body: %s" % e)
    except orjson.JSONDecodeError as e:
        raise BadBody("body is not JSON: %s" % e)


_NUM = (int, float)  # by exact type: JSON gives no subclasses, and bool is not a number here


def _is_num(v):
    return type(v) in _NUM


def _is_int(v):
    return type(v) is int


def _str(v, where, limit=MAX_TEXT, empty=False):
    if not isinstance(v, str) or len(v) > limit or (not empty and not v):
        raise BadBody("%s must be a %sstring of at most %d characters" % (where, "" if empty else "non-empty ", limit))
    return v


def _opt_int(v, where, low=0):
    if v is not None and (type(v) is not int or not low <= v <= U64_MAX):
        raise BadBody("%s must be an integer from %d to 2^64-1, or null" % (where, low))
    return v


def _opt_num(v, where):
    if v is not None and type(v) not in _NUM:
        raise BadBody("%s must be a number or null" % where)
    return v


def _tags(v, where):
    if type(v) is not dict or len(v) > MAX_TAGS:
        raise BadBody("%s must be an object of at most %d string values" % (where, MAX_TAGS))
    for k, x in v.items():
        if not k or len(k) > MAX_NAME or type(x) is not str or len(x) > MAX_TEXT:
            _str(k, where + " key", MAX_NAME)
            _str(x, "%s[%r]" % (where, k[:40]), empty=True)
    return v


def _flat(v, where):
    """An object of scalars (context, attributes)."""
    if not isinstance(v, dict) or len(v) > 1000:
        raise BadBody("%s must be an object" % where)
    for k, x in v.items():
        if len(k) > MAX_NAME:
            raise BadBody("%s has a key longer than %d characters" % (where, MAX_NAME))
        if x is not None and not isinstance(x, (str, int, float, bool)):
            if not isinstance(x, (list, dict)) or len(orjson.dumps(x)) > MAX_TEXT:
                raise BadBody("%s[%r] must be a scalar" % (where, k[:40]))
        if isinstance(x, str) and len(x) > MAX_TEXT:
            raise BadBody("%s[%r] is longer than %d characters" % (where, k[:40], MAX_TEXT))
    return v


def _stats(type_, st, where):
    if not isinstance(st, dict):
        raise BadBody("%s.stats must be an object" % where)
    if type_ == "gauge":
        _opt_num(st.get("value"), where + ".stats.value")
    elif type_ == "counter":
        _opt_num(st.get("total"), where + ".stats.total")
    elif type_ == "histogram":
        _opt_int(st.get("count"), where + ".stats.count")
        for k in ("sum", "min", "max", "mean", "p50", "p95", "p99"):
            _opt_num(st.get(k), "%s.stats.%s" % (where, k))
        bins, counts = st.get("bins", []), st.get("counts", [])
        if not isinstance(bins, list) or not isinstance(counts, list) or len(bins) != len(counts) \
                or len(bins) > MAX_BINS:
            raise BadBody("%s.stats.bins and .counts must be lists of the same length (at most %d)" % (where, MAX_BINS))
        if not all(b is None or type(b) in _NUM for b in bins):
            raise BadBody("%s.stats.bins[] must be numbers or null" % where)
        if not all(type(c) in _NUM and 0 <= c <= MAX_COUNT for c in counts):
            raise BadBody("%s.stats.counts[] must be numbers from 0 to %d" % (where, MAX_COUNT))
    else:
        frames = st.get("frames")
        if not isinstance(frames, list) or len(frames) > MAX_FRAMES:
            raise BadBody("%s.stats.frames must be a list of at most %d frames" % (where, MAX_FRAMES))
        for f in frames:
            if type(f) is not dict:
                raise BadBody("%s.stats.frames[] must be objects" % where)
            name = f.get("name")
            if type(name) is not str or len(name) > MAX_TEXT:
                raise BadBody("%s.stats.frames[].name must be a string of at most %d characters" % (where, MAX_TEXT))
            if type(f.get("value")) not in _NUM or type(f.get("samples")) not in _NUM:
                raise BadBody("%s.stats.frames[] need numbers value and samples" % where)
    return st


def _objects(items, key, most):
    """(where, item) of each object in the list `items` at `key`, which
    may hold at most `most` of them."""
    if not isinstance(items, list) or len(items) > most:
        raise BadBody("%s must be a list of at most %d entries" % (key, most))
    for i, item in enumerate(items):
        where = "%s[%d]" % (key, i)
        if not isinstance(item, dict):
            raise BadBody(where + " must be an object")
        yield where, item


def validate(doc):
    """The upload `doc` as checked; raises BadBody."""
    if not isinstance(doc, dict):
        raise BadBody("body must be a JSON object")
    if doc.get("schema") != SCHEMA:
        raise BadBody("schema must be %d, got %r" % (SCHEMA, doc.get("schema")))
    _str(doc.get("instance_id"), "instance_id", 256)
    if "\0" in doc["instance_id"]:  # no database's text keeps it alike (PostgreSQL's refuses it)
        raise BadBody("instance_id must not contain NUL characters")
    _flat(doc.get("context"), "context")
    if "service.name" in doc["context"]:
        _str(doc["context"]["service.name"], "context['service.name']", MAX_NAME)
    if "tags" in doc["context"]:
        _tags(doc["context"]["tags"], "context['tags']")
    if doc["context"].get("instance.id", doc["instance_id"]) != doc["instance_id"]:
        raise BadBody("instance_id and context['instance.id'] differ")
    if doc.get("profiler") is not None:
        _flat(doc["profiler"], "profiler")
    if not _is_int(doc.get("payload_ns")) or not 0 <= doc["payload_ns"] <= U64_MAX:
        raise BadBody("payload_ns must be an integer from 0 to 2^64-1 (epoch ns)")
    _opt_int(doc.get("start_ns"), "start_ns")
    _opt_int(doc.get("ended_ns"), "ended_ns")
    status = doc.get("exit_status")
    if status is not None and (type(status) is not int or not -128 <= status <= 255):
        raise BadBody("exit_status must be an integer from -128 to 255 (an exit code, or -N for signal N), or null")
    _opt_int(doc.get("seq"), "seq")
    _opt_int(doc.get("dropped_errors"), "dropped_errors")
    metrics = doc.get("metrics", [])
    if not isinstance(metrics, list) or len(metrics) > MAX_METRICS:
        raise BadBody("metrics must be a list of at most %d series" % MAX_METRICS)
    for i, m in enumerate(metrics):
        if type(m) is not dict:
            raise BadBody("metrics[%d] must be an object" % i)
        name = m.get("name")
        if type(name) is not str or not name or len(name) > MAX_NAME:
            _str(name, "metrics[%d].name" % i, MAX_NAME)
        if m.get("type") not in TYPES:
            raise BadBody("metrics[%d].type must be one of %s" % (i, ", ".join(TYPES)))
        _tags(m.get("tags"), "metrics[%d].tags" % i)
        _stats(m["type"], m.get("stats"), "metrics[%d]" % i)
        _opt_int(m.get("updated_ns"), "metrics[%d].updated_ns" % i)
    for where, e in _objects(doc.get("errors", []), "errors", MAX_ERRORS):
        _str(e.get("level"), where + ".level", MAX_NAME)
        _str(e.get("message"), where + ".message", empty=True)
        if e.get("exception") is not None:
            _str(e["exception"], where + ".exception", empty=True)
        _tags(e.get("tags", {}), where + ".tags")
        _opt_int(e.get("timestamp_ns"), where + ".timestamp_ns")
        _opt_int(e.get("last_ns"), where + ".last_ns")
        _opt_int(e.get("count"), where + ".count")
    resources = doc.get("resources")
    if resources is not None:
        for where, r in _objects(resources, "resources", MAX_RESOURCES):
            _str(r.get("kind"), where + ".kind", MAX_NAME)
            _tags(r.get("tags", {}), where + ".tags")
            _flat(r.get("attributes", {}), where + ".attributes")
    if doc.get("engine") is not None and not isinstance(doc["engine"], dict):
        raise BadBody("engine must be an object or null")
    return doc
