"""Host and process metrics (psutil).

Host: CPU (top's convention: 100 = one core busy; the host resource
carries the core count) and memory. Processes: the workload's child and
every descendant, found as they appear: CPU %, RSS and virtual memory,
plus a process resource with its parent and command line.

Command lines are redacted before they are stored (redact_command_line):
the payload is served over HTTP, to the network with --listen-host.
"""
import functools
import os
import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

import psutil

from graphsignal import procfs
from graphsignal.sources import Source, SourceUnavailable
from graphsignal.sources.twins import ProcessCpuTotals


# -- redaction of command lines ------------------------------------------------------------
# What is hidden and what is not is listed in graphsignal/reference/metrics.md (process resources);
# tests/unit/test_redaction.py holds both tables. The rules, in order:
# 1. the argument list as the program sees it: values of secret-named
#    options ("--api-key X", "--hf-token=X", "HF_TOKEN=X"), headers
#    ("Authorization: X"), user:password options (-u, --user, -U,
#    --proxy-user), and the password options of a few programs whose short
#    flag is a password (mysql's -pX, sshpass -p, redis-cli -a, mongo -p,
#    curl's -b cookies);
# 2. the same rules over the words of an argument that holds several (a
#    script after sh -c, an inline config);
# 3. anywhere inside an argument: URL passwords (and the token of an
#    http(s)://TOKEN@ URL), secret-named keys of query strings and key=value
#    lists, JSON/dict keys, "Name: value" pairs, Authorization/Cookie header
#    text, openssl's pass:X, "Bearer X", and tokens by their well-known
#    shapes (OpenAI/Anthropic, GitHub, Hugging Face, AWS key ids, Slack,
#    Google, Stripe, GitLab, JWTs).
REDACTED = "***"

# A name "says" a secret when one of its words is one of these ("--api-key",
# "HF_TOKEN", "apiKey", "db.password", "Set-Cookie"), or a one-word name ends
# with one (PGPASSWORD, CLIENTSECRET); "--tokenizer" and "--max-tokens" do not.
SECRET_WORDS = frozenset(("key", "keys", "apikey", "token", "authtoken", "accesstoken", "secret", "secrets",
                          "password", "passwords", "passwd", "passphrase", "auth", "authorization", "credential",
                          "credentials", "cookie", "cookies", "sig", "signature", "bearer"))
_SECRET_ENDINGS = ("password", "passwd", "secret", "token", "apikey")
_NOT_PASSWORDS = frozenset(("bypass", "compass", "multipass", "onepass", "twopass", "firstpass", "secondpass"))
# where a secret is kept, not the secret: --key-file PATH, HF_TOKEN_PATH, --password-env NAME
_LOCATION_WORDS = frozenset(("file", "path", "dir", "env"))
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_NAME = re.compile(r"^(-{0,2})([A-Za-z_][\w.\-]*)$")
_ASSIGN = re.compile(r"^(-{0,2}[A-Za-z_][\w.\-]*)=(.*)$", re.S)
_OPTION = re.compile(r"^--?[A-Za-z]")  # the next option, not a value (a PEM key's "-----BEGIN" is a value)
_HEADER = re.compile(r"^([A-Za-z][\w\-]*):\s*(\S.*)$", re.S)  # curl -H "Authorization: Bearer ..."
_USER_OPTIONS = frozenset(("-u", "--user", "-U", "--proxy-user"))  # user:password (curl, wget, smbclient user%pw)
_MYSQL = frozenset(("mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mysqlpump",
                    "mysqlbinlog", "mysqlslap", "mariadb", "mariadb-dump", "mariadb-admin", "mariadb-import",
                    "mariadb-show", "mariadb-check", "mariadb-binlog", "mariadb-slap"))
# programs whose short option takes a password, separate or attached
_PASSWORD_FLAG = {"sshpass": "-p", "redis-cli": "-a", "mongo": "-p", "mongosh": "-p", "mongodump": "-p",
                  "mongorestore": "-p", "mongoexport": "-p", "mongoimport": "-p"}
_PROGRAMS = _MYSQL | frozenset(_PASSWORD_FLAG) | frozenset(("curl",))

# an argument's words (quoted parts kept whole), for scripts and inline configs
_TOKEN = re.compile(r"""(?:[^\s"']|"(?:[^"\\]|\\.)*"?|'[^']*'?)+""")
_URL_USERINFO = re.compile(r"\b([a-zA-Z][\w+.\-]*)://([^/?#\s\"']*)@")  # to the last @: p@ss@host
_KV_NAME = re.compile(r"(?<![\w.\-])(-{0,2}[A-Za-z_][\w.\-]*)=")
_KV_VALUE = re.compile(r""""[^"]*"|'[^']*'|[^\s&;,#"')}\]]+""")
_JSON_TEXT = re.compile(r"""(["'])([^"'\\\n]{1,200})\1(\s*:\s*)("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s,}\]{\["']+)""")
_HEADER_TEXT = re.compile(r"(?i)(?<![\w\-])((?:[\w\-]*-)?(?:authorization|cookie))([ \t]*:[ \t]*)([^\"'\r\n]+)")
_COLON_TEXT = re.compile(r"""(?<![\w\-./])([A-Za-z][\w.\-]*)([ \t]*:[ \t]*)([^\s"',;)}\]/][^\s"',;)}\]]*)""")
_OPENSSL_PASS = re.compile(r"(?<![\w\-])pass:(?!\*\*\*)\S+")
_BEARER = re.compile(r"\b([Bb]earer[ \t]+)(?!\*\*\*)[\w\-.~+/]+=*")
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"sk-[A-Za-z0-9_\-]{20,}"  # OpenAI (sk-..., sk-proj-..., sk-svcacct-...), Anthropic (sk-ant-...)
    r"|(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"  # GitHub
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"  # AWS access key ids
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|AIza[A-Za-z0-9_\-]{35}"  # Google API keys
    r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe secret and restricted keys
    r"|glpat-[A-Za-z0-9_\-]{20,}"  # GitLab
    r"|eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"  # JWTs
    r")"
    r"|-----BEGIN[A-Z ]*PRIVATE KEY-----(?:(?!-----END)[\s\S])*(?:-----END[A-Z ]*PRIVATE KEY-----)?")  # PEM


def says_secret(name: str) -> bool:
    words = [w.lower() for w in _WORDS.findall(name)]
    if not words or words[-1] in _LOCATION_WORDS:
        return False
    last = words[-1]
    if last == "pass" or (last == "pwd" and len(words) > 1):  # DB_PASS, MYSQL_PWD; not PWD, the working directory
        return True
    if len(words) == 1 and last.endswith("pass") and last not in _NOT_PASSWORDS:  # --dbpass, ROOTPASS
        return True
    return any(w in SECRET_WORDS or w.endswith(_SECRET_ENDINGS) for w in words)


def _user_value(value: str) -> str:
    """user:password (or smbclient's user%password) with the password
    hidden; user:group ids (1000:1000) and plain user names stay."""
    for sep in (":", "%"):
        user, found, rest = value.partition(sep)
        if found:
            return value if rest.isdigit() or not rest else user + sep + REDACTED
    return value


def _header(text: str) -> Optional[str]:
    m = _HEADER.match(text)
    return text[:m.start(2)] + REDACTED if m and says_secret(m.group(1)) else None


def _redact_words(words: Iterable[str]) -> List[Optional[str]]:
    """Rule 1 over a list of words; None where a word is left to the text rules."""
    out: List[Optional[str]] = []
    pending: Optional[Callable[[str], str]] = None  # what the previous word says of this one
    program = ""
    prev = ""
    for w in words:
        prev, before = w, prev
        if _SCRIPT_FLAG.match(before) and any(c.isspace() for c in w):
            out.append(None)  # a script (sh -c "PGPASSWORD=x; psql ..."): its words, by rule 2
            pending = None
            continue
        if pending is not None and not _OPTION.match(w):
            out.append(pending(w))
            pending = None
            continue
        pending = None
        base = w.rsplit("/", 1)[-1]
        if base in _PROGRAMS:
            program = base
            out.append(None)
            continue
        flag = _PASSWORD_FLAG.get(program)
        if w[:1] == "-" and w[1:2] != "-" and len(w) > 2:  # an attached short option: -pX, -uX, -HX, -bX
            short, value = w[:2], w[2:]
            if (short == "-p" and program in _MYSQL) or short == flag:
                out.append(short + REDACTED)
                program = ""  # a program takes its password once: sshpass -p X ssh -p 22 ...
                continue
            if short in ("-u", "-U"):
                out.append(short + _user_value(value))
                continue
            if short == "-H":
                h = _header(value)
                out.append(short + h if h else None)
                continue
            if short == "-b" and program == "curl":
                out.append(short + _cookie(value))
                continue
        m = _ASSIGN.match(w)
        if m:
            name = m.group(1)
            if says_secret(name):
                out.append(name + "=" + REDACTED)
            elif name in _USER_OPTIONS:
                out.append(name + "=" + _user_value(m.group(2)))
            else:
                out.append(None)
            continue
        m = _NAME.match(w)
        if m and m.group(1) and says_secret(m.group(2)):
            out.append(w)
            pending = _hide
            continue
        if w in _USER_OPTIONS:
            out.append(w)
            pending = _user_value
            continue
        if flag and w == flag:
            out.append(w)
            pending = _hide
            program = ""
            continue
        if program == "curl" and w in ("-b", "--cookie"):
            out.append(w)
            pending = _cookie
            continue
        out.append(_header(w))
    return out


def _hide(_value: str) -> str:
    return REDACTED


def _cookie(value: str) -> str:
    return REDACTED if "=" in value else value  # curl -b NAME=VALUE; without "=" it names a file


def _unquoted(token: str) -> Tuple[str, str]:
    if len(token) >= 2 and token[0] in "\"'" and token[-1] == token[0]:
        return token[0], token[1:-1]
    return "", token


def _redact_script(text: str) -> str:
    """Rule 2: rule 1 over the words of one argument, quoting kept, and
    the shell's separators after a word (TOKEN=x; next) kept too."""
    spans = []
    for m in _TOKEN.finditer(text):
        word = m.group(0)
        bare = word.rstrip(_SEPARATORS)
        spans.append((m.start(), m.start() + len(bare), _unquoted(bare)))
    done = _redact_words([inner for _, _, (_, inner) in spans])
    if not any(d is not None for d in done):
        return text
    parts: List[str] = []
    at = 0
    for (start, end, (quote, inner)), d in zip(spans, done):
        if d is not None and d != inner:
            parts.append(text[at:start] + quote + d + quote)
            at = end
    return "".join(parts) + text[at:]


_SEPARATORS = ";&|)"  # what ends a word of a shell script without a space: TOKEN=x; echo
_SCRIPT_FLAG = re.compile(r"^-[a-z]*c$")  # sh -c, bash -lc, sh -ec: the next argument is a script


def _userinfo(m: "re.Match[str]") -> str:
    scheme, info = m.group(1), m.group(2)
    user, colon, _ = info.partition(":")
    if colon:
        return "%s://%s:%s@" % (scheme, user, REDACTED)
    if info and scheme.lower() in ("http", "https"):  # https://TOKEN@github.com, Sentry DSNs
        return "%s://%s@" % (scheme, REDACTED)
    return m.group(0)


def _kv_text(text: str) -> str:
    """NAME=VALUE pairs anywhere (query strings, a=1,b=2 lists, libpq's
    "host=h password=p"), also inside another pair's value
    (--from-literal=password=x)."""
    parts: List[str] = []
    at = 0
    for m in _KV_NAME.finditer(text):
        if m.start() < at or not says_secret(m.group(1)):
            continue
        v = _KV_VALUE.match(text, m.end())
        if v:
            parts.append(text[at:m.end()] + REDACTED)
            at = v.end()
    return "".join(parts) + text[at:] if parts else text


def _json(m: "re.Match[str]") -> str:
    if not says_secret(m.group(2)):
        return m.group(0)
    v = m.group(4)
    q = v[0] if v[0] in "\"'" else ""
    return m.group(1) + m.group(2) + m.group(1) + m.group(3) + q + REDACTED + q


def _colon(m: "re.Match[str]") -> str:
    return m.group(1) + m.group(2) + REDACTED if says_secret(m.group(1)) else m.group(0)


def _redact_text(text: str) -> str:
    """Rule 3."""
    if "://" in text:
        text = _URL_USERINFO.sub(_userinfo, text)
    if "=" in text:
        text = _kv_text(text)
    if ":" in text:
        text = _HEADER_TEXT.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
        text = _JSON_TEXT.sub(_json, text)
        text = _COLON_TEXT.sub(_colon, text)
        text = _OPENSSL_PASS.sub("pass:" + REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    return _TOKEN_SHAPES.sub(REDACTED, text)


_CACHED_LENGTH = 8192  # longer command lines are not kept in the cache


@functools.lru_cache(maxsize=256)
def _redact_cached(args: Tuple[str, ...]) -> Tuple[str, ...]:
    out = []
    for arg, done in zip(args, _redact_words(args)):
        if done is None:
            done = _redact_script(arg) if any(c.isspace() for c in arg) else arg
        out.append(done if done == REDACTED else _redact_text(done))
    return tuple(out)


def redact_command_line(args: Iterable[Any]) -> List[str]:
    """args with secrets replaced by *** and their names kept (the rules
    above): "--api-key ***", "HF_TOKEN=***", "Authorization: ***",
    "postgres://me:***@db", "mysql -p***", '{"password": "***"}'. Runs
    once per new process (a command line is read once); the same command
    line (a pool of workers) is redacted once."""
    words = tuple(str(a) for a in args)
    if sum(len(a) for a in words) > _CACHED_LENGTH:
        return list(_redact_cached.__wrapped__(words))
    return list(_redact_cached(words))


def peak_rss(pid: int, proc_root: str = "/proc") -> Optional[int]:
    """The process's peak resident memory (VmHWM) in bytes, or None."""
    try:
        with open("%s/%d/status" % (proc_root, pid), "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class ProcessTree:
    """The workload's processes: the root and its descendants."""

    def __init__(self, root_pid_fn: Callable[[], Optional[int]]) -> None:
        self.root_pid_fn = root_pid_fn
        self.procs: Dict[int, psutil.Process] = {}  # pid -> psutil.Process (kept so cpu_percent has a baseline)

    def refresh(self) -> List[psutil.Process]:
        root = self.root_pid_fn()
        if root is None:
            return []
        try:
            rp = self.procs.get(root) or psutil.Process(root)
            found = [rp] + rp.children(recursive=True)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            found = []
        alive = {}
        for p in found:
            alive[p.pid] = self.procs.get(p.pid) or p
        self.procs = alive
        return list(alive.values())

    def pids(self) -> List[int]:
        return sorted(self.procs)


class HostSource(Source):
    name = "host"
    interval = 1.0

    def __init__(self, store: Any, root_pid_fn: Callable[[], Optional[int]], clock: Any = None) -> None:
        self.store = store
        self.tree = ProcessTree(root_pid_fn)
        self.cmdline_read: Set[int] = set()  # pids whose command line is in their resource
        self.cpu_count = psutil.cpu_count() or os.cpu_count() or 1
        self.cpu_totals = ProcessCpuTotals()  # process_cpu_time_nanoseconds over the tree

    def setup(self) -> None:
        try:
            psutil.cpu_percent(interval=None)  # baseline for the first reading
        except Exception as e:
            raise SourceUnavailable("psutil cannot read host CPU: %s" % e)

    def poll(self) -> None:
        s = self.store
        ts = s.clock()
        # the host's share (100 = every core busy: what its name and /metrics'
        # _ratio say), and the same in busy cores beside it (2.5 = two and a half)
        pct = psutil.cpu_percent(interval=None)
        s.set_gauge("host_cpu_usage_percent", {}, round(pct, 2), ts)
        s.set_gauge("host_cpu_busy_cores", {}, round(pct * self.cpu_count / 100.0, 3), ts)
        vm = psutil.virtual_memory()
        s.set_gauge("host_memory_usage_bytes", {}, int(vm.total - vm.available), ts)
        s.set_gauge("host_memory_total_bytes", {}, int(vm.total), ts)
        s.set_gauge("host_memory_available_bytes", {}, int(vm.available), ts)
        root = self.tree.root_pid_fn()
        for p in self.tree.refresh():
            # a process that began to exit has freed (or is freeing) its
            # memory: its last readings are the ones from before, so none is
            # taken from then on, and one taken while it began is dropped
            if procfs.exiting(p.pid):
                continue
            try:
                with p.oneshot():
                    cpu = p.cpu_percent(interval=None)
                    times = p.cpu_times()
                    started = p.create_time()
                    mem = p.memory_info()
                    ppid = p.ppid()
                    # a command line does not change: read it once per process
                    cmd = p.cmdline() if p.pid not in self.cmdline_read else None
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
            peak = peak_rss(p.pid)
            if procfs.exiting(p.pid):
                continue
            tags = {"process.pid": str(p.pid)}
            s.set_gauge("process_cpu_usage_percent", tags, round(cpu, 2), ts)
            # its cumulative twin: the process's own user + system time
            # (children it reaped are counted as themselves, while alive)
            cpu_ns = int(round((times.user + times.system) * 1e9))
            s.set_counter("process_cpu_time_nanoseconds", tags, cpu_ns, ts)
            self.cpu_totals.update(p.pid, started, cpu_ns)
            s.set_gauge("process_memory_usage_bytes", tags, int(mem.rss), ts)
            s.set_gauge("process_memory_virtual_bytes", tags, int(mem.vms), ts)
            if peak is not None:
                s.set_gauge("process_memory_peak_bytes", tags, peak, ts)
            rtags = {"process.pid": str(p.pid), "process.root_pid": str(root)}
            attrs = {"process.parent_pid": str(ppid)}
            if cmd is not None:
                attrs["process.command_line"] = " ".join(redact_command_line(cmd))
                self.cmdline_read.add(p.pid)
            s.set_resource("process", rtags, attrs, ts)
        if root is not None:
            self.cpu_totals.retire(set(self.tree.procs))
            # raised, never set back: the supervisor's exact figure at the workload's exit may be in already
            s.raise_counter("process_cpu_time_nanoseconds", {"process.root_pid": str(root), "scope": "process_tree"},
                          self.cpu_totals.total(), ts)
