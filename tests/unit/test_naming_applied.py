"""Names are the renderer's, not the data model's: a profile series
renders its frames as they are unless given an `annotate`; the store gives
its profiles graphsignal.naming.annotate, so the payload's kernel frames
carry display_name and category, named once per change of the series
(its JSON is cached), never per request."""
from graphsignal import naming
from graphsignal.sidecar.payload import build_signals
from graphsignal.sidecar.series import Profile
from graphsignal.sidecar.store import MetricStore

SGEMM = "_ZN7cutlass7Kernel2I42cutlass_80_simt_sgemm_128x64_8x5_nn_align1EEvNT_6ParamsE"
KERNELS = "cuda_kernels_nanoseconds"


def test_a_profile_series_knows_no_names():
    p = Profile(KERNELS, {})
    p.add(SGEMM, 10, 1)
    assert p.stats() == {"frames": [{"name": SGEMM, "value": 10, "samples": 1}]}
    assert b"display_name" not in p.to_json()


def test_the_store_names_kernel_frames_once_per_change():
    calls = []

    def counting(metric, frames):
        calls.append(metric)
        return naming.annotate(metric, frames)

    s = MetricStore(annotate=counting)
    s.add_profile(KERNELS, {}, [(SGEMM, 10, 1)])
    s.add_profile("cuda_sync_nanoseconds", {}, [("stream", 5, 1)])
    first = build_signals(s)
    assert b'"display_name":"Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>","category":"gemm"' in first
    assert sorted(calls) == ["cuda_kernels_nanoseconds", "cuda_sync_nanoseconds"]
    for _ in range(3):  # unchanged series: their cached JSON, not named again
        build_signals(s)
    assert len(calls) == 2
    s.add_profile(KERNELS, {}, [(SGEMM, 1, 1)])
    build_signals(s)
    assert calls[2:] == [KERNELS]


def test_a_store_without_names_renders_raw_symbols_only():
    s = MetricStore(annotate=None)
    s.add_profile(KERNELS, {}, [(SGEMM, 10, 1)])
    assert b"display_name" not in build_signals(s)
    named = MetricStore()
    named.add_profile(KERNELS, {}, [(SGEMM, 10, 1)])
    assert b"display_name" in build_signals(named)
