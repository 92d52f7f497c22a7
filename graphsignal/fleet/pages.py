"""The fleet page's files (graphsignal/fleet/static: index.html, app.js,
style.css and the vendored uPlot, scripts/vendor_uplot.py), served by
graphsignal-server's app at / and /static/NAME through the same
connection front as the API (graphsignal.fleet.serving).

load() reads the files once when the app is made: only those names are
ever served (no path from a request reaches the file system), from
memory. The files are public; the data they show comes from the API,
which asks for the key (the page sends what the person gives it)."""
import hashlib
import os

from werkzeug.wrappers import Response

DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".txt": "text/plain; charset=utf-8"}
MAX_FILE = 1 << 20  # bytes: the page's files are a few kB, uPlot ~50 kB
# the page runs only its own files and talks only to this server
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def load(directory=DIR):
    """{name: (bytes, content type, etag)} of the page's files; names are
    relative to `directory` with '/' (vendor/uPlot.iife.min.js)."""
    files = {}
    if not os.path.isdir(directory):
        return files
    for root, _, names in os.walk(directory):
        for n in names:
            ext = os.path.splitext(n)[1]
            path = os.path.join(root, n)
            if ext not in TYPES or os.path.getsize(path) > MAX_FILE:
                continue
            with open(path, "rb") as f:
                data = f.read()
            rel = os.path.relpath(path, directory).replace(os.sep, "/")
            files[rel] = (data, TYPES[ext], '"%s"' % hashlib.sha256(data).hexdigest()[:32])
    return files


def response(files, name):
    """The file's response, or a JSON 404 for a name that is not one."""
    f = files.get(name)
    if f is None:
        r = Response(b'{"error": "not found: /static/%s"}' % name.encode("ascii", "replace")[:200], status=404,
                     mimetype="application/json")
    else:
        data, ctype, etag = f
        r = Response(data, content_type=ctype)
        r.headers["ETag"] = etag
        r.headers["Cache-Control"] = "no-cache"  # revalidated: a new install serves its own files at once
    r.headers["Content-Security-Policy"] = CSP
    r.headers["X-Content-Type-Options"] = "nosniff"
    r.headers["Referrer-Policy"] = "no-referrer"
    return r
