#!/usr/bin/env python3
"""Drives a (mock or proxied) Anthropic Messages endpoint with the official anthropic SDK and prints
what the SDK parsed as one JSON document.

Covers: `messages.stream(...)` with extended thinking and a tool (final message content blocks,
stop_reason, usage, event types), and a non-streaming `messages.create`.

How to run:
    .cache/venv/bin/python tests/sdk/anthropic_messages.py --base-url http://127.0.0.1:PORT
"""

import anthropic

from _common import API_KEY, emit, parse_args, with_headers

MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "input_schema": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    }
]


def usage_dict(usage):
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
    }


def block_dict(block):
    if block.type == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if block.type == "text":
        return {"type": "text", "text": block.text}
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    return {"type": block.type}


def streaming(client, model, extra):
    event_types = []
    with client.messages.stream(
        model=model,
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=TOOLS,
        messages=MESSAGES,
        extra_headers=with_headers({"x-mock-scenario": "tool_call"}, extra),
    ) as stream:
        text = []
        for event in stream:
            event_types.append(event.type)
            if event.type == "text":
                text.append(event.text)
        message = stream.get_final_message()
    # First-appearance order plus counts: a shape that reads well and still catches a missing event.
    order = list(dict.fromkeys(event_types))
    counts = {kind: event_types.count(kind) for kind in order}
    return {
        "id": message.id,
        "content": [block_dict(b) for b in message.content],
        "streamed_text_matches": "".join(text) == "".join(b.text for b in message.content if b.type == "text"),
        "stop_reason": message.stop_reason,
        "usage": usage_dict(message.usage),
        "event_type_order": order,
        "event_type_counts": counts,
    }


def non_streaming(client, model, extra):
    message = client.messages.create(model=model, max_tokens=1024, messages=MESSAGES, extra_headers=extra or None)
    return {
        "id": message.id,
        "content": [block_dict(b) for b in message.content],
        "stop_reason": message.stop_reason,
        "usage": usage_dict(message.usage),
    }


def main():
    args = parse_args(__doc__)
    client = anthropic.Anthropic(base_url=args.base_url, api_key=API_KEY, max_retries=0, timeout=60)
    model = args.model or "claude-mock-1"
    emit({"stream": streaming(client, model, args.headers), "non_streaming": non_streaming(client, model, args.headers)})


if __name__ == "__main__":
    main()
