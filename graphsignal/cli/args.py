"""How every command reads its command line, so they all behave alike:
argparse without abbreviations (allow_abbrev=False: a shortened option is
unknown, never a guess), -h/--help and -V/--version on stdout with exit
status 0, and a usage error as one line on stderr,

    graphsignal-run: error: --listen-port expects a port number, got 'http'

with exit status 2. A command's parse() raises UsageError (it never
exits, so tests and other callers get the message); its main() says it
with usage_error(). Bounded numbers and choices are argparse types here
(number, choice); ports are config.BIND_PORT / config.CONNECT_PORT
(port)."""
import argparse
import re
import sys


class UsageError(Exception):
    """A command line that cannot be used; the message is one line."""


class Parser(argparse.ArgumentParser):
    """argparse as the commands use it (see the module docstring). Adds
    -h/--help and -V/--version as switches (dest show_help, show_version):
    the command prints them after parsing, so a parse never exits."""

    def __init__(self, prog, unknown_hint="see --help", **kw):
        self.unknown_hint = unknown_hint
        kw.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        argparse.ArgumentParser.__init__(self, prog=prog, allow_abbrev=False, add_help=False, **kw)
        self.add_argument("-h", "--help", dest="show_help", action="store_true", help="show this help and exit")
        self.add_argument("-V", "--version", dest="show_version", action="store_true",
                          help="print the version and exit")

    def error(self, message):
        raise UsageError(_one_line(message))

    def parse(self, argv, intermixed=False):
        """The namespace of argv; raises UsageError. Unknown options and
        arguments are refused by name."""
        if intermixed:
            ns, extra = self.parse_known_intermixed_args(argv)
        else:
            ns, extra = self.parse_known_args(argv)
        if extra:
            self.error(unknown(extra[0], self.unknown_hint))
        return ns


def unknown(arg, hint="see --help"):
    """The message for an argument no option takes."""
    if arg.startswith("-") and len(arg) > 1:
        return "unknown option %s (%s)" % (arg.split("=", 1)[0], hint)
    return "unexpected argument %r (%s)" % (arg, hint)


def _one_line(message):
    """argparse's messages in the commands' words: "argument --x: text" ->
    "--x text", "expected one argument" -> "needs a value"; never more
    than one line."""
    m = re.match(r"argument ([^:]+): (.*)$", message, re.S)
    if m:
        names = m.group(1).split("/")
        name = next((n for n in names if n.startswith("--")), names[0])
        text = m.group(2)
        if text.startswith("expected ") and (text.endswith(" argument") or text.endswith(" arguments")):
            text = "needs a value" if text == "expected one argument" else "needs " + text[len("expected "):]
        message = "%s %s" % (name, text.replace("not allowed with argument ", "cannot be given with "))
    return " ".join(message.split())


def usage_error(prog, error):
    """One line on stderr; the exit status of a usage error."""
    sys.stderr.write("%s: error: %s\n" % (prog, _one_line(str(error))))
    sys.stderr.flush()
    return 2


def start(prog, parse, help_text, argv):
    """A command's configuration from its arguments (None: sys.argv[1:]),
    with -h and -V answered: (config, None) to run with, else (None, the
    exit status: 2 after a usage error's line, 0 after the help (the text
    help_text() returns) or the version)."""
    try:
        cfg = parse(sys.argv[1:] if argv is None else argv)
    except UsageError as e:
        return None, usage_error(prog, e)
    from graphsignal import __version__

    if help_or_version(cfg, help_text(), "%s %s" % (prog, __version__)):
        return None, 0
    return cfg, None


def help_or_version(cfg, help_text, version_line):
    """Writes the help or the version when cfg asks (show_help,
    show_version); whether it did."""
    if cfg.show_help:
        sys.stdout.write(help_text)
        return True
    if cfg.show_version:
        sys.stdout.write(version_line + "\n")
        return True
    return False


def number(kind, low, high, low_open=False, unit=""):
    """An argparse type: a `kind` (int or float) from `low` to `high`
    (above `low` when low_open); `unit` follows the bounds in the error
    ("seconds")."""
    noun = "a whole number" if kind is int else "a number"
    unit = " " + unit if unit else ""

    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError("expects %s%s, got %r" % (noun, " of" + unit if unit else "", text))
        if v != v or (v <= low if low_open else v < low) or v > high:
            raise argparse.ArgumentTypeError("must be %s %s and at most %s%s, got %s" % (
                "more than" if low_open else "at least", low, high, unit, text))
        return v

    return parse


def choice(choices):
    """An argparse type: one of `choices`, said as "must be one of a|b"."""

    def parse(text):
        if text not in choices:
            raise argparse.ArgumentTypeError("must be one of %s, got %r" % ("|".join(choices), text))
        return text

    return parse


def port(ports):
    """An argparse type: a port of config.BIND_PORT or config.CONNECT_PORT."""

    def parse(text):
        try:
            return ports.parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e))

    return parse


def non_empty(text):
    """An argparse type: any text but the empty one."""
    if not text:
        raise argparse.ArgumentTypeError("needs a non-empty value")
    return text
