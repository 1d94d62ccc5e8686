#!/usr/bin/env python3
"""Dashboard and report response times with 10,000 records (BENCHMARKS.md, "Dashboard and report").

Starts tokentap-mock and tokentap (ring_size 10,000) on free ports, sends N short streamed requests
through the proxy (8 at a time), waits until the admin API holds all N records, then times:
the dashboard page, a list page (100 rows), the list filtered by text, the summary (three
groupings), one request, and `tokentap report` over the records file.

    cargo build --release -p tokentap -p tokentap-mock --bin tokentap --bin tokentap-mock
    python3 scripts/bench-dashboard.py --bin-dir target/release --requests 10000
"""
import argparse, concurrent.futures, http.client, json, os, re, statistics, subprocess, sys, tempfile, time

def start(cmd, pattern):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    found = {}
    for line in proc.stdout:
        for key, rx in pattern.items():
            m = re.search(rx, line)
            if m:
                found[key] = m.group(1)
        if len(found) == len(pattern):
            return proc, found
    sys.exit(f"{cmd[0]} exited before printing its addresses")

def get(addr, path):
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    t = time.perf_counter()
    conn.request("GET", path)
    resp = conn.getresponse()
    body = resp.read()
    elapsed = (time.perf_counter() - t) * 1000
    conn.close()
    return resp.status, body, elapsed

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default="target/release")
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="tokentap-bench-")
    config = os.path.join(data, "tokentap.toml")
    with open(config, "w") as f:
        f.write("[store]\nring_size = 20000\n[slo]\nttft_answer_ms = 50\ntpot_ms = 5\n")
    mock, m = start([f"{args.bin_dir}/tokentap-mock", "--listen", "127.0.0.1:0", "--ttft-ms", "0", "--itl-ms", "0", "--tokens", "30"],
                    {"url": r"listening on http://([0-9.:]+)"})
    tt, t = start([f"{args.bin_dir}/tokentap", "serve", "--upstream", f"http://{m['url']}", "--listen", "127.0.0.1:0",
                   "--admin-listen", "127.0.0.1:0", "--data-dir", data, "--config", config],
                  {"proxy": r"tokentap listening on http://([0-9.:]+)", "admin": r"admin API on http://([0-9.:]+)"})
    try:
        body = json.dumps({"model": "mock-gpt", "stream": True, "messages": [{"role": "user", "content": "hello"}]})
        def one(i):
            host, port = t["proxy"].rsplit(":", 1)
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            model = ["mock-a", "mock-b", "mock-c"][i % 3]
            conn.request("POST", "/v1/chat/completions", body.replace("mock-gpt", model),
                         {"content-type": "application/json", "x-mock-tokens": str(5 + i % 40)})
            conn.getresponse().read()
            conn.close()
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(args.requests)))
        load_s = time.perf_counter() - t0
        # Records are written by the finalize worker after each response: long-poll the count.
        while True:
            status, b, _ = get(t["admin"], "/_tokentap/api/list?limit=1")
            total = json.loads(b)["total"]
            if total >= args.requests:
                break
            time.sleep(0.2)
        first_id = json.loads(get(t["admin"], "/_tokentap/api/list?limit=1")[1])["rows"][0]["request_id"]
        cases = [
            ("dashboard page (index.html)", "/_tokentap/"),
            ("list, first page (100 rows)", "/_tokentap/api/list?limit=100"),
            ("list, page 50 (offset 5000)", "/_tokentap/api/list?limit=100&offset=5000"),
            ("list, text filter", "/_tokentap/api/list?limit=100&q=mock-b"),
            ("summary, all, no grouping", "/_tokentap/api/summary?window=all&group_by="),
            ("summary, all, by route+model", "/_tokentap/api/summary?window=all&group_by=route,model"),
            ("summary, all, by route+model+concurrency", "/_tokentap/api/summary?window=all&group_by=route,model,concurrency"),
            ("one request (full record)", f"/_tokentap/api/requests/{first_id}"),
        ]
        print(f"{total} records in memory; load took {load_s:.1f} s\n")
        print("| endpoint | response bytes | p50 ms | max ms |\n|---|---:|---:|---:|")
        for name, path in cases:
            times, size = [], 0
            for _ in range(args.repeat):
                status, b, ms = get(t["admin"], path)
                assert status == 200, (path, status, b[:200])
                times.append(ms)
                size = len(b)
            print(f"| {name} | {size:,} | {statistics.median(times):.1f} | {max(times):.1f} |")
        times = []
        for _ in range(3):
            t1 = time.perf_counter()
            subprocess.run([f"{args.bin_dir}/tokentap", "report", "--data-dir", data, "--config", config,
                            "--group-by", "route,model"], check=True, stdout=subprocess.DEVNULL)
            times.append((time.perf_counter() - t1) * 1000)
        size = sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data) if f.endswith(".jsonl"))
        print(f"| `tokentap report --group-by route,model` over records.jsonl ({size / 1e6:.1f} MB) | – | {statistics.median(times):.0f} | {max(times):.0f} |")
    finally:
        tt.terminate(); mock.terminate()
        tt.wait(); mock.wait()

if __name__ == "__main__":
    main()
