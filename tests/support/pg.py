"""A real PostgreSQL server for the fleet tests: the binaries of Debian's
`postgresql` package (or GS_PG_BIN, a folder with initdb and pg_ctl), a
cluster made in a temporary folder and started once per test session on a
free port of 127.0.0.1, with password authentication (scram-sha-256) only:
the tests give the password the ways graphsignal-server takes it, never
in a URL. Each test gets a database of its own (new_database()).

PostgreSQL refuses to run as root: under root the cluster belongs to the
`postgres` user (Debian's package makes it) or `nobody`, and its programs
run as that user through setpriv. fsync is off: the tests kill
graphsignal-server, never the machine."""
import glob
import itertools
import os
import pwd
import re
import shutil
import subprocess
import tempfile

from support.gsrun import free_port, wait_for

USER = "gs"  # the cluster's superuser
PASSWORD = "gs-test-pw"


def bindir():
    """The folder of initdb and pg_ctl, or None."""
    given = os.environ.get("GS_PG_BIN")
    if given:
        return given if os.path.exists(os.path.join(given, "initdb")) else None
    found = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    found.sort(key=lambda p: int(re.sub(r"\D", "", p.split("/")[4]) or 0))
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


def _runas():
    """(argv prefix, uid, gid) that runs PostgreSQL's programs as a user it accepts."""
    if os.geteuid() != 0:
        return [], os.geteuid(), os.getegid()
    for name in ("postgres", "nobody"):
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            continue
        return (["setpriv", "--reuid=%d" % pw.pw_uid, "--regid=%d" % pw.pw_gid, "--clear-groups", "--"],
                pw.pw_uid, pw.pw_gid)
    raise RuntimeError("running as root, and no postgres or nobody user to run PostgreSQL as")


class PgServer:
    def __init__(self, bin_dir, durable=False):
        """durable: fsync on, as a production server runs (the benchmark's)."""
        self.bin = bin_dir
        self.durable = durable
        self.root = tempfile.mkdtemp(prefix="gs-pg-")
        self.data = os.path.join(self.root, "data")
        self.port = free_port()
        self.prefix, uid, gid = _runas()
        os.chown(self.root, uid, gid)
        pwfile = os.path.join(self.root, "pw")
        with open(pwfile, "w") as f:
            f.write(PASSWORD + "\n")
        os.chown(pwfile, uid, gid)
        self.log = os.path.join(self.root, "log")
        self._run("initdb", "-D", self.data, "-U", USER, "--pwfile", pwfile, "--auth", "scram-sha-256",
                  "-E", "UTF8", "--no-locale", "--no-sync")
        os.unlink(pwfile)
        self._names = itertools.count(1)
        self.start()

    def _run(self, prog, *args):
        r = subprocess.run(self.prefix + [os.path.join(self.bin, prog)] + list(args), capture_output=True,
                           cwd=self.root, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("%s failed: %s" % (prog, (r.stdout + r.stderr).decode(errors="replace")[-2000:]))

    def start(self):
        opts = ("-c listen_addresses=127.0.0.1 -p %d -k %s -c max_connections=300 -c shared_buffers=128MB"
                % (self.port, self.root))
        if not self.durable:
            opts += " -c fsync=off -c full_page_writes=off"
        self._run("pg_ctl", "-D", self.data, "-l", self.log, "-o", opts, "-w", "-t", "60", "start")

    def stop(self, mode="fast"):
        self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")

    def url(self, database="postgres"):
        """The URL of a database, without the password."""
        return "postgresql://%s@127.0.0.1:%d/%s" % (USER, self.port, database)

    def cpu_seconds(self):
        """CPU time (user + system) of the cluster's processes now: the
        postmaster and its children (connections, writers, autovacuum)."""
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            master = int(f.readline())
        total = 0
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % pid) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(pid) == master:  # with its children that exited (closed connections)
                total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
            elif int(fields[1]) == master:
                total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    def admin(self):
        import psycopg

        return psycopg.connect(self.url(), password=PASSWORD, autocommit=True)

    def new_database(self):
        """The URL of a new, empty database."""
        name = "t%d_%d" % (os.getpid(), next(self._names))
        with self.admin() as c:
            c.execute("CREATE DATABASE %s" % name)
        return self.url(name)

    def up(self):
        try:
            with self.admin() as c:
                c.execute("SELECT 1")
            return True
        except Exception:
            return False

    def cleanup(self):
        try:
            self.stop("immediate")
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.root, ignore_errors=True)


_server = None
_why_not = None


def server():
    """The session's PostgreSQL (started on first use), or None with why_not() saying why."""
    global _server, _why_not
    if _server is not None or _why_not is not None:
        return _server
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _why_not = "psycopg is not installed (pip install '.[server-pg]')"
        return None
    b = bindir()
    if b is None:
        _why_not = "no PostgreSQL server here (apt-get install postgresql, or GS_PG_BIN=DIR)"
        return None
    try:
        _server = PgServer(b)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        _why_not = "PostgreSQL would not start: %s" % str(e).strip()[:300]
        return None
    assert wait_for(_server.up, 30), "PostgreSQL started but does not answer"
    return _server


def why_not():
    return _why_not


def shutdown():
    global _server
    if _server is not None:
        _server.cleanup()
        _server = None
