#!/usr/bin/env python3
"""Drives a (mock or proxied) OpenAI-compatible audio endpoint with the official openai SDK and
prints what the SDK parsed as one JSON document.

Covers: transcription of an uploaded WAV (gpt-4o-transcribe, JSON with token usage), the same
streamed (transcript.text.delta events, then transcript.text.done), whisper-1 with verbose_json,
and streamed text to speech as raw PCM and as WAV (length, SHA-256 and leading zero bytes of what
arrived).

How to run:
    .cache/venv/bin/python tests/sdk/voice_openai.py --base-url http://127.0.0.1:PORT/v1
"""

import hashlib
import io
import math
import struct
import wave

import openai

from _common import API_KEY, emit, parse_args

SAMPLE_RATE = 16_000
SPEECH_INPUT = "It is sunny in Paris today."


def speech_wav():
    """1 s of 16 kHz mono 16-bit WAV: 200 ms of silence, then a 440 Hz tone at about -12 dBFS."""
    silence = SAMPLE_RATE // 5
    samples = [0] * silence
    for i in range(SAMPLE_RATE - silence):
        samples.append(round(0.35 * 32767 * math.sin(2 * math.pi * 440 * i / SAMPLE_RATE)))
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
        out.writeframes(struct.pack(f"<{len(samples)}h", *samples))
    return buffer.getvalue()


def usage_of(result):
    usage = getattr(result, "usage", None)
    return usage.model_dump(mode="json", exclude_none=True) if usage is not None else None


def transcription(client, wav_bytes, extra):
    result = client.audio.transcriptions.create(
        model="gpt-4o-transcribe",
        file=("speech.wav", wav_bytes, "audio/wav"),
        extra_headers=extra or None,
    )
    return {"text": result.text, "usage": usage_of(result)}


def transcription_stream(client, wav_bytes, extra):
    stream = client.audio.transcriptions.create(
        model="gpt-4o-transcribe",
        file=("speech.wav", wav_bytes, "audio/wav"),
        stream=True,
        extra_headers=extra or None,
    )
    deltas, event_types = [], []
    done_text, usage = None, None
    for event in stream:
        event_types.append(event.type)
        if event.type == "transcript.text.delta":
            deltas.append(event.delta)
        elif event.type == "transcript.text.done":
            done_text = event.text
            usage = usage_of(event)
    return {
        "deltas": deltas,
        "joined_deltas": "".join(deltas),
        "done_text": done_text,
        "event_types": sorted(set(event_types)),
        "last_event": event_types[-1] if event_types else None,
        "usage": usage,
    }


def transcription_verbose(client, wav_bytes, extra):
    result = client.audio.transcriptions.create(
        model="whisper-1",
        file=("speech.wav", wav_bytes, "audio/wav"),
        response_format="verbose_json",
        extra_headers=extra or None,
    )
    return {
        "text": result.text,
        "language": result.language,
        "duration": result.duration,
        "segments": [
            {"id": s.id, "start": s.start, "end": s.end, "text": s.text} for s in (result.segments or [])
        ],
        "usage": usage_of(result),
    }


def speech(client, response_format, extra):
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts",
        voice="alloy",
        input=SPEECH_INPUT,
        response_format=response_format,
        extra_headers=extra or None,
    ) as response:
        content_type = response.headers.get("content-type")
        audio = b"".join(response.iter_bytes())
    body = audio[44:] if response_format == "wav" else audio
    leading_zero_bytes = len(body) - len(body.lstrip(b"\0"))
    return {
        "content_type": content_type,
        "bytes": len(audio),
        "sha256": hashlib.sha256(audio).hexdigest(),
        "starts_with": audio[:4].hex(),
        "leading_zero_bytes": leading_zero_bytes,
    }


def main():
    args = parse_args(__doc__)
    client = openai.OpenAI(base_url=args.base_url, api_key=API_KEY, max_retries=0, timeout=60)
    wav_bytes = speech_wav()
    emit(
        {
            "transcription": transcription(client, wav_bytes, args.headers),
            "transcription_stream": transcription_stream(client, wav_bytes, args.headers),
            "transcription_verbose": transcription_verbose(client, wav_bytes, args.headers),
            "speech_pcm": speech(client, "pcm", args.headers),
            "speech_wav": speech(client, "wav", args.headers),
        }
    )


if __name__ == "__main__":
    main()
