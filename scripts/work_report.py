#!/usr/bin/env python3
"""What a workload did per generated token and per finished request, from
final /signals payloads of engine runs (the engine summary's
work_per_token / work_per_request): one JSON line per payload.

    python3 scripts/work_report.py signals_graph_c1.json signals_node_c4.json
"""
import json
import sys


def main(paths):
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        e = doc.get("engine") or {}
        if "work_per_token" not in e:  # a payload from before the summary had it: recomputed from its series
            from graphsignal import engine_summary

            e = engine_summary.summarize(doc.get("metrics") or []) or {}
        w = e.get("work_per_token") or {}
        copies = w.get("copies") or {}
        line = {"payload": path, "engine": e.get("engine"), "generation_tokens": e.get("generation_tokens_total"),
                "decode_calls": e.get("decode_calls_total"), "per_token": {
                    k: (round(v, 4) if isinstance(v, float) else v) for k, v in w.items() if k != "copies"}}
        line["per_token"]["copies"] = {"%s.%s" % (kind, mem): {k: round(v, 3) if v is not None else None
                                                               for k, v in c.items()}
                                       for kind, mems in copies.items() for mem, c in mems.items()}
        print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
