#!/usr/bin/env python3
"""An agent on the openai-agents SDK: an `Agent` with two function tools, run by `Runner.run_sync`
on the OpenAI-compatible chat completions model, against the mock in agent mode (directly or
through tokentap). The SDK's own tracing is off: whatever tokentap reports comes from the wire.

Prints one JSON document: the final output and the tool calls the SDK made (call id and name) and
whose outputs it sent back.

How to run:
    .cache/venv/bin/python tests/sdk/agent_openai_agents.py --base-url http://127.0.0.1:PORT/v1
"""

import time

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from _common import API_KEY, emit, parse_args, with_headers

MOCK_HEADERS = {"x-mock-agent": "1", "x-mock-agent-parallel": "2", "x-mock-agent-steps": "1", "x-mock-tokens": "6"}


@function_tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    time.sleep(0.2)
    return f"Sunny in {city}"


@function_tool
def get_time(zone: str) -> str:
    """Current local time in a time zone."""
    time.sleep(0.4)
    return f"It is noon in {zone}"


def main():
    args = parse_args(__doc__)
    set_tracing_disabled(True)
    client = AsyncOpenAI(
        base_url=args.base_url, api_key=API_KEY, max_retries=0, timeout=60, default_headers=with_headers(MOCK_HEADERS, args.headers)
    )
    agent = Agent(
        name="assistant",
        instructions="Answer with the tools.",
        model=OpenAIChatCompletionsModel(model=args.model or "gpt-4o-mini", openai_client=client),
        tools=[get_weather, get_time],
    )
    result = Runner.run_sync(agent, "What is the weather and the time in Paris?", max_turns=6)
    calls = [
        {"id": item.raw_item.call_id, "name": item.raw_item.name}
        for item in result.new_items
        if item.type == "tool_call_item"
    ]
    outputs = [item.raw_item["call_id"] for item in result.new_items if item.type == "tool_call_output_item"]
    emit({"final_output": result.final_output, "calls": calls, "output_call_ids": outputs})


if __name__ == "__main__":
    main()
