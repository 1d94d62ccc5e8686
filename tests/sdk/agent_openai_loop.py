#!/usr/bin/env python3
"""A hand-written agent tool loop on the official openai SDK (streaming chat completions), as an
app would write it, against the mock in agent mode (directly or through tokentap).

Each step streams a completion; when the model asks for tools, the script runs them in parallel
threads that sleep known times, then sends their results in the next request, until the model
answers without tool calls. Prints one JSON document: per client, per user turn, the tokentap
request id of every step (`x-tokentap-request-id`, null without tokentap), the answer, and per tool
call when the SDK handed over its last argument fragment (`received`), when the request carrying
its result was sent (`sent`, both `time.monotonic()` seconds), the difference (`held_ms`), and the
outer bracket (`outer_ms`: the step that made the call was started → the response head of the
request carrying its result came back).

Options:
    --base-url URL   repeatable: steps go to the URLs in turn (step 1 to the first, step 2 to the
                     second, ...), e.g. two tokentap instances behind one provider
    --clients N      N loops at once in threads, each with its own user messages (default 1)
    --user-turns K   K user messages in sequence in one conversation (default 1)
    --header K:V     repeatable; added to every request (overrides the mock defaults below)

How to run:
    .cache/venv/bin/python tests/sdk/agent_openai_loop.py --base-url http://127.0.0.1:PORT/v1
"""

import argparse
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai

from _common import API_KEY, emit

MODEL = "gpt-4o-mini"
# The mock's agent mode: two parallel tool calls in one round, then a short answer; each call's
# arguments in four fragments 40 ms apart, so the two calls are ready at moments ~160 ms apart.
MOCK_HEADERS = {
    "x-mock-agent": "1",
    "x-mock-agent-parallel": "2",
    "x-mock-agent-steps": "1",
    "x-mock-tool-fragments": "4",
    "x-mock-itl-ms": "40",
    "x-mock-tokens": "6",
}
# How long each tool "runs".
TOOL_SLEEP_S = {"get_weather": 0.3, "get_time": 0.6}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Current local time in a time zone.",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
        },
    },
]
MAX_STEPS = 10


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", action="append", required=True)
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--user-turns", type=int, default=1)
    parser.add_argument("--header", action="append", default=[], metavar="K:V")
    args = parser.parse_args()
    args.headers = dict(MOCK_HEADERS)
    for item in args.header:
        key, sep, value = item.partition(":")
        if not sep:
            parser.error(f"--header needs K:V, got {item!r}")
        args.headers[key.strip()] = value.strip()
    return args


def stream_step(client, messages, headers):
    """One model call: streams it, returns the request id, the text and the tool calls, each with
    the time its last argument fragment arrived."""
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=messages,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=headers,
    )
    request_id = raw.headers.get("x-tokentap-request-id")
    head_at = time.monotonic()
    calls = {}
    content = []
    for chunk in raw.parse():
        now = time.monotonic()
        for choice in chunk.choices:
            if choice.delta.content:
                content.append(choice.delta.content)
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"id": None, "name": "", "arguments": "", "received": now})
                if call.id:
                    entry["id"] = call.id
                if call.function and call.function.name:
                    entry["name"] += call.function.name
                if call.function and call.function.arguments:
                    entry["arguments"] += call.function.arguments
                    entry["received"] = now
    return request_id, "".join(content), [calls[i] for i in sorted(calls)], head_at


def run_tool(call):
    json.loads(call["arguments"] or "{}")  # the arguments are complete JSON
    time.sleep(TOOL_SLEEP_S.get(call["name"], 0.1))
    return f"{call['name']} done"


def user_turn(clients, step_counter, messages, text, headers):
    """One user message and the tool loop it starts, until the answer."""
    messages.append({"role": "user", "content": text})
    request_ids, calls_out, waiting = [], [], []
    for step in range(1, MAX_STEPS + 1):
        client = clients[step_counter[0] % len(clients)]
        step_counter[0] += 1
        sent = time.monotonic()
        for call in waiting:
            call["sent"] = sent
            call["held_ms"] = (sent - call["received"]) * 1000.0
        request_id, content, calls, head_at = stream_step(client, messages, headers)
        for call in waiting:
            call["outer_ms"] = (head_at - call["maker_sent"]) * 1000.0
        request_ids.append(request_id)
        if not calls:
            messages.append({"role": "assistant", "content": content})
            return {"user": text, "request_ids": request_ids, "answer": content, "calls": calls_out}
        messages.append(
            {
                "role": "assistant",
                "content": content or None,
                "tool_calls": [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in calls
                ],
            }
        )
        with ThreadPoolExecutor(max_workers=len(calls)) as pool:
            results = list(pool.map(run_tool, calls))
        for call, result in zip(calls, results):
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            calls_out.append(
                {"id": call["id"], "name": call["name"], "step": step, "received": call["received"], "maker_sent": sent}
            )
        waiting = calls_out[-len(calls):]
    raise RuntimeError(f"no answer after {MAX_STEPS} steps")


def conversation(base_urls, index, user_turns, headers, barrier):
    clients = [openai.OpenAI(base_url=url, api_key=API_KEY, max_retries=0, timeout=60) for url in base_urls]
    messages, step_counter, turns = [], [0], []
    barrier.wait()
    for turn in range(user_turns):
        text = f"Client {index}, question {turn}: what is the weather and the time in city {index}?"
        turns.append(user_turn(clients, step_counter, messages, text, headers))
    return {"turns": turns}


def main():
    args = parse_args()
    barrier = threading.Barrier(args.clients)
    with ThreadPoolExecutor(max_workers=args.clients) as pool:
        futures = [
            pool.submit(conversation, args.base_url, i, args.user_turns, args.headers, barrier)
            for i in range(args.clients)
        ]
        emit({"clients": [f.result() for f in futures]})


if __name__ == "__main__":
    main()
