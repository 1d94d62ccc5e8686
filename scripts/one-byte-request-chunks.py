#!/usr/bin/env python3
"""Memory of one request body of N one-byte chunks through tokentap (BENCHMARKS.md, "A request
body of one-byte chunks").

    python3 scripts/one-byte-request-chunks.py CHUNKS TOKENTAP_BINARY [CONFIG_TEXT]

One client posts CHUNKS chunks `1\\r\\nx\\r\\n` (chunked, `connection: close`) to a Python upstream
on loopback that reads the whole body before it answers. After one small warm-up request's
record is written, tokentap's peak resident size is reset (`5` into /proc/PID/clear_refs); it is
read again once the client has the answer, while the record worker still holds the request
(TOKENTAP_TEST_WORKER_DELAY_MS, env DELAY, default 6000), with health's kept_bytes at that moment
and tokentap's CPU time while forwarding. Prints one JSON line; `byte_exact` says whether the
upstream received exactly the bytes the client sent.
"""
import json, os, socket, subprocess, sys, tempfile, threading, time, urllib.request

N = int(sys.argv[1]); binary = sys.argv[2]; config_text = sys.argv[3] if len(sys.argv) > 3 else ""
BODY = b"1\r\nx\r\n" * N + b"0\r\n\r\n"

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

up = socket.socket(); up.bind(("127.0.0.1", 0)); up.listen(16)
received = {}
def serve():
    while True:
        c, _ = up.accept()
        data = b""
        while b"\r\n\r\n" not in data:
            data += c.recv(65536)
        head, rest = data.split(b"\r\n\r\n", 1)
        parts = [rest]; tail = rest[-5:]
        while tail != b"0\r\n\r\n":
            x = c.recv(65536)
            if not x: break
            parts.append(x); tail = (tail + x)[-5:]
        received[head.split(b" ")[1].decode()] = b"".join(parts)
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
        c.close()
threading.Thread(target=serve, daemon=True).start()

d = tempfile.mkdtemp(); port = free_port(); admin = free_port()
cfg = os.path.join(d, "t.toml"); open(cfg, "w").write(config_text)
p = subprocess.Popen([binary, "--upstream", f"http://127.0.0.1:{up.getsockname()[1]}", "--listen", f"127.0.0.1:{port}",
                      "--admin-listen", f"127.0.0.1:{admin}", "--data-dir", d, "--config", cfg],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     env=dict(os.environ, TOKENTAP_TEST_WORKER_DELAY_MS=os.environ.get("DELAY", "6000")))
def kib(field):
    for line in open(f"/proc/{p.pid}/status"):
        if line.startswith(field + ":"): return int(line.split()[1])
def cpu_ms():
    f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) * 10  # 100 Hz ticks
def health():
    return json.load(urllib.request.urlopen(f"http://127.0.0.1:{admin}/_tokentap/api/health"))
def post(path, body):
    for _ in range(600):
        try:
            s = socket.create_connection(("127.0.0.1", port)); break
        except OSError: time.sleep(0.05)
    s.sendall(f"POST {path} HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".encode() + body)
    got = b""
    while True:
        x = s.recv(1 << 20)
        if not x: break
        got += x
    assert got.startswith(b"HTTP/1.1 200"), got[:200]

post("/warm", b"1\r\nx\r\n" * 10 + b"0\r\n\r\n")
for _ in range(600):
    try:
        if health()["records"]["written"] >= 1: break
    except OSError: pass
    time.sleep(0.1)
time.sleep(0.5)
open(f"/proc/{p.pid}/clear_refs", "w").write("5")
base_rss = kib("VmRSS"); base_cpu = cpu_ms(); t = time.time()
post("/big", BODY)
seconds = time.time() - t; cpu = cpu_ms() - base_cpu
peak = kib("VmHWM"); rss = kib("VmRSS"); h = health()["records"]
print(json.dumps(dict(chunks=N, config=config_text, base_rss_kib=base_rss, peak_growth_kib=peak - base_rss,
                      rss_growth_kib=rss - base_rss, kept_bytes=h["kept_bytes"], kept_budget_hits=h["kept_budget_hits"],
                      cpu_ms_while_forwarding=cpu, seconds=round(seconds, 2), byte_exact=received.get("/big") == BODY)))
p.terminate(); p.wait()
