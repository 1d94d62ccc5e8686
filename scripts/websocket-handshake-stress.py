#!/usr/bin/env python3
"""WebSocket sessions one after another through a tokentap binary; counts the sessions lost.

Each session: the handshake, one client frame, one server frame, then the upstream closes. The
upstream (in this process) answers the handshake at once, which is when pingora-proxy 0.9.1's own
HTTP/1 proxy could close the tunnel right after the 101 (cloudflare/pingora#946). A session is
lost when the client does not get both the 101 and the server frame.

usage: scripts/websocket-handshake-stress.py TOKENTAP_BIN SESSIONS [REPORT_EVERY]
With REPORT_EVERY, it also prints the sessions lost so far and tokentap's resident memory after
every REPORT_EVERY sessions. (BENCHMARKS.md ran it on a quiet machine and with both cores kept
busy by two `yes > /dev/null` processes.)
"""
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading

SWITCH = (
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
)
HANDSHAKE = (
    b"GET /v1/realtime HTTP/1.1\r\nHost: stress\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)
# A masked text frame "ok" (key "abcd") from the client, a text frame "hi" from the upstream.
CLIENT_FRAME = b"\x81\x82abcd" + bytes([ord("o") ^ ord("a"), ord("k") ^ ord("b")])
SERVER_FRAME = b"\x81\x02hi"


def read_head(conn):
    """Reads until the end of an HTTP head; returns (head, bytes after it)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(4096)
        if not data:
            break
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def read_at_least(conn, got, n):
    """Reads onto `got` until it holds `n` bytes or the peer closes; returns what it holds."""
    while len(got) < n:
        data = conn.recv(4096)
        if not data:
            break
        got += data
    return got


def serve_session(conn):
    """The upstream's side of one session: 101 at once, then a frame once the client's arrived."""
    with conn:
        _, got = read_head(conn)
        conn.sendall(SWITCH)
        if len(read_at_least(conn, got, len(CLIENT_FRAME))) < len(CLIENT_FRAME):
            return
        try:
            conn.sendall(SERVER_FRAME)
            conn.shutdown(socket.SHUT_WR)
            while conn.recv(4096):
                pass
        except OSError:
            pass


def upstream(listener):
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve_session, args=(conn,), daemon=True).start()


def start_tokentap(binary, upstream_port):
    data_dir = tempfile.mkdtemp()
    args = [binary, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
            "--data-dir", data_dir, "--threads", "2", "--upstream", f"http://127.0.0.1:{upstream_port}"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, TOKENTAP_LOG="warn"))
    for line in proc.stdout:
        found = re.search(r"tokentap listening on http://127\.0\.0\.1:(\d+)", line)
        if found:
            # Keep draining its output so that it never blocks on a full pipe.
            threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()
            return proc, int(found.group(1))
    sys.exit(f"{binary} did not start")


def session_lost(port):
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.settimeout(10)
        client.sendall(HANDSHAKE)
        head, rest = read_head(client)
        try:
            client.sendall(CLIENT_FRAME)
            rest = read_at_least(client, rest, len(SERVER_FRAME))
        except OSError:
            pass
    return not head.startswith(b"HTTP/1.1 101") or rest != SERVER_FRAME


def resident_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    binary, sessions = sys.argv[1], int(sys.argv[2])
    every = int(sys.argv[3]) if len(sys.argv) == 4 else 0
    listener = socket.create_server(("127.0.0.1", 0), backlog=512)
    threading.Thread(target=upstream, args=(listener,), daemon=True).start()
    proc, port = start_tokentap(binary, listener.getsockname()[1])
    lost = 0
    try:
        for done in range(1, sessions + 1):
            lost += session_lost(port)
            if every and done % every == 0:
                print(f"after {done} sessions: lost {lost}, tokentap VmRSS {resident_kib(proc.pid)} KiB", flush=True)
    finally:
        proc.terminate()
        proc.wait()
    print(f"sessions {sessions} lost {lost}")


if __name__ == "__main__":
    main()
