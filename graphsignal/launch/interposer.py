"""--cuda-trace light: the workload's processes get the CUDA driver
interposer (csrc/interpose, libgraphsignal_interpose.so) through
LD_PRELOAD instead of CUPTI through CUDA_INJECTION64_PATH.

The library needs nothing but libc to load, answers `dlsym` and
`cuGetProcAddress` for the driver calls it counts, and stays inert in a
process that never reaches the driver; under graphsignal-run it sends its
counts to the process's interposer ring (GRAPHSIGNAL_KIND_INTERPOSE).
It is put first in LD_PRELOAD: the user's own preloads stay, after it."""
import logging
import os
from typing import Callable, List, MutableMapping, Optional

from graphsignal.launch.injection import LIB_DIR
from graphsignal.report import Reporter

logger = logging.getLogger("graphsignal")

LIBRARY = "libgraphsignal_interpose.so"
ENV_PRELOAD = "LD_PRELOAD"


def preload_entries(value: Optional[str]) -> List[str]:
    """LD_PRELOAD's entries: ld.so splits it on spaces and colons."""
    return [e for e in (value or "").replace(":", " ").split() if e]


def prepare_interposer(env: MutableMapping[str, str], report: Optional[Callable[[str], None]] = None,
                       lib_dir: str = LIB_DIR) -> Optional[str]:
    """Puts the interposer first in env's LD_PRELOAD. Returns its path, or
    None when this run counts no CUDA activity (said once, through report):
    a build without the library (no C compiler, not x86-64), or a path that
    LD_PRELOAD cannot hold (a space or a colon in it)."""
    path = os.path.join(lib_dir, LIBRARY)
    if not os.path.isfile(path):
        _say(report, "--cuda-trace light: this build of graphsignal has no CUDA interposer (%s; it needs a C "
                     "compiler and x86-64 when graphsignal is installed): CUDA activity is not collected; "
                     "--cuda-trace on collects it through CUPTI" % path)
        return None
    if any(c in path for c in " :\t\n"):
        _say(report, "--cuda-trace light: the CUDA interposer's path %r has a space or a colon, which "
                     "LD_PRELOAD cannot hold: CUDA activity is not collected; install graphsignal under a path "
                     "without them, or use --cuda-trace on" % path)
        return None
    others = [e for e in preload_entries(env.get(ENV_PRELOAD)) if os.path.basename(e) != LIBRARY]
    if others:
        logger.info("graphsignal: %s has %s; the CUDA interposer goes first, and counts the calls that pass "
                    "through it", ENV_PRELOAD, " ".join(others))
    env[ENV_PRELOAD] = " ".join([path] + others)
    logger.info("graphsignal: --cuda-trace light: CUDA counted by %s, without CUPTI", path)
    return path


def _say(report: Optional[Callable[[str], None]], msg: str) -> None:
    """One line for the user and, through report(msg), one entry."""
    Reporter(on_error=report).say(msg, entry=report is not None)
