"""One command-line style for every command (graphsignal.cli.args):
-V/--version and --help on stdout with status 0, a usage error as one
line `PROG: error: ...` with status 2, no abbreviated options, and
graphsignal-run passing everything from its command on to the workload.
Every module of graphsignal.cli with a main() is a command here, so a new
one is held to the same style."""
import os
import subprocess
import sys

import pytest

import graphsignal.cli
from graphsignal import __version__
from graphsignal.cli import args
from support.gsrun import free_port, quiet_env
from support.hostile_http import console_script

CLI_DIR = os.path.dirname(graphsignal.cli.__file__)
COMMANDS = sorted("graphsignal-" + f[:-3] for f in os.listdir(CLI_DIR)
                  if f.endswith(".py") and "\ndef main(" in open(os.path.join(CLI_DIR, f), encoding="utf-8").read())
# an abbreviation of each command's own option: refused, never guessed
ABBREVIATED = {"graphsignal-run": ["--listen-p", "0", "true"], "graphsignal-top": ["--win", "3"],
               "graphsignal-diff": ["--ti", "3", "a", "b"], "graphsignal-server": ["--po", "0"]}


def run(name, *argv, **kw):
    return subprocess.run(console_script(name) + list(argv), capture_output=True, text=True, timeout=60,
                          env=quiet_env(), stdin=subprocess.DEVNULL, **kw)


def test_the_commands_are_the_installed_ones():
    assert {"graphsignal-run", "graphsignal-top", "graphsignal-diff", "graphsignal-server"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_parses_with_the_shared_parser(name):
    mod = __import__("graphsignal.cli." + name.split("-", 1)[1], fromlist=["parser"])
    p = mod.parser()
    assert isinstance(p, args.Parser) and p.allow_abbrev is False


@pytest.mark.parametrize("name", COMMANDS)
@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(name, flag):
    r = run(name, flag)
    assert (r.returncode, r.stderr) == (0, ""), r
    assert r.stdout == "%s %s\n" % (name, __version__)  # every command says its own name


@pytest.mark.parametrize("name", COMMANDS)
def test_help(name):
    r = run(name, "--help")
    assert (r.returncode, r.stderr) == (0, ""), r
    assert r.stdout.startswith("usage: " + name) and "-V, --version" in r.stdout and "-h, --help" in r.stdout
    assert run(name, "-h").stdout == r.stdout


@pytest.mark.parametrize("name", COMMANDS)
@pytest.mark.parametrize("argv,needle", [(["--no-such-option"], "unknown option --no-such-option"),
                                         (["--no-such-option=1"], "unknown option --no-such-option")])
def test_an_unknown_option_is_one_line_and_exit_2(name, argv, needle):
    r = run(name, *argv)
    assert r.returncode == 2 and r.stdout == "", r
    assert r.stderr.startswith(name + ": error: ") and r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr


@pytest.mark.parametrize("name", sorted(ABBREVIATED))
def test_an_abbreviated_option_is_unknown_not_guessed(name):
    argv = ABBREVIATED[name]
    r = run(name, *argv)
    assert r.returncode == 2 and r.stderr == "%s: error: unknown option %s (%s)\n" % (
        name, argv[0], "options go before the command; see --help" if name == "graphsignal-run" else "see --help")


@pytest.mark.parametrize("name,argv,needle", [
    ("graphsignal-run", ["--listen-port"], "--listen-port needs a value"),
    ("graphsignal-run", ["--allow-host", "gs.svc:18259", "true"], "without a port"),
    ("graphsignal-top", ["--window", "0"], "--window must be at least 1 and at most 600 seconds, got 0"),
    ("graphsignal-top", ["--table", "nope"], "--table must be one of kernels|graphs|memory|sync, got 'nope'"),
    ("graphsignal-diff", ["only-one.json"], "give BEFORE AFTER"),
    ("graphsignal-diff", ["a", "b", "--window", "--cumulative"], "--cumulative cannot be given with --window"),
    ("graphsignal-server", ["--workers", "0"], "--workers must be at least 1 and at most 256, got 0"),
    ("graphsignal-server", ["--api-key"], "--api-key needs at least one argument"),
])
def test_a_bad_value_is_one_line_and_exit_2(name, argv, needle):
    r = run(name, *argv)
    assert r.returncode == 2 and r.stdout == "", r
    assert r.stderr.startswith(name + ": error: ") and r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr


def test_run_passes_the_command_and_its_options_through():
    port = str(free_port())
    # the workload's -V is the workload's: python's version, not ours
    r = run("graphsignal-run", "--listen-port", port, sys.executable, "-V")
    assert r.returncode == 0 and r.stdout.strip() == "Python %d.%d.%d" % sys.version_info[:3], r
    show = "import sys; print(sys.argv[1:])"
    r = run("graphsignal-run", "--listen-port", port, "--", sys.executable, "-c", show, "--help", "--", "-V",
            "--listen-port", "1")
    assert r.returncode == 0 and r.stdout == "['--help', '--', '-V', '--listen-port', '1']\n", r
    # after --, even a name that looks like an option is the command
    r = run("graphsignal-run", "--listen-port", port, "--", "--version")
    assert r.returncode == 127 and "--version" in r.stderr and "command not found" in r.stderr, r
    r = run("graphsignal-run", "--")
    assert r.returncode == 2 and r.stderr == "graphsignal-run: error: no command given (usage: graphsignal-run " \
                                             "[OPTIONS] COMMAND [ARGS...])\n"
