"""graphsignal-export: a /signals payload as files other tools open.

  stacks     the payload's profiles as stacks with values (GPU time by
             device, kind, category and kernel; NVTX ranges by their
             nesting path; probe profiles flat)
  speedscope speedscope's JSON file format (one profile per process,
             NVTX domain and probe profile)
  folded     folded stacks ("a;b;c 123" lines), as flamegraph.pl and
             inferno read them
  chrome     the Chrome trace event format (Perfetto, chrome://tracing):
             counter tracks from the payload's history block and instant
             events for its errors, one track group per process, GPU,
             the host and the engine

Everything here reads a payload dict (graphsignal.httpfetch.parse_signals
made it) and returns the file's bytes; nothing reads a store, a
socket or a file."""
