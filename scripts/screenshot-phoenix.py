#!/usr/bin/env python3
"""A screenshot of an agent turn as Arize Phoenix shows it, exported by tokentap.

Starts Phoenix (from .cache/venv-phoenix, which `scripts/setup.sh test` installs), tokentap-mock,
and tokentap in front of the mock exporting to Phoenix (`[otel] profile = "phoenix"`), all on free
loopback ports with temporary directories; drives one agent turn of two tool rounds through
tokentap; waits until Phoenix has its AGENT span; and takes a headless Chromium screenshot of
Phoenix's page for that trace. Everything it started is stopped at the end.

How to run (after `cargo build -p tokentap -p tokentap-mock`):
    .cache/venv-phoenix/bin/python scripts/screenshot-phoenix.py [--out phoenix-turn.png]
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = "tokentap"
DEADLINE_S = 240


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Child:
    """A child process whose output lines are collected; `wait_for` blocks until one contains a
    text (or the process exits, or the deadline passes)."""

    def __init__(self, args, env=None):
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def wait_for(self, text, timeout=DEADLINE_S):
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                for line in self.lines:
                    if text in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    sys.exit(f"no {text!r} from {self.proc.args[0]}:\n" + "\n".join(self.lines[-40:]))
                self.changed.wait(min(left, 1.0))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def post_stream(url, body, headers):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    for k, v in headers.items():
        request.add_header(k, v)
    with urllib.request.urlopen(request, timeout=60) as resp:
        text = resp.read().decode()
    calls = {}
    for line in text.splitlines():
        data = line[5:].strip() if line.startswith("data:") else None
        if not data or data == "[DONE]":
            continue
        event = json.loads(data)
        for fragment in ((event.get("choices") or [{}])[0].get("delta") or {}).get("tool_calls") or []:
            call = calls.setdefault(fragment.get("index", 0), {"id": "", "name": "", "arguments": ""})
            call["id"] = fragment.get("id") or call["id"]
            function = fragment.get("function") or {}
            call["name"] += function.get("name") or ""
            call["arguments"] += function.get("arguments") or ""
    return [calls[i] for i in sorted(calls)]


def get_json(url):
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.load(resp)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="phoenix-turn.png")
    args = parser.parse_args()
    python = os.path.join(ROOT, ".cache/venv-phoenix/bin/python")
    binaries = os.environ.get("TOKENTAP_BIN_DIR", os.path.join(ROOT, "target/debug"))
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not os.path.exists(python) or not chromium:
        sys.exit("needs .cache/venv-phoenix and chromium: run scripts/setup.sh test")
    work = tempfile.mkdtemp(prefix="tokentap-phoenix-")
    children = []
    try:
        http_port, grpc_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(PHOENIX_HOST="127.0.0.1", PHOENIX_PORT=str(http_port), PHOENIX_GRPC_PORT=str(grpc_port),
                   PHOENIX_WORKING_DIR=os.path.join(work, "phoenix"), PHOENIX_TELEMETRY_ENABLED="false",
                   PYTHONUNBUFFERED="1")
        phoenix = Child([python, "-m", "phoenix.server.main", "serve"], env)
        children.append(phoenix)
        mock = Child([os.path.join(binaries, "tokentap-mock"), "--listen", "127.0.0.1:0"])
        children.append(mock)
        mock_url = mock.wait_for("tokentap-mock listening on ").split("listening on ")[1].strip()
        phoenix.wait_for("Uvicorn running on")
        phoenix_url = f"http://127.0.0.1:{http_port}"
        config = os.path.join(work, "tokentap.toml")
        with open(config, "w") as f:
            f.write(f'[otel]\nendpoint = "{phoenix_url}"\nprofile = "phoenix"\nproject = "{PROJECT}"\nbatch_delay_ms = 100\n')
        tokentap = Child([os.path.join(binaries, "tokentap"), "serve", "--upstream", mock_url, "--listen", "127.0.0.1:0",
                          "--admin-listen", "127.0.0.1:0", "--data-dir", os.path.join(work, "data"), "--config", config],
                         dict(env, TOKENTAP_LOG="info"))
        children.append(tokentap)
        proxy = tokentap.wait_for("tokentap listening on ").split("listening on ")[1].split()[0].rstrip("/")

        tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
                 for n in ("get_weather", "get_time")]
        headers = {"content-type": "application/json", "x-mock-agent": "1", "x-mock-agent-steps": "2",
                   "x-mock-tool-fragments": "4", "x-mock-itl-ms": "20", "x-mock-ttft-ms": "150", "x-mock-tokens": "12"}
        messages = [{"role": "user", "content": "What is the weather and the time in Lisbon?"}]
        for _ in range(3):
            body = {"model": "mock-gpt", "stream": True, "stream_options": {"include_usage": True},
                    "messages": messages, "tools": tools}
            calls = post_stream(f"{proxy}/v1/chat/completions", body, headers)
            if not calls:
                break
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls]})
            time.sleep(0.3)  # the app "runs" its tool: part of the picture, not a synchronisation
            messages += [{"role": "tool", "tool_call_id": c["id"], "content": "sunny, 14:05"} for c in calls]

        deadline = time.monotonic() + DEADLINE_S
        while True:
            spans = get_json(f"{phoenix_url}/v1/projects/{PROJECT}/spans?limit=1000").get("data", []) \
                if PROJECT in [p["name"] for p in get_json(f"{phoenix_url}/v1/projects")["data"]] else []
            agent = next((s for s in spans if s.get("span_kind") == "AGENT"), None)
            if agent or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if not agent:
            sys.exit("Phoenix never showed the AGENT span")
        project_id = next(p["id"] for p in get_json(f"{phoenix_url}/v1/projects")["data"] if p["name"] == PROJECT)
        page = f"{phoenix_url}/projects/{project_id}/traces/{agent['context']['trace_id']}"
        out = os.path.abspath(args.out)
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1600,1000", "--virtual-time-budget=15000", f"--screenshot={out}", page],
                       check=True, capture_output=True, timeout=120)
        print(json.dumps({"screenshot": out, "page": page, "spans": len(spans)}))
    finally:
        for child in reversed(children):
            child.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
