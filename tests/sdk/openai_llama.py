#!/usr/bin/env python3
"""Drives a real llama.cpp server (directly or through tokentap) with the official openai SDK, greedy
decoding and no prompt cache, and prints what the SDK parsed as one JSON document: the same on every
run, so a run through tokentap must print exactly what a direct run prints.

Covers: streaming chat with include_usage, non-streaming chat, and the legacy completions API
streaming.

How to run:
    .cache/venv/bin/python tests/sdk/openai_llama.py --base-url http://127.0.0.1:PORT/v1
"""

import openai

from _common import API_KEY, emit, parse_args

PROMPT = "List three facts about the Moon."
# Greedy decoding; cache_prompt off so a second run does not differ in cached_tokens.
LLAMA = {"cache_prompt": False}


def usage_dict(usage):
    if usage is None:
        return None
    details = usage.prompt_tokens_details
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "cached_tokens": details.cached_tokens if details else None,
    }


def chat_stream(client, model, extra):
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": PROMPT}],
        stream=True,
        stream_options={"include_usage": True},
        temperature=0,
        max_tokens=16,
        extra_body=LLAMA,
        extra_headers=extra or None,
    )
    content, finish_reason, usage, roles, chunks = [], None, None, [], 0
    ids = set()
    for chunk in stream:
        chunks += 1
        ids.add(chunk.id)
        if chunk.usage is not None:
            usage = usage_dict(chunk.usage)
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                content.append(choice.delta.content)
            if choice.finish_reason:
                finish_reason = choice.finish_reason
    return {
        "content": "".join(content),
        "deltas": len(content),
        "chunks": chunks,
        "roles": roles,
        "distinct_chunk_ids": len(ids),
        "finish_reason": finish_reason,
        "usage": usage,
    }


def chat_non_streaming(client, model, extra):
    completion = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_tokens=16,
        extra_body=LLAMA,
        extra_headers=extra or None,
    )
    choice = completion.choices[0]
    return {
        "model": completion.model,
        "content": choice.message.content,
        "finish_reason": choice.finish_reason,
        "usage": usage_dict(completion.usage),
    }


def completions_stream(client, model, extra):
    stream = client.completions.create(
        model=model,
        prompt="The Moon is",
        stream=True,
        temperature=0,
        max_tokens=12,
        extra_body=LLAMA,
        extra_headers=extra or None,
    )
    text, finish_reason = [], None
    for chunk in stream:
        for choice in chunk.choices:
            text.append(choice.text or "")
            if choice.finish_reason:
                finish_reason = choice.finish_reason
    return {"text": "".join(text), "finish_reason": finish_reason}


def main():
    args = parse_args(__doc__)
    client = openai.OpenAI(base_url=args.base_url, api_key=API_KEY, max_retries=0, timeout=120)
    model = args.model or "smollm2-135m"
    emit(
        {
            "chat_stream": chat_stream(client, model, args.headers),
            "chat_non_streaming": chat_non_streaming(client, model, args.headers),
            "completions_stream": completions_stream(client, model, args.headers),
        }
    )


if __name__ == "__main__":
    main()
