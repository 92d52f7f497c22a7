"""What the commands share in reading their command lines: bounded numbers
for argparse (graphsignal-top, graphsignal-diff) and the error-and-exit of
the hand-written parsers (graphsignal-run, graphsignal-server). Ports are
config.BIND_PORT / config.CONNECT_PORT."""
import argparse
import sys


def number(kind, low, high, what, low_open=False):
    """An argparse type: a `kind` (int or float) from `low` to `high`
    (above `low` when low_open); `what` names it in the error."""
    noun = "a whole number" if kind is int else "a number"

    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError("not %s of %s: %r" % (noun, what, text))
        if (v <= low if low_open else v < low) or v > high:
            raise argparse.ArgumentTypeError("%s must be %s %s and at most %s, got %s" % (
                what, "more than" if low_open else "at least", low, high, text))
        return v

    return parse


def usage_error(prog, error):
    """One line on stderr; the exit status of a usage error."""
    sys.stderr.write("%s: error: %s\n" % (prog, error))
    return 2


def help_or_version(cfg, usage, version_line):
    """Writes the help or the version when asked; whether it did."""
    if cfg.show_help:
        sys.stdout.write(usage)
        return True
    if cfg.show_version:
        sys.stdout.write(version_line + "\n")
        return True
    return False
