#!/usr/bin/env python3
"""A two-step agent turn through tokentap, and the breakdown tokentap rebuilt from the wire.

The script is a plain tool loop (Python standard library only, no SDK, no instrumentation): it asks
the model a question with two tools offered, runs the two tool calls the model makes in parallel
(they sleep 0.4 s and 0.8 s), sends the results back, and prints the final answer. Then it asks
tokentap's admin API for the turn and prints its steps, tool runs and totals.

Run it against `scripts/demo.sh` (the built-in mock provider plays the model: `x-mock-agent`):

    scripts/demo.sh &
    python3 examples/agent-turn/agent_turn.py
"""

import argparse
import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "Local time in a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
]
TOOL_SECONDS = {"get_weather": 0.4, "get_time": 0.8}


def stream_chat(proxy, messages):
    """One streaming chat completion; returns (answer text, tool calls by index)."""
    body = json.dumps({"model": "mock-gpt", "stream": True, "messages": messages, "tools": TOOLS}).encode()
    request = urllib.request.Request(f"{proxy}/v1/chat/completions", data=body, headers={
        "content-type": "application/json", "authorization": "Bearer sk-demo",
        "x-mock-agent": "1", "x-mock-agent-parallel": "2"})
    text, calls = "", {}
    with urllib.request.urlopen(request) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:]).get("choices", []):
                delta = choice.get("delta", {})
                text += delta.get("content") or ""
                for fragment in delta.get("tool_calls") or []:
                    call = calls.setdefault(fragment["index"], {"id": None, "name": "", "arguments": ""})
                    call["id"] = fragment.get("id") or call["id"]
                    function = fragment.get("function") or {}
                    call["name"] += function.get("name") or ""
                    call["arguments"] += function.get("arguments") or ""
    return text, calls


def run_tool(call):
    time.sleep(TOOL_SECONDS.get(call["name"], 0.1))
    return json.dumps({"tool": call["name"], "ok": True})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proxy", default="http://127.0.0.1:8787")
    parser.add_argument("--admin", default="http://127.0.0.1:8788")
    args = parser.parse_args()

    messages = [{"role": "user", "content": "What is the weather and the time in Paris?"}]
    _, calls = stream_chat(args.proxy, messages)
    print(f"step 1: the model asked for {', '.join(c['name'] for c in calls.values())}")
    with ThreadPoolExecutor() as pool:
        results = list(pool.map(run_tool, calls.values()))
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for c in calls.values()]})
    for call, result in zip(calls.values(), results):
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    answer, _ = stream_chat(args.proxy, messages)
    print(f"step 2: {answer[:70]}…")

    call_ids = {c["id"] for c in calls.values()}
    turn = None
    for _ in range(50):  # the record worker writes the turn a moment after the answer ends
        with urllib.request.urlopen(f"{args.admin}/_tokentap/api/turns?limit=20") as response:
            turns = json.load(response)["turns"]
        turn = next((t for t in turns if call_ids & {r.get("call_id") for r in t["tool_runs"]}), None)
        if turn:
            break
        time.sleep(0.1)
    if not turn:
        raise SystemExit("tokentap has not written the turn; is the admin API at " + args.admin + "?")
    t = turn["totals"]
    print(f"\nturn {turn['turn_id']} ({turn['status']}): {t['e2e_ms']:.0f} ms end to end, "
          f"{t['steps']} steps, {t['tool_calls']} tool calls")
    print(f"  model {t['model_ms']:.0f} ms · tools (with client work) {t['tool_ms']:.0f} ms · "
          f"other client time {t['client_ms']:.0f} ms")
    for step in turn["steps"]:
        print(f"  step {step['step']} ({step['link']}): {step['start_ms']:.0f} → {step['end_ms']:.0f} ms")
    for run in turn["tool_runs"]:
        print(f"  execute_tool {run['name']} [{run['call_id']}]: ready {run['ready_ms']:.0f} ms, "
              f"result sent at {run['result_ms']:.0f} ms → {run['duration_ms']:.0f} ms")
    print(f"\nthe whole turn: {args.admin}/_tokentap/api/turns/{turn['turn_id']}")


if __name__ == "__main__":
    main()
