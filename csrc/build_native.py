"""Builds graphsignal's native libraries (called by setup.py, or by hand:
python csrc/build_native.py OUT_DIR).

The CUPTI injection library is built once per CUDA major whose CUPTI and
runtime headers can be found; a missing compiler or header set skips that
variant with one clear line and never fails the install.
"""
import os
import sys


def build_all(out_dir, log=print):
    os.makedirs(out_dir, exist_ok=True)
    # setup.py imports this module with csrc/ on sys.path only for the import
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        from cupti_build import build_cupti_variants
    except ImportError as e:
        log("CUPTI injection library: no build script (%s); skipped" % e)
        return []
    return build_cupti_variants(out_dir, log)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    built = build_all(sys.argv[1] if len(sys.argv) > 1 else os.path.join("graphsignal", "lib"))
    print("\n".join(built))
