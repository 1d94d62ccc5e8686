#!/usr/bin/env python3
"""Memory of one response of N one-byte chunks through tokentap (BENCHMARKS.md, "A response of
one-byte chunks").

    python3 scripts/one-byte-chunks.py CHUNKS TOKENTAP_BINARY [CONFIG_TEXT]

A Python upstream on loopback answers `/v1/chat/completions/big` with CHUNKS one-byte chunks of a
chunked body; a client reads the whole answer. tokentap runs with TOKENTAP_TEST_WORKER_DELAY_MS
(env DELAY, default 6000) so that the request's kept pieces are still held when the client is
done. Prints one JSON line: resident growth (KiB) from after the warm-up record to the end of the
answer, health's kept_bytes at that moment, tokentap's CPU time while forwarding.
"""
import os, socket, subprocess, sys, tempfile, threading, time, json, urllib.request

N = int(sys.argv[1]); binary = sys.argv[2]; config_text = sys.argv[3] if len(sys.argv) > 3 else ""

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

up = socket.socket(); up.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); up.bind(("127.0.0.1", 0)); up.listen(16)
body = b"1\r\nx\r\n" * N + b"0\r\n\r\n"
small = b"1\r\nx\r\n" * 10 + b"0\r\n\r\n"
def serve():
    while True:
        c, _ = up.accept()
        data = b""
        while b"\r\n\r\n" not in data:
            data += c.recv(65536)
        head, rest = data.split(b"\r\n\r\n", 1)
        n = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
        while len(rest) < n:
            rest += c.recv(65536)
        big = b"big" in head.split(b"\r\n")[0]
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")
        c.sendall(body if big else small)
        c.close()
threading.Thread(target=serve, daemon=True).start()

d = tempfile.mkdtemp(); port = free_port(); admin = free_port()
cfg = os.path.join(d, "t.toml"); open(cfg, "w").write(config_text)
p = subprocess.Popen([binary, "--upstream", f"http://127.0.0.1:{up.getsockname()[1]}", "--listen", f"127.0.0.1:{port}",
                      "--admin-listen", f"127.0.0.1:{admin}", "--data-dir", d, "--config", cfg],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, TOKENTAP_TEST_WORKER_DELAY_MS=os.environ.get("DELAY", "6000")))
def status():
    out = {}
    for line in open(f"/proc/{p.pid}/status"):
        k, _, v = line.partition(":")
        if k in ("VmHWM", "VmRSS"): out[k] = int(v.split()[0])
    return out
def cpu():
    f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) * 10  # ms (100 Hz ticks), whole process
def request(path):
    for _ in range(200):
        try:
            s = socket.create_connection(("127.0.0.1", port)); break
        except OSError: time.sleep(0.05)
    b = b'{"model":"m","stream":true,"messages":[]}'
    s.sendall(f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {len(b)}\r\nconnection: close\r\n\r\n".encode() + b)
    total = 0
    while True:
        x = s.recv(1 << 20)
        if not x: break
        total += len(x)
    return total
def health():
    return json.load(urllib.request.urlopen(f"http://127.0.0.1:{admin}/_tokentap/api/health"))
request("/v1/chat/completions")
for _ in range(600):
    try:
        if health()["records"]["written"] >= 1: break
    except Exception: pass
    time.sleep(0.1)
time.sleep(0.5)
base = status()
base_cpu = cpu(); t = time.time(); got = request("/v1/chat/completions/big"); el = time.time() - t
time.sleep(0.5)
mid_cpu = cpu(); mid = status(); mid_kept = health()["records"]["kept_bytes"]
# wait for the record to be written
for _ in range(600):
    h = health()
    if h["records"]["written"] >= 2: break
    time.sleep(0.1)
after = status()
print(json.dumps({"chunks": N, "config": config_text.replace("\n", " "), "client_bytes": got, "seconds": round(el, 1), "cpu_ms_while_forwarding": mid_cpu - base_cpu,
                  "hwm_growth_kib": after["VmHWM"] - base["VmHWM"], "forwarding_hwm_growth_kib": mid["VmHWM"] - base["VmHWM"], "rss_mid_growth_kib": mid["VmRSS"] - base["VmRSS"], "base_rss_kib": base["VmRSS"], "rss_after_growth_kib": after["VmRSS"] - base["VmRSS"],
                  "base_hwm_kib": base["VmHWM"], "kept_budget_hits": h["records"]["kept_budget_hits"], "kept_bytes_mid": mid_kept,
                  "written": h["records"]["written"]}))
p.terminate(); p.wait()
