"""A real headless Chromium for tests, driven through its DevTools protocol
over a pipe (--remote-debugging-pipe: JSON messages ended by NUL on the
browser's fds 3 and 4), so no websocket library is needed.

    with Browser.start() as b:          # None-safe: Browser.find() says why not
        page = b.open("http://127.0.0.1:8000/")
        page.wait_for("document.title.includes('ready')", 20)
        page.screenshot("/tmp/page.png")

find() returns the binary or None (Debian's `chromium`, or $GS_CHROMIUM);
tests skip with one line when it is None. As root, Chromium needs
--no-sandbox."""
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time


def find():
    """The Chromium binary, or None."""
    explicit = os.environ.get("GS_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(Exception):
    pass


class Browser:
    def __init__(self, proc, rfd, wfd, profile_dir):
        self.proc, self.rfd, self.wfd = proc, rfd, wfd
        self.profile_dir = profile_dir
        self.next_id = 0
        self.buf = b""
        self.events = []  # (method, params, sessionId) not yet taken

    @classmethod
    def start(cls, width=1280, height=900, binary=None):
        binary = binary or find()
        if binary is None:
            raise BrowserError("no chromium")
        profile_dir = tempfile.mkdtemp(prefix="gs-chromium-")
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()
        # the child's ends well above 4, so the redirections below never overwrite one another
        for name in ("to_browser_r", "from_browser_w"):
            fd = locals()[name]
            high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
            os.close(fd)
            if name == "to_browser_r":
                to_browser_r = high
            else:
                from_browser_w = high
        args = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
                "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe",
                "--user-data-dir=" + profile_dir, "--window-size=%d,%d" % (width, height), "about:blank"]
        # the browser reads commands on fd 3 and writes answers on fd 4
        shell = 'exec "$@" 3<&%d 4>&%d %d<&- %d>&-' % (to_browser_r, from_browser_w, to_browser_r, from_browser_w)
        proc = subprocess.Popen(["bash", "-c", shell, "bash"] + args, pass_fds=(to_browser_r, from_browser_w),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        b = cls(proc, from_browser_r, to_browser_w, profile_dir)
        try:
            b.call("Target.setDiscoverTargets", {"discover": False}, timeout=30)
        except BaseException:
            b.close()
            raise
        return b

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        try:
            os.close(self.wfd)
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        try:
            os.close(self.rfd)
        except OSError:
            pass
        shutil.rmtree(self.profile_dir, ignore_errors=True)

    # -- the protocol ------------------------------------------------------------
    def send(self, method, params=None, session=None):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            n = os.write(self.wfd, data)
            data = data[n:]
        return self.next_id

    def _read_message(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("no answer from chromium in time")
            r, _, _ = select.select([self.rfd], [], [], left)
            if not r:
                continue
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                raise BrowserError("chromium closed its pipe (exit status %s)" % self.proc.poll())
            self.buf += chunk
        raw, _, self.buf = self.buf.partition(b"\0")
        return json.loads(raw)

    def call(self, method, params=None, session=None, timeout=30.0):
        want = self.send(method, params, session)
        deadline = time.monotonic() + timeout
        while True:
            msg = self._read_message(deadline)
            if msg.get("id") == want:
                if "error" in msg:
                    raise BrowserError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})
            if "method" in msg:
                self.events.append((msg["method"], msg.get("params", {}), msg.get("sessionId")))

    def pump(self, seconds):
        """Reads events for up to `seconds`."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                msg = self._read_message(deadline)
                if "method" in msg:
                    self.events.append((msg["method"], msg.get("params", {}), msg.get("sessionId")))
        except BrowserError:
            if self.proc.poll() is not None:
                raise

    def open(self, url, width=1280, height=900):
        target = self.call("Target.createTarget", {"url": "about:blank"})
        session = self.call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Log"):
            self.call(domain + ".enable", session=session)
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=session)
        if url:
            page.navigate(url)
        return page


class Page:
    def __init__(self, browser, session):
        self.b, self.session = browser, session

    def navigate(self, url):
        r = self.b.call("Page.navigate", {"url": url}, self.session)
        if r.get("errorText"):
            raise BrowserError("cannot load %s: %s" % (url, r["errorText"]))

    def evaluate(self, expression, timeout=30.0):
        r = self.b.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True},
                        self.session, timeout)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise BrowserError("%s: %s" % (d.get("text"), (d.get("exception") or {}).get("description")))
        return r.get("result", {}).get("value")

    def problems(self):
        """Dialogs (alert), uncaught exceptions, console errors and the
        browser's own error entries (CSP violations, failed loads) of this
        page so far, as text lines; dialogs are dismissed."""
        out, keep = [], []
        for method, params, session in self.b.events:
            if session != self.session:
                keep.append((method, params, session))
            elif method == "Page.javascriptDialogOpening":
                out.append("dialog: %s" % params.get("message"))
                self.b.send("Page.handleJavaScriptDialog", {"accept": True}, self.session)
            elif method == "Runtime.exceptionThrown":
                d = params.get("exceptionDetails", {})
                out.append("exception: %s %s" % (d.get("text"), (d.get("exception") or {}).get("description")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                # the browser's own: a policy violation (CSP), a failed load
                e = params["entry"]
                out.append("log (%s): %s %s" % (e.get("source"), e.get("text"), e.get("url") or ""))
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                out.append("console.error: %s" % " ".join(str(a.get("value", a.get("description")))
                                                          for a in params.get("args", [])))
        self.b.events = keep
        return out

    def wait_for(self, expression, timeout=30.0):
        """Polls `expression` until it is truthy; returns its value. Raises
        BrowserError (with the page's problems) when time runs out."""
        deadline = time.monotonic() + timeout
        problems = []
        while True:
            try:
                value = self.evaluate(expression)
            except BrowserError as e:  # the page is not there yet (no body while it loads)
                value, last = None, str(e)
                problems.append(last) if time.monotonic() >= deadline else None
            problems += self.problems()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise BrowserError("timed out waiting for %s; page problems: %s" % (expression, problems or "none"))
            self.b.pump(0.2)

    def screenshot(self, path):
        data = self.b.call("Page.captureScreenshot", {"format": "png"}, self.session)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path
