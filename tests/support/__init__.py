"""Helpers the tests share: graphsignal-run runners (gsrun), C builds (cbuild), an HTTP
recorder, a sidecar for top's tests, fakes of NVML, AMD SMI and llama-server, and the C,
CUDA and CUPTI sources the tests compile."""
