#!/usr/bin/env python3
"""Compares AIPerf's per-request metrics with tokentap's records of the same requests (joined by the
X-Request-ID header AIPerf sends), and fails when they disagree by more than the tolerances below.

    python3 scripts/agree_real_llm.py AIPERF/profile_export.jsonl DATA_DIR/records.jsonl

Both count output tokens with o200k_base and both exclude the first content chunk from the rate, so
the two numbers are defined alike; they differ by where each clock is read:
- TTFT: AIPerf starts at its own send and stops at its parse of the first content event; tokentap
  starts when the request head reaches it and stops at the upstream arrival of that event. AIPerf's
  is longer by the client-to-proxy hop and its own event-loop latency, never shorter.
- output tok/s: AIPerf divides by (final response - first token), where the final response is the
  usage event after the last answer token; tokentap by (last answer token - first answer token).
"""

import json
import statistics
import sys
import time

# Stated tolerances (the measured agreement is printed next to them). Measured on a 2-core machine
# under load (20 requests, 64 in / 64 out): TTFT +1.2 to +25.7 ms (median +4.5), output tok/s
# -0.14% to +1.17% (median 0.00%).
TTFT_MAX_EXTRA_MS = 50.0  # AIPerf's TTFT minus tokentap's: in [-1 ms, this]
TPS_MAX_REL = 0.03  # |AIPerf's output tok/s / tokentap's - 1|


def load_records(path, want_ids, timeout_s=10.0):
    """The last line per request id of tokentap's journal, once every id in want_ids is there."""
    deadline = time.monotonic() + timeout_s
    while True:
        by_id = {}
        with open(path, encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                xid = next((v for k, v in rec.get("request_headers", []) if k.lower() == "x-request-id"), None)
                if xid:
                    by_id[xid] = rec
        if want_ids <= by_id.keys() or time.monotonic() > deadline:
            return by_id
        time.sleep(0.2)  # the record worker writes a record just after its stream ends


def main():
    aiperf_path, records_path = sys.argv[1], sys.argv[2]
    runs = []
    with open(aiperf_path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row["metadata"].get("benchmark_phase") != "profiling":
                continue
            runs.append(row)
    ids = {r["metadata"]["x_request_id"] for r in runs}
    records = load_records(records_path, ids)
    missing = ids - records.keys()
    if missing:
        sys.exit(f"no tokentap record for {len(missing)} of {len(ids)} AIPerf requests")

    ttft_extra, tps_rel = [], []
    print(
        f"{'request':8} {'ttft aiperf':>12} {'ttft tokentap':>14} {'diff':>8}   {'tok/s aiperf':>12} {'tok/s tokentap':>15} {'diff':>7}"
        f"   {'prompt cache':>12} {'server prefill':>14} {'network+proxy':>13}"
    )
    for i, r in enumerate(runs):
        m = r["metrics"]
        rec = records[r["metadata"]["x_request_id"]]
        tm = rec["analysis"]["metrics"]
        a_ttft, t_ttft = m["time_to_first_token"]["value"], tm["ttft_answer_ms"]
        a_tps, t_tps = m["output_token_throughput_per_user"]["value"], tm["output_tps"]
        ttft_extra.append(a_ttft - t_ttft)
        tps_rel.append(a_tps / t_tps - 1)
        cache = rec.get("conditions", {}).get("prompt_cache") or "unknown"
        prefill = (rec.get("server") or {}).get("prefill_ms")
        split = (rec.get("server_split") or {}).get("network_and_proxy_ms")
        shown = lambda v: f"{v:.1f}" if isinstance(v, (int, float)) else "-"
        print(
            f"{i:<8} {a_ttft:12.1f} {t_ttft:14.1f} {a_ttft - t_ttft:+8.1f}   {a_tps:12.2f} {t_tps:15.2f} {100 * (a_tps / t_tps - 1):+6.2f}%"
            f"   {cache:>12} {shown(prefill):>14} {shown(split):>13}"
        )

    print()
    print(
        f"TTFT: AIPerf - tokentap = median {statistics.median(ttft_extra):+.1f} ms, "
        f"range [{min(ttft_extra):+.1f}, {max(ttft_extra):+.1f}] ms (tolerance [-1, +{TTFT_MAX_EXTRA_MS:.0f}] ms)"
    )
    print(
        f"output tok/s: AIPerf / tokentap - 1 = median {100 * statistics.median(tps_rel):+.2f}%, "
        f"range [{100 * min(tps_rel):+.2f}, {100 * max(tps_rel):+.2f}]% (tolerance ±{100 * TPS_MAX_REL:.0f}%)"
    )
    ok = all(-1.0 <= d <= TTFT_MAX_EXTRA_MS for d in ttft_extra) and all(abs(d) <= TPS_MAX_REL for d in tps_rel)
    print(f"{len(runs)} requests: {'agree' if ok else 'DISAGREE'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
