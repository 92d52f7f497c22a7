"""What a person reads beside the data: kernel names and categories.

The data model (graphsignal.sidecar.series, graphsignal.windowmath) keeps
a kernel frame's raw symbol in `name` and knows nothing of these; the code
that renders a document applies annotate() to its kernel profiles' frames:
the sidecar's store when it encodes a series for /signals and uploads
(graphsignal.sidecar.store), the window documents of the sidecar and of
graphsignal-server (graphsignal.sidecar.windows, graphsignal.fleet.windows).
graphsignal-top and graphsignal-diff describe symbols for their own
screens through describe() and NAMES.

  kernels    demangling, display names, the per-symbol cache
  taxonomy   categories of kernels
"""
from graphsignal.naming.kernels import KERNEL_PROFILES, NAMES, Name, Names, annotate, describe
from graphsignal.naming.taxonomy import CATEGORIES, category

__all__ = ["KERNEL_PROFILES", "NAMES", "Name", "Names", "annotate", "describe", "CATEGORIES", "category"]
