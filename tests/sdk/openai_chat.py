#!/usr/bin/env python3
"""Drives a (mock or proxied) OpenAI-compatible endpoint with the official openai SDK and prints what
the SDK parsed as one JSON document.

Covers: streaming chat with tools + include_usage (tool calls accumulated), streaming chat with
reasoning (reasoning_content / reasoning), non-streaming chat, and the Responses API streaming.

How to run:
    .cache/venv/bin/python tests/sdk/openai_chat.py --base-url http://127.0.0.1:PORT/v1
"""

import openai

from _common import API_KEY, emit, parse_args, with_headers

MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    }
]


def usage_dict(usage):
    if usage is None:
        return None
    details = usage.completion_tokens_details
    prompt_details = usage.prompt_tokens_details
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "reasoning_tokens": details.reasoning_tokens if details else None,
        "cached_tokens": prompt_details.cached_tokens if prompt_details else None,
    }


def reasoning_of(delta):
    """Reasoning text of a chat delta, in either field OpenAI-compatible servers use."""
    for field in ("reasoning_content", "reasoning"):
        value = getattr(delta, field, None)
        if value is None and delta.model_extra:
            value = delta.model_extra.get(field)
        if value:
            return value
    return None


def chat_tool_call(client, model, extra):
    stream = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=with_headers({"x-mock-scenario": "tool_call"}, extra),
    )
    tool_calls = {}
    content = []
    finish_reason = None
    usage = None
    chunk_ids = set()
    first_delta_role = None
    for index, chunk in enumerate(stream):
        chunk_ids.add(chunk.id)
        if chunk.usage is not None:
            usage = usage_dict(chunk.usage)
        for choice in chunk.choices:
            delta = choice.delta
            if index == 0:
                first_delta_role = delta.role
            if delta.content:
                content.append(delta.content)
            for call in delta.tool_calls or []:
                entry = tool_calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                if call.id:
                    entry["id"] = call.id
                if call.function and call.function.name:
                    entry["name"] += call.function.name
                if call.function and call.function.arguments:
                    entry["arguments"] += call.function.arguments
            if choice.finish_reason:
                finish_reason = choice.finish_reason
    return {
        "first_delta_role": first_delta_role,
        "content": "".join(content),
        "tool_calls": [tool_calls[i] for i in sorted(tool_calls)],
        "finish_reason": finish_reason,
        "usage": usage,
        "distinct_chunk_ids": len(chunk_ids),
    }


def chat_reasoning(client, model, extra):
    stream = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=with_headers({"x-mock-scenario": "reasoning"}, extra),
    )
    content, reasoning = [], []
    finish_reason, usage = None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = usage_dict(chunk.usage)
        for choice in chunk.choices:
            if choice.delta.content:
                content.append(choice.delta.content)
            text = reasoning_of(choice.delta)
            if text:
                reasoning.append(text)
            if choice.finish_reason:
                finish_reason = choice.finish_reason
    return {
        "content": "".join(content),
        "reasoning": "".join(reasoning),
        "finish_reason": finish_reason,
        "usage": usage,
    }


def chat_non_streaming(client, model, extra):
    completion = client.chat.completions.create(model=model, messages=MESSAGES, extra_headers=extra or None)
    choice = completion.choices[0]
    return {
        "id": completion.id,
        "content": choice.message.content,
        "finish_reason": choice.finish_reason,
        "usage": usage_dict(completion.usage),
    }


def responses_stream(client, model, extra):
    stream = client.responses.create(
        model=model,
        input="What is the weather in Paris?",
        stream=True,
        extra_headers=extra or None,
    )
    event_types = []
    text = []
    sequence_ok = True
    last_sequence = -1
    usage = None
    for event in stream:
        event_types.append(event.type)
        if event.sequence_number <= last_sequence:
            sequence_ok = False
        last_sequence = event.sequence_number
        if event.type == "response.output_text.delta":
            text.append(event.delta)
        if event.type == "response.completed":
            u = event.response.usage
            usage = {
                "input_tokens": u.input_tokens,
                "cached_tokens": u.input_tokens_details.cached_tokens,
                "output_tokens": u.output_tokens,
                "reasoning_tokens": u.output_tokens_details.reasoning_tokens,
                "total_tokens": u.total_tokens,
            }
            completed_text = event.response.output_text
    # Collapse runs of deltas so the sequence reads as a shape, independent of the token count.
    shape = []
    for kind in event_types:
        if not shape or shape[-1] != kind:
            shape.append(kind)
    return {
        "output_text": "".join(text),
        "completed_output_text_matches": completed_text == "".join(text),
        "event_types": shape,
        "event_count": len(event_types),
        "sequence_numbers_increase": sequence_ok,
        "usage": usage,
    }


def main():
    args = parse_args(__doc__)
    client = openai.OpenAI(base_url=args.base_url, api_key=API_KEY, max_retries=0, timeout=60)
    model = args.model or "gpt-4o-mini"
    emit(
        {
            "chat_tool_call": chat_tool_call(client, model, args.headers),
            "chat_reasoning": chat_reasoning(client, model, args.headers),
            "chat_non_streaming": chat_non_streaming(client, model, args.headers),
            "responses_stream": responses_stream(client, model, args.headers),
        }
    )


if __name__ == "__main__":
    main()
