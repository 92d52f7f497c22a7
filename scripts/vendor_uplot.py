#!/usr/bin/env python3
"""Vendors uPlot (MIT, a small charting library) into the fleet page:
fetches the pinned release from the npm registry with npm's own client
(`npm pack`), checks the tarball against the registry's integrity hash,
and copies its browser build, stylesheet and license into
graphsignal/fleet/static/vendor/. The copied files are committed; the
page never loads anything from elsewhere at run time.

    python3 scripts/vendor_uplot.py            # the pinned VERSION
    python3 scripts/vendor_uplot.py --version 1.6.32
"""
import argparse
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

VERSION = "1.6.32"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEST = os.path.join(ROOT, "graphsignal", "fleet", "static", "vendor")
FILES = {"package/dist/uPlot.iife.min.js": "uPlot.iife.min.js", "package/dist/uPlot.min.css": "uPlot.min.css",
         "package/LICENSE": "uPlot.LICENSE.txt"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default=VERSION)
    args = ap.parse_args(argv)
    if shutil.which("npm") is None:
        sys.stderr.write("vendor_uplot: npm is needed (apt-get install npm)\n")
        return 1
    work = tempfile.mkdtemp(prefix="gs-uplot-")
    try:
        out = subprocess.run(["npm", "pack", "--json", "uplot@%s" % args.version], cwd=work, capture_output=True,
                             check=True)
        info = json.loads(out.stdout)[0]
        tarball = os.path.join(work, info["filename"])
        algo, _, want = info["integrity"].partition("-")
        with open(tarball, "rb") as f:
            got = base64.b64encode(hashlib.new(algo, f.read()).digest()).decode()
        if got != want:
            sys.stderr.write("vendor_uplot: %s does not match the registry's integrity hash\n" % info["filename"])
            return 1
        os.makedirs(DEST, exist_ok=True)
        with tarfile.open(tarball) as t:
            for member, name in FILES.items():
                data = t.extractfile(member).read()
                with open(os.path.join(DEST, name), "wb") as f:
                    f.write(data)
        with open(os.path.join(DEST, "uPlot.VERSION.txt"), "w") as f:
            f.write("uPlot %s from the npm registry (uplot@%s), %s\n" % (info["version"], info["version"],
                                                                     info["integrity"]))
        print("vendored uPlot %s into %s" % (info["version"], os.path.relpath(DEST, ROOT)))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
