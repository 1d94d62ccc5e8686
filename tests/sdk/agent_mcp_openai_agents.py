#!/usr/bin/env python3
"""An agent on the openai-agents SDK whose tools live on an MCP server (its own
`MCPServerStreamableHttp`, unmodified), the model being the mock in agent mode: one turn with two
tool calls (the mock calls the first two offered tools, sleep_ms and count of tests/sdk/mcp_server.py),
both executed as MCP `tools/call` requests. Model and MCP traffic both go through tokentap. The
SDK's own tracing is off: whatever tokentap reports comes from the wire.

Usage: agent_mcp_openai_agents.py --base-url http://TOKENTAP/v1 --mcp-url http://TOKENTAP/mcp
Prints one JSON document: the final output and the tool calls (call id and name).
"""

import argparse
import asyncio
import json
import sys

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from openai import AsyncOpenAI

API_KEY = "sk-test-SECRET-do-not-log-0123456789"
MOCK_HEADERS = {"x-mock-agent": "1", "x-mock-agent-parallel": "2", "x-mock-agent-steps": "1", "x-mock-tokens": "6"}


async def run(base_url, mcp_url):
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0, timeout=60, default_headers=MOCK_HEADERS)
    server = MCPServerStreamableHttp(
        params={"url": mcp_url, "timeout": 30}, name="tools", client_session_timeout_seconds=30
    )
    async with server:
        agent = Agent(
            name="assistant",
            instructions="Answer with the tools.",
            model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client),
            mcp_servers=[server],
        )
        result = await Runner.run(agent, "Sleep a little and count.", max_turns=6)
    calls = [
        {"id": item.raw_item.call_id, "name": item.raw_item.name}
        for item in result.new_items
        if item.type == "tool_call_item"
    ]
    return {"final_output": result.final_output, "calls": calls}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--mcp-url", required=True)
    args = parser.parse_args()
    out = asyncio.run(run(args.base_url, args.mcp_url))
    json.dump(out, sys.stdout, sort_keys=True, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
