"""The mainstream installs, tried as a new user would, with the CUDA toolkit
hidden (scripts/nocuda.py): one JSON line per install command with its
wall time and the CUPTI variants the installed graphsignal has.

    python3 scripts/install_matrix.py [--keep DIR]

Each pip row gets a fresh venv; the uv rows share one tool folder (the
second is a reinstall). All rows share one fresh pip and uv cache, so the
first row also pays the downloads. Needs uv on PATH (pip install uv) for
the uv rows; they are skipped with a line otherwise.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import nocuda  # noqa: E402


def variants(site_glob):
    """{'cu12': 'headers ...', ...} from the installed package's lib/."""
    out = {}
    pattern = os.path.join(site_glob, "graphsignal", "lib", "libgraphsignal_cupti_cu*.so.build-info")
    for info in sorted(glob.glob(pattern)):
        with open(info) as f:
            d = json.load(f)
        out["cu%d" % d["major"]] = "%d.%d: %s" % (d["major"], d["minor"], d["headers"])
    return out


def run(cmd, env, log):
    argv, henv = nocuda.wrap(cmd, env)
    t0 = time.monotonic()
    p = subprocess.run(argv, env=henv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    return p.returncode, round(time.monotonic() - t0, 1)


def probes_in_workload(run_exe, env, tmp):
    """How `graphsignal-run python3 probe_import.py` imports graphsignal.probes
    from this install, python3 being a bare venv's (no graphsignal, no
    cffi): the backend's name, or why it failed."""
    bare = os.path.join(tmp, "bare-venv")
    if not os.path.exists(bare):
        subprocess.run([shutil.which("python3") or sys.executable, "-m", "venv", "--without-pip", bare], check=True)
    script = os.path.join(tmp, "probe_import.py")
    with open(script, "w") as f:
        f.write("from graphsignal import probes\nprint(probes.BACKEND)\n")
    e = dict(env, GRAPHSIGNAL_LOG_LEVEL="error", PATH=os.path.join(bare, "bin") + os.pathsep + env["PATH"])
    p = subprocess.run([run_exe, "--listen-port", "0", "python3", script], env=e, capture_output=True, text=True,
                       cwd=tmp, timeout=120)
    return p.stdout.strip() if p.returncode == 0 else "failed: " + (p.stderr.strip().splitlines() or ["?"])[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", help="work folder to keep (default: a temporary one, removed)")
    args = ap.parse_args()
    why = nocuda.available()
    if why:
        print(json.dumps({"skipped": "cannot hide the CUDA toolkit: %s" % why}))
        return 1
    work = args.keep or tempfile.mkdtemp(prefix="graphsignal-matrix-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, PIP_CACHE_DIR=os.path.join(work, "pip-cache"), UV_CACHE_DIR=os.path.join(work, "uv-cache"),
               UV_PYTHON_DOWNLOADS="never", PIP_DISABLE_PIP_VERSION_CHECK="1")
    log = open(os.path.join(work, "install.log"), "w")
    py = shutil.which("python3") or sys.executable

    # the sdist, built from the checkout (needs no headers)
    dist = os.path.join(work, "dist")
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--skip-dependency-check", "--outdir",
                    dist, ROOT], check=True, stdout=log, stderr=subprocess.STDOUT)
    sdist = glob.glob(os.path.join(dist, "graphsignal-*.tar.gz"))[0]

    def pip_row(name, spec, venv=None, extra=()):
        venv = venv or os.path.join(work, name)
        if not os.path.exists(venv):
            subprocess.run([py, "-m", "venv", venv], check=True)
        rc, secs = run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q"] + list(extra) + [spec],
                       env, log)
        site = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))[0]
        row = {"command": "pip install %s%s" % (" ".join(extra) + " " if extra else "", spec), "rc": rc,
               "seconds": secs, "variants": variants(site)}
        row["probes_in_workload"] = probes_in_workload(os.path.join(venv, "bin", "graphsignal-run"), env, work)
        print(json.dumps(row), flush=True)
        return venv

    pip_row("pip-plain", ".")
    venv12 = pip_row("pip-cu12", ".[cu12]")
    pip_row("pip-cu13", ".[cu13]")
    pip_row("pip-cu12", ".[cu12]", venv=venv12, extra=("--force-reinstall", "--no-deps"))
    pip_row("pip-sdist", sdist)

    uv = shutil.which("uv")
    if not uv:
        print(json.dumps({"command": "uv tool install '.[cu12]'", "skipped": "no uv on PATH (pip install uv)"}))
        return 0
    tools, bins = os.path.join(work, "uv-tools"), os.path.join(work, "uv-bin")
    uenv = dict(env, UV_TOOL_DIR=tools, UV_TOOL_BIN_DIR=bins)
    for extra in ((), ("--reinstall",)):
        rc, secs = run([uv, "tool", "install"] + list(extra) + [".[cu12]"], uenv, log)
        site = glob.glob(os.path.join(tools, "graphsignal", "lib", "python3*", "site-packages"))
        row = {"command": "uv tool install %s'.[cu12]'" % (" ".join(extra) + " " if extra else ""), "rc": rc,
               "seconds": secs, "variants": variants(site[0]) if site else {}}
        row["probes_in_workload"] = probes_in_workload(os.path.join(bins, "graphsignal-run"), uenv, work)
        print(json.dumps(row), flush=True)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
