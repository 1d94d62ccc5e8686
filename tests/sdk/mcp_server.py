"""An MCP server on the official Python SDK (`mcp`, MCPServer) with three tools: `sleep_ms`
sleeps a known time, `count` streams progress notifications, `fail` returns a tool error. Over
Streamable HTTP (`/mcp`), or with `--transport sse` over the older HTTP+SSE transport (`sse_app`:
`GET /sse` announces `/messages/?session_id=…`, whose POSTs are answered 202 and whose responses
go out on the GET stream).

It logs its own time per JSON-RPC request, from the request arriving at the ASGI app (its head
parsed) to the body write carrying the response's id (on whichever response that is), as one
JSON line per request in --log:
{"method", "id", "name", "in_ns", "out_ns"} (time.monotonic_ns), stamped just before the write. Accepted connections get TCP_NODELAY (uvicorn
leaves Nagle on: a body written after its head would leave ~40 ms after the server logged it, once
the peer's delayed ACK came). It prints
"mcp server listening on http://127.0.0.1:PORT/mcp" (or `/sse`) once it accepts connections.

Usage: mcp_server.py --log FILE [--transport streamable|sse]
"""

import argparse
import asyncio
import json
import socket
import sys
import time

import uvicorn
from mcp.server.mcpserver import Context, MCPServer


def build_server():
    server = MCPServer("tokentap-e2e")

    @server.tool()
    async def sleep_ms(ms: int) -> str:
        """Sleeps `ms` milliseconds."""
        await asyncio.sleep(ms / 1000)
        return f"slept {ms} ms"

    @server.tool()
    async def count(n: int, ctx: Context) -> str:
        """Counts to n, one progress notification every 20 ms."""
        for i in range(1, n + 1):
            await asyncio.sleep(0.02)
            await ctx.report_progress(i, n, f"step {i}")
        return f"counted to {n}"

    @server.tool()
    async def fail(reason: str) -> str:
        """Fails with `reason` (a tool error: isError true)."""
        raise ValueError(reason)

    return server


class Timing:
    """ASGI middleware: the server's own request-in and answer-out times per JSON-RPC request."""

    def __init__(self, app, log):
        self.app = app
        self.log = log
        # Requests by id, across HTTP requests: under HTTP+SSE the answer goes out on another one.
        self.pending = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        in_ns = time.monotonic_ns()
        body = bytearray()
        pending = self.pending

        async def receive_wrapper():
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
                if not message.get("more_body"):
                    try:
                        msg = json.loads(body)
                    except ValueError:
                        msg = None
                    for m in msg if isinstance(msg, list) else [msg]:
                        if isinstance(m, dict) and "method" in m and "id" in m:
                            name = (m.get("params") or {}).get("name")
                            pending[json.dumps(m["id"])] = {
                                "method": m["method"],
                                "id": m["id"],
                                "name": name,
                                "in_ns": in_ns,
                            }
            return message

        async def send_wrapper(message):
            # The answer goes out when its bytes are handed to the transport: stamp just before.
            out_ns = time.monotonic_ns()
            await send(message)
            if message["type"] == "http.response.body" and pending:
                chunk = message.get("body", b"").decode("utf-8", "replace")
                for line in chunk.splitlines():
                    line = line[5:].strip() if line.startswith("data:") else line.strip()
                    try:
                        msg = json.loads(line)
                    except ValueError:
                        continue
                    for m in msg if isinstance(msg, list) else [msg]:
                        if isinstance(m, dict) and "method" not in m and ("result" in m or "error" in m):
                            entry = pending.pop(json.dumps(m.get("id")), None)
                            if entry is not None:
                                entry.update(out_ns=out_ns, is_error=bool((m.get("result") or {}).get("isError")))
                                self.log.write(json.dumps(entry) + "\n")
                                self.log.flush()

        await self.app(scope, receive_wrapper, send_wrapper)


def nodelay():
    """Every accepted connection with TCP_NODELAY: otherwise a response body written after its
    head waits for the head's ACK (Nagle), which the peer delays ~40 ms, and the bytes leave well
    after the server logged them as sent."""
    from uvicorn.protocols.http import h11_impl

    classes = [h11_impl.H11Protocol]
    try:
        from uvicorn.protocols.http import httptools_impl

        classes.append(httptools_impl.HttpToolsProtocol)
    except ImportError:
        pass
    for cls in classes:
        original = cls.connection_made

        def connection_made(self, transport, original=original):
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            original(self, transport)

        cls.connection_made = connection_made


def main():
    nodelay()
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--transport", default="streamable", choices=["streamable", "sse"])
    args = parser.parse_args()
    log = open(args.log, "a", encoding="utf-8")
    server = build_server()
    app = Timing(server.sse_app() if args.transport == "sse" else server.streamable_http_app(), log)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)

    async def serve():
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        path = "/sse" if args.transport == "sse" else "/mcp"
        print(f"mcp server listening on http://127.0.0.1:{port}{path}", flush=True)
        await task

    asyncio.run(serve())
    sys.exit(0)


if __name__ == "__main__":
    main()
