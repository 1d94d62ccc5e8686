#!/usr/bin/env python3
"""A voice turn over HTTP on the official openai SDK, as a voice app chains it: speech to text
(streamed), the transcript sent on as the user's message (streamed chat), then the answer read
out sentence by sentence (streamed text to speech, raw PCM), without any tokentap header or
trace context. Prints one JSON document: the transcript, the answer, the sentences spoken, the
audio bytes received per sentence and the tokentap request ids (null without tokentap).

Options:
    --base-url URL   the OpenAI base URL (http://HOST:PORT/v1)
    --header K:V     repeatable; added to every request
    --sentences N    sentences to speak (default 2; fewer when the answer has fewer)

How to run:
    .cache/venv/bin/python tests/sdk/voice_turn.py --base-url http://127.0.0.1:PORT/v1
"""

import argparse
import io
import json
import math
import re
import struct
import wave

import openai

from _common import API_KEY, emit

QUESTION = "What is the weather in Paris today?"


def speech_wav(seconds=1.0, rate=16000):
    """A WAV a microphone could have recorded: 200 ms of silence, then a tone."""
    frames = bytearray()
    for i in range(int(seconds * rate)):
        x = 0.0 if i < rate // 5 else 0.2 * math.sin(2 * math.pi * 220 * i / rate)
        frames += struct.pack("<h", int(x * 32767))
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(bytes(frames))
    return buf.getvalue()


def sentences(text):
    parts = [p.strip() for p in re.split(r"(?<=[.!?])\s+", text.strip()) if p.strip()]
    return parts or [text]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--sentences", type=int, default=2)
    args = parser.parse_args()
    headers = {"x-mock-transcript": QUESTION}
    for item in args.header:
        key, _, value = item.partition(":")
        headers[key.strip()] = value.strip()
    client = openai.OpenAI(base_url=args.base_url, api_key=API_KEY, default_headers=headers, max_retries=0)
    ids = {}

    # 1. Speech to text, streamed.
    with client.audio.transcriptions.with_streaming_response.create(
        model="gpt-4o-transcribe", file=("speech.wav", speech_wav(), "audio/wav"), stream=True
    ) as response:
        ids["transcription"] = response.headers.get("x-tokentap-request-id")
        transcript = ""
        for line in response.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[len("data: "):])
                if event.get("type") == "transcript.text.done":
                    transcript = event["text"]

    # 2. The transcript as the user's message.
    with client.chat.completions.with_streaming_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": transcript}], stream=True
    ) as response:
        ids["chat"] = response.headers.get("x-tokentap-request-id")
        answer = ""
        for chunk in response.parse():
            for choice in chunk.choices:
                if choice.delta.content:
                    answer += choice.delta.content

    # 3. The answer read out, one sentence per request.
    spoken = []
    for i, sentence in enumerate(sentences(answer)[: args.sentences]):
        with client.audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice="alloy", input=sentence, response_format="pcm"
        ) as response:
            audio = b"".join(response.iter_bytes())
            ids[f"speech_{i}"] = response.headers.get("x-tokentap-request-id")
        spoken.append({"sentence": sentence, "audio_bytes": len(audio)})

    emit({"transcript": transcript, "answer": answer, "spoken": spoken, "request_ids": ids})


if __name__ == "__main__":
    main()
