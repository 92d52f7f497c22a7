"""graphsignal-export FILE works with no other flag, as py-spy's record
does: a speedscope flame graph by default (or the format -o's name asks
for), to stdout when that is a pipe, to SOURCE's name with the format's
extension when it is a terminal; a file it cannot write is named as the
user gave it, never by the temporary name it writes first."""
import glob
import json
import os
import pty
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "h200", "*.signals.json")))[0]
EXPORT = [sys.executable, "-m", "graphsignal.cli.export"]


def test_a_file_alone_is_a_speedscope_flame_graph_on_stdout():
    r = subprocess.run(EXPORT + [SRC], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"


def test_the_format_follows_the_output_name(tmp_path):
    out = tmp_path / "run.folded"
    r = subprocess.run(EXPORT + [SRC, "-o", str(out)], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    first = out.read_text().splitlines()[0]
    assert ";" in first and first.rsplit(" ", 1)[1].isdigit()  # folded stacks: path;path count
    out = tmp_path / "run.trace.json"
    assert subprocess.run(EXPORT + [SRC, "-o", str(out)], capture_output=True, timeout=60).returncode == 0
    assert "traceEvents" in json.loads(out.read_text())


def test_on_a_terminal_it_writes_the_sources_name_with_the_extension(tmp_path):
    master, slave = pty.openpty()
    try:
        r = subprocess.run(EXPORT + [SRC], stdout=slave, stderr=subprocess.PIPE, cwd=str(tmp_path), timeout=60)
    finally:
        os.close(slave)
        os.close(master)
    want = os.path.basename(SRC)[:-len(".json")] + ".speedscope.json"
    assert r.returncode == 0, r.stderr
    assert os.listdir(str(tmp_path)) == [want]
    assert ("wrote %s" % want) in r.stderr.decode()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_place_is_named_as_the_user_gave_it(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    try:
        r = subprocess.run(EXPORT + [SRC, "-o", str(d / "x.json")], capture_output=True, timeout=60)
    finally:
        d.chmod(0o755)
    err = r.stderr.decode()
    assert r.returncode == 1 and len(err.splitlines()) == 1, err
    assert str(d / "x.json") in err and "Permission denied" in err and ".tmp" not in err, err


def test_a_failed_write_names_the_users_file_not_the_temporary_one(tmp_path):
    # a name the file system takes, whose temporary sibling (".NAME.XXXXXXXX.tmp") is too long: runs as root too
    out = tmp_path / ("r" * 240 + ".json")
    r = subprocess.run(EXPORT + [SRC, "-o", str(out)], capture_output=True, timeout=60)
    err = r.stderr.decode()
    assert r.returncode == 1 and len(err.splitlines()) == 1, err
    assert err.startswith("graphsignal-export: cannot write %s: " % out) and ".tmp" not in err, err
    assert os.listdir(str(tmp_path)) == []
