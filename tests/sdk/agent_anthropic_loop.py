#!/usr/bin/env python3
"""A hand-written agent tool loop on the official anthropic SDK (`messages.stream`, `tool_use` /
`tool_result`), against the mock in agent mode (directly or through tokentap).

When the model asks for tools, the script runs them in parallel threads that sleep known times and
sends their results in the next request, until the model answers without tools. Prints one JSON
document: the tokentap request id of every step (`x-tokentap-request-id`, null without tokentap),
the answer, and per tool call when the SDK handed over the end of its block (`received`),
when the request carrying its result was sent (`sent`, both `time.monotonic()` seconds), the
difference (`held_ms`), and the outer bracket (`outer_ms`: the step that made the call was started →
the response head of the request carrying its result came back).

How to run:
    .cache/venv/bin/python tests/sdk/agent_anthropic_loop.py --base-url http://127.0.0.1:PORT
"""

import time
from concurrent.futures import ThreadPoolExecutor

import anthropic

from _common import API_KEY, emit, parse_args, with_headers

MODEL = "claude-mock-1"
# Two parallel tool_use blocks in one round, then a short answer; each block's input in four
# fragments 40 ms apart.
MOCK_HEADERS = {
    "x-mock-agent": "1",
    "x-mock-agent-parallel": "2",
    "x-mock-agent-steps": "1",
    "x-mock-tool-fragments": "4",
    "x-mock-itl-ms": "40",
    "x-mock-tokens": "6",
}
TOOL_SLEEP_S = {"get_weather": 0.3, "get_time": 0.6}
TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
    {
        "name": "get_time",
        "description": "Current local time in a time zone.",
        "input_schema": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
    },
]
MAX_STEPS = 10


def block_param(block):
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    return {"type": "text", "text": block.text}


def stream_step(client, messages, headers):
    """One model call: the request id, the final message and, per content block index, when its
    last input fragment arrived."""
    received = {}
    with client.messages.stream(model=MODEL, max_tokens=1024, tools=TOOLS, messages=messages, extra_headers=headers) as stream:
        request_id = stream.response.headers.get("x-tokentap-request-id")
        head_at = time.monotonic()
        for event in stream:
            now = time.monotonic()
            if event.type == "content_block_start" and event.content_block.type == "tool_use":
                received[event.index] = now
            elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                received[event.index] = now
            elif event.type == "content_block_stop" and event.index in received:
                # The block's end is when the SDK has the whole call (and when tokentap counts it
                # ready: the last frame that added to or closed the call).
                received[event.index] = now
        message = stream.get_final_message()
    return request_id, message, received, head_at


def run_tool(block):
    time.sleep(TOOL_SLEEP_S.get(block.name, 0.1))
    return f"{block.name} done"


def main():
    args = parse_args(__doc__)
    headers = with_headers(MOCK_HEADERS, args.headers)
    client = anthropic.Anthropic(base_url=args.base_url, api_key=API_KEY, max_retries=0, timeout=60)
    messages = [{"role": "user", "content": "What is the weather and the time in Paris?"}]
    request_ids, calls_out, waiting = [], [], []
    for step in range(1, MAX_STEPS + 1):
        sent = time.monotonic()
        for call in waiting:
            call["sent"] = sent
            call["held_ms"] = (sent - call["received"]) * 1000.0
        request_id, message, received, head_at = stream_step(client, messages, headers)
        for call in waiting:
            call["outer_ms"] = (head_at - call["maker_sent"]) * 1000.0
        request_ids.append(request_id)
        uses = [(i, b) for i, b in enumerate(message.content) if b.type == "tool_use"]
        if not uses:
            answer = "".join(b.text for b in message.content if b.type == "text")
            emit({"request_ids": request_ids, "answer": answer, "stop_reason": message.stop_reason, "calls": calls_out})
            return
        messages.append({"role": "assistant", "content": [block_param(b) for b in message.content]})
        with ThreadPoolExecutor(max_workers=len(uses)) as pool:
            results = list(pool.map(run_tool, [b for _, b in uses]))
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": b.id, "content": result} for (_, b), result in zip(uses, results)
                ],
            }
        )
        waiting = [
            {"id": b.id, "name": b.name, "step": step, "received": received[i], "maker_sent": sent} for i, b in uses
        ]
        calls_out.extend(waiting)
    raise RuntimeError(f"no answer after {MAX_STEPS} steps")


if __name__ == "__main__":
    main()
