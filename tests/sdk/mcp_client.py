"""The official MCP Python SDK's client (`mcp.Client`) calling the three tools of mcp_server.py
(or of the TypeScript SDK's tests/mcp-ts/mcp_server.mjs): sleep_ms, count (with a progress
callback) and fail. Over Streamable HTTP (the URL given to `Client`), or with `--transport sse`
over the older HTTP+SSE transport (`mcp.client.sse.sse_client`: GET the URL, POST to the
endpoint it announces).

Usage: mcp_client.py --url URL --mode legacy|auto [--sleep-ms N] [--transport streamable|sse]
Prints one JSON document: the tool results and the progress the callback saw.
"""

import argparse
import asyncio
import json
import sys

from mcp import Client
from mcp.client.sse import sse_client


async def run(url, mode, sleep_ms, transport):
    progress = []

    async def on_progress(value, total, message):
        progress.append(value)

    out = {}
    server = sse_client(url) if transport == "sse" else url
    async with Client(server, mode=mode) as client:
        tools = await client.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        slept = await client.call_tool("sleep_ms", {"ms": sleep_ms})
        out["sleep_ms"] = {"is_error": bool(slept.is_error)}
        counted = await client.call_tool("count", {"n": 3}, progress_callback=on_progress)
        out["count"] = {"is_error": bool(counted.is_error), "progress": progress}
        failed = await client.call_tool("fail", {"reason": "no such city"})
        out["fail"] = {"is_error": bool(failed.is_error)}
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--mode", default="legacy")
    parser.add_argument("--sleep-ms", type=int, default=200)
    parser.add_argument("--transport", default="streamable", choices=["streamable", "sse"])
    args = parser.parse_args()
    result = asyncio.run(run(args.url, args.mode, args.sleep_ms, args.transport))
    json.dump(result, sys.stdout, sort_keys=True, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
