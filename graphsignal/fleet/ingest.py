"""Reading an upload body: its size, gzip, JSON, and the shape the
uploader sends. Everything is checked before anything is stored; a body
that fails any check is refused whole with one message that says what
was wrong and where.

The shape and its bounds are graphsignal.upload_model's, checked by the
checker graphsignal.typecheck generates from it (every integer field is
between 0 and 2^64-1 unless the model says otherwise; the decoder reads a
larger one as a float, refused as not an integer). Beyond the shape, the
body's own bounds, which no model can state: at most MAX_BODY bytes on
the wire and MAX_JSON gunzipped, objects and lists nested at most
MAX_DEPTH levels anywhere (the body object is level 1; what the sidecar
sends nests 6 deep; checked by decode(), before a value is built), and
two rules across fields: instance_id holds no NUL character (no
database's text keeps one alike) and equals context["instance.id"]."""
import zlib
from typing import Any, Dict, Optional

import orjson

from graphsignal import jsonsafe, typecheck, upload_model

MAX_BODY = 8 << 20  # bytes on the wire (gzip)
MAX_JSON = 64 << 20  # bytes after gunzip
MAX_DEPTH = 32  # levels of nested objects and lists, the body itself being 1

_check = typecheck.checker(upload_model.Upload, upload_model.BOUNDS, defaults=upload_model.DEFAULTS)


class BadBody(ValueError):
    """status: the HTTP status to answer with (400, or 413 for size)."""

    def __init__(self, message: str, status: int = 400) -> None:
        ValueError.__init__(self, message)
        self.status = status


def decode(raw: bytes, encoding: Optional[str]) -> Any:
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


def validate(doc: Any) -> Dict[str, Any]:
    """The upload `doc` as checked (graphsignal.upload_model's Upload, of
    either schema); raises BadBody."""
    if not isinstance(doc, dict):
        raise BadBody("body must be a JSON object")
    try:
        _check(doc)
    except typecheck.Invalid as e:
        raise BadBody(str(e)) from None
    if "\0" in doc["instance_id"]:
        raise BadBody("instance_id must not contain NUL characters")
    if doc["context"].get("instance.id", doc["instance_id"]) != doc["instance_id"]:
        raise BadBody("instance_id and context['instance.id'] differ")
    return doc
