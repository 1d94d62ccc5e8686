#!/usr/bin/env python3
"""A realtime voice conversation with the official openai SDK's realtime client
(`client.realtime.connect`) against the mock's `/v1/realtime` (directly or through tokentap), and
prints what the SDK received as one JSON document (event types per response, no timestamps).

The conversation: `session.update` (server VAD with 500 ms of silence and 300 ms of prefix
padding, one tool); user turn 1 (300 ms of silence, 800 ms of a tone, 700 ms of silence) →
the mock's VAD ends the turn and answers with a function call; the client sends the tool output
and `response.create` → an audio answer; as soon as its first audio delta arrives, user turn 2
starts (the tone again): the mock cancels the answer (`turn_detected`) and the client truncates
it (`conversation.item.truncate`), like a player that stopped; after the silence, a third
response answers with audio. The audio is appended as fast as the socket takes it (100 ms pieces);
nothing waits on the clock.

How to run:
    .cache/venv/bin/python tests/sdk/realtime_openai.py --base-url http://127.0.0.1:PORT/v1 \
        [--query mock_first_audio_ms=300 ...]
"""

import argparse
import asyncio
import base64
import json
import math
import struct
import sys

from openai import AsyncOpenAI

API_KEY = "sk-test-SECRET-do-not-log-0123456789"
RATE = 24_000


def pcm(ms, tone):
    n = RATE * ms // 1000
    if not tone:
        return b"\0\0" * n
    return struct.pack(f"<{n}h", *(round(0.3 * 32767 * math.sin(2 * math.pi * 300 * i / RATE)) for i in range(n)))


def pieces(audio, ms=100):
    step = RATE * ms // 1000 * 2
    for at in range(0, len(audio), step):
        yield base64.b64encode(audio[at : at + step]).decode()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--query", action="append", default=[], metavar="K=V")
    args = parser.parse_args()
    query = dict(item.split("=", 1) for item in args.query)

    client = AsyncOpenAI(api_key=API_KEY, base_url=args.base_url)
    responses = {}
    order = []
    turn = pcm(300, False) + pcm(800, True) + pcm(700, False)

    async with client.realtime.connect(model="gpt-realtime", extra_query=query) as conn:
        await conn.session.update(
            session={
                "type": "realtime",
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": RATE},
                        "turn_detection": {"type": "server_vad", "silence_duration_ms": 500, "prefix_padding_ms": 300},
                    }
                },
                "tools": [{"type": "function", "name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {}}}],
            }
        )
        for chunk in pieces(turn):
            await conn.input_audio_buffer.append(audio=chunk)

        second_turn_sent = False
        speech_started = 0
        async for event in conn:
            t = event.type
            rid = getattr(event, "response_id", None) or (getattr(event, "response", None) and event.response.id)
            if rid:
                if rid not in responses:
                    responses[rid] = {"events": []}
                    order.append(rid)
                ev = responses[rid]["events"]
                if not ev or ev[-1] != t:
                    ev.append(t)
            if t == "input_audio_buffer.speech_started":
                speech_started += 1
                if speech_started == 2 and order:
                    # The player stops: tell the server how much of the answer was heard.
                    item_id = responses[order[-1]].get("item_id")
                    if item_id:
                        await conn.conversation.item.truncate(item_id=item_id, content_index=0, audio_end_ms=50)
            elif t == "response.output_item.added" and rid:
                responses[rid]["item_id"] = event.item.id
            elif t == "response.function_call_arguments.done":
                responses[rid]["call"] = event.name
                await conn.conversation.item.create(item={"type": "function_call_output", "call_id": event.call_id, "output": json.dumps({"sky": "clear"})})
                await conn.response.create()
            elif t == "response.output_audio.delta" and not second_turn_sent:
                second_turn_sent = True
                for chunk in pieces(turn):
                    await conn.input_audio_buffer.append(audio=chunk)
            elif t == "response.done":
                responses[rid]["status"] = event.response.status
                if len(order) >= 3 and event.response.status == "completed":
                    break
            elif t == "error":
                print(json.dumps({"error": str(event)}), file=sys.stderr)
                sys.exit(1)

    out = {"responses": [{"id": r, **{k: v for k, v in responses[r].items() if k != "item_id"}} for r in order]}
    print(json.dumps(out, sort_keys=True))


asyncio.run(main())
