#!/usr/bin/env python3
"""A small WebRTC voice agent for tokentap's demo (aiortc), talking to its models through tokentap.

The browser (the demo's voice page, "WebRTC session") POSTs its SDP offer to tokentap's
`/v1/realtime/calls`; `tokentap demo --webrtc-peer URL` routes that path here, so the offer is
recorded with the page's trace. Media and the `oai-events` data channel then go peer to peer.

For each end of the caller's speech (an energy detector over the received audio: 500 ms of quiet
after at least 200 ms of voice) the agent makes three HTTP calls through tokentap, as a chained
voice agent does: speech to text (`/v1/audio/transcriptions`, the speech as a WAV upload), the
model (`/v1/chat/completions`, streamed) and text to speech (`/v1/audio/speech`, 24 kHz PCM,
streamed), and plays the speech back on its audio track as it arrives. Every call carries the
trace context the offer carried (`traceparent`), so tokentap puts the whole turn in one trace.
On the data channel it sends OpenAI Realtime's events: `input_audio_buffer.speech_started`,
`input_audio_buffer.speech_stopped`, `conversation.item.input_audio_transcription.completed`,
`response.created`, `response.output_audio_transcript.delta`, `output_audio_buffer.started`,
`output_audio_buffer.stopped`, `response.done`.

While an answer plays the agent does not listen (half duplex: the page's microphone has no echo
cancellation, so it would hear its own answer).

    python agent.py --proxy http://127.0.0.1:8787     # tokentap's proxy address
    python agent.py --proxy -                         # read the proxy address from stdin's first line

Prints one line when its offer endpoint listens: {"listening": PORT}; logs go to stderr. Exits when
its parent process does (Linux), or on SIGTERM / SIGINT.
"""

import argparse
import array
import asyncio
import ctypes
import fractions
import io
import json
import math
import os
import secrets
import signal
import sys
import time
import wave

import aiohttp
import av
from aiohttp import web
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription

OUT_RATE = 24000  # the speech endpoint's PCM; aiortc's Opus encoder resamples it to 48 kHz
OUT_FRAME = OUT_RATE // 50  # 20 ms
VOICED_RMS = 0.01 * 32768  # about -40 dBFS
MIN_VOICE_S = 0.2
END_QUIET_S = 0.5
UPLOAD_RATE = 16000


def log(message):
    sys.stderr.write(f"[voice-webrtc] {message}\n")
    sys.stderr.flush()


def die_with_parent():
    """Linux: SIGTERM when the parent process dies, so the demo's agent ends with tokentap."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class AnswerTrack(MediaStreamTrack):
    """The agent's voice: silence, or the queued speech, in 20 ms frames paced by the wall clock."""

    kind = "audio"

    def __init__(self):
        super().__init__()
        self.start = None
        self.pts = 0
        self.pending = bytearray()
        self.on_drained = None

    def queue(self, pcm):
        self.pending += pcm

    def clear(self):
        self.pending.clear()

    @property
    def playing(self):
        return len(self.pending) > 0

    async def recv(self):
        if self.start is None:
            self.start = time.time()
        else:
            self.pts += OUT_FRAME
            wait = self.start + self.pts / OUT_RATE - time.time()
            if wait > 0:
                await asyncio.sleep(wait)
        had = len(self.pending) > 0
        chunk = bytes(self.pending[: 2 * OUT_FRAME])
        del self.pending[: 2 * OUT_FRAME]
        if had and not self.pending and self.on_drained is not None:
            self.on_drained()
        frame = av.AudioFrame(format="s16", layout="mono", samples=OUT_FRAME)
        frame.planes[0].update(chunk.ljust(2 * OUT_FRAME, b"\0"))
        frame.pts = self.pts
        frame.sample_rate = OUT_RATE
        frame.time_base = fractions.Fraction(1, OUT_RATE)
        return frame


class Call:
    """One peer connection: listens for the end of speech, answers through the model chain."""

    def __init__(self, agent, traceparent):
        self.agent = agent
        self.trace = parse_traceparent(traceparent)
        # No STUN server: the browser is on this machine (host candidates meet), and the demo stays offline.
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.channel = None
        self.track = AnswerTrack()
        self.track.on_drained = self.answer_played
        self.pc.addTrack(self.track)
        self.pc.on("track", self.on_track)
        self.pc.on("datachannel", self.on_datachannel)
        self.pc.on("connectionstatechange", self.on_state)
        self.history = [{"role": "system", "content": "You are a helpful voice assistant. Answer in one sentence."}]
        self.answering = False
        self.responses = 0

    def headers(self):
        """The trace context the offer came with, on every call: tokentap's spans of the calls are
        children of the span tokentap gave the offer, in the page's trace."""
        h = {"authorization": "Bearer sk-demo"}
        if self.trace is not None:
            trace_id, parent = self.trace
            h["traceparent"] = f"00-{trace_id}-{parent}-01"
        return h

    def send(self, event_type, **fields):
        if self.channel is not None and self.channel.readyState == "open":
            self.channel.send(json.dumps({"type": event_type, "event_id": "evt_" + secrets.token_hex(6), **fields}))

    def on_datachannel(self, channel):
        self.channel = channel

    async def on_state(self):
        if self.pc.connectionState in ("failed", "closed"):
            await self.pc.close()
            self.agent.calls.discard(self)

    def on_track(self, track):
        if track.kind == "audio":
            asyncio.ensure_future(self.listen(track))

    async def listen(self, track):
        """An energy detector over the received audio; keeps the speech for the transcription."""
        voiced_s, quiet_s, speech = 0.0, 0.0, None
        while True:
            try:
                frame = await track.recv()
            except Exception:
                return
            if self.answering:
                voiced_s, quiet_s, speech = 0.0, 0.0, None
                continue
            mono = downmix(frame)
            rms = math.sqrt(sum(x * x for x in mono) / len(mono)) if mono else 0.0
            seconds = frame.samples / frame.sample_rate
            if rms > VOICED_RMS:
                if speech is None:
                    speech = array.array("h")
                    self.send("input_audio_buffer.speech_started")
                voiced_s += seconds
                quiet_s = 0.0
            elif speech is not None:
                quiet_s += seconds
            if speech is not None:
                # To 16 kHz for the upload (every third sample of 48 kHz: speech-to-text input).
                step = max(1, frame.sample_rate // UPLOAD_RATE)
                speech.extend(mono[::step])
                if quiet_s >= END_QUIET_S:
                    if voiced_s >= MIN_VOICE_S:
                        self.answering = True
                        self.send("input_audio_buffer.speech_stopped")
                        asyncio.ensure_future(self.answer(speech, frame.sample_rate // step))
                    voiced_s, quiet_s, speech = 0.0, 0.0, None

    async def answer(self, speech, rate):
        try:
            await self.respond(speech, rate)
        except Exception as e:  # the demo goes on with the next turn
            log(f"answer failed: {e!r}")
            self.answering = False
            self.send("error", error={"type": "server_error", "message": str(e)})

    async def respond(self, speech, rate):
        proxy = await self.agent.proxy()
        http = self.agent.http
        self.responses += 1
        response_id = f"resp_{self.responses}"

        # Speech to text.
        form = aiohttp.FormData()
        form.add_field("model", "gpt-4o-mini-transcribe")
        form.add_field("file", wav_bytes(speech, rate), filename="speech.wav", content_type="audio/wav")
        async with http.post(f"{proxy}/v1/audio/transcriptions", data=form, headers=self.headers()) as r:
            r.raise_for_status()
            transcript = (await r.json()).get("text", "")
        self.send("conversation.item.input_audio_transcription.completed", item_id="item_" + response_id,
                  content_index=0, transcript=transcript)
        self.history.append({"role": "user", "content": transcript})

        # The model, streamed.
        self.send("response.created", response={"id": response_id, "object": "realtime.response",
                                                 "status": "in_progress"})
        body = {"model": "gpt-4o-mini", "stream": True, "messages": self.history}
        headers = {**self.headers(), "x-mock-tokens": "16"}
        text = ""
        async with http.post(f"{proxy}/v1/chat/completions", json=body, headers=headers) as r:
            r.raise_for_status()
            async for raw in r.content:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                for choice in json.loads(line[6:]).get("choices", []):
                    delta = (choice.get("delta") or {}).get("content")
                    if delta:
                        text += delta
                        self.send("response.output_audio_transcript.delta", response_id=response_id, delta=delta)
        self.history.append({"role": "assistant", "content": text})

        # Text to speech, played as it arrives.
        body = {"model": "gpt-4o-mini-tts", "voice": "alloy", "input": text, "response_format": "pcm"}
        started = False
        odd = b""
        async with http.post(f"{proxy}/v1/audio/speech", json=body, headers=self.headers()) as r:
            r.raise_for_status()
            async for chunk in r.content.iter_any():
                chunk = odd + chunk
                cut = len(chunk) - len(chunk) % 2
                odd = chunk[cut:]
                if not started:
                    started = True
                    self.send("output_audio_buffer.started", response_id=response_id)
                self.track.queue(chunk[:cut])
        self.current = response_id
        if not started or not self.track.playing:
            self.answer_played()

    def answer_played(self):
        if not self.answering:
            return
        response_id = f"resp_{self.responses}"
        self.send("output_audio_buffer.stopped", response_id=response_id)
        self.send("response.done", response={"id": response_id, "object": "realtime.response", "status": "completed"})
        # A short pause before listening again: the tail of the answer is still in the page's buffer.
        asyncio.get_event_loop().call_later(0.3, self.listen_again)

    def listen_again(self):
        self.answering = False


def downmix(frame):
    data = array.array("h")
    data.frombytes(bytes(frame.planes[0])[: frame.samples * 2 * len(frame.layout.channels)])
    channels = len(frame.layout.channels)
    if channels == 1 or frame.format.name != "s16":
        return data if frame.format.name == "s16" else array.array("h")
    return data[::channels]


def wav_bytes(samples, rate):
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return out.getvalue()


def parse_traceparent(value):
    """(trace id, parent span id) of a W3C traceparent, or None."""
    parts = (value or "").strip().split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None
    return parts[1].lower(), parts[2].lower()


class Agent:
    def __init__(self, proxy_arg):
        self.proxy_arg = proxy_arg
        self.proxy_url = None if proxy_arg == "-" else proxy_arg.rstrip("/")
        self.proxy_known = asyncio.Event()
        if self.proxy_url is not None:
            self.proxy_known.set()
        self.calls = set()
        self.http = None

    async def proxy(self):
        await self.proxy_known.wait()
        return self.proxy_url

    async def read_proxy_from_stdin(self):
        line = await asyncio.get_event_loop().run_in_executor(None, sys.stdin.readline)
        self.proxy_url = line.strip().rstrip("/")
        self.proxy_known.set()
        log(f"models through {self.proxy_url}")

    async def offer(self, request):
        """`POST /v1/realtime/calls` (SDP in, 201 + SDP out) or `POST /offer` ({sdp, type} JSON)."""
        sdp_body = request.content_type == "application/sdp"
        if sdp_body:
            offer = RTCSessionDescription(sdp=await request.text(), type="offer")
        else:
            params = await request.json()
            offer = RTCSessionDescription(sdp=params["sdp"], type=params["type"])
        call = Call(self, request.headers.get("traceparent"))
        try:
            await call.pc.setRemoteDescription(offer)
            await call.pc.setLocalDescription(await call.pc.createAnswer())
        except Exception as e:  # not an offer this peer can answer
            await call.pc.close()
            return web.json_response({"error": {"type": "invalid_request_error", "message": str(e)}}, status=400)
        self.calls.add(call)
        answer = call.pc.localDescription
        call_id = "rtc_" + secrets.token_hex(8)
        log(f"call {call_id}: answered the offer")
        if sdp_body:
            return web.Response(status=201, text=answer.sdp, content_type="application/sdp",
                                headers={"Location": f"/v1/realtime/calls/{call_id}"})
        return web.json_response({"sdp": answer.sdp, "type": answer.type, "pc_id": call_id})


async def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--proxy", required=True, help="tokentap's proxy URL, or - to read it from stdin")
    parser.add_argument("--host", default="127.0.0.1", help="address of the offer endpoint")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args()
    die_with_parent()
    agent = Agent(args.proxy)
    agent.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
    app = web.Application()
    app.router.add_post("/v1/realtime/calls", agent.offer)
    # tokentap's route for exactly this path forwards it with a trailing slash (prefix → base path + "/").
    app.router.add_post("/v1/realtime/calls/", agent.offer)
    app.router.add_post("/offer", agent.offer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print(json.dumps({"listening": port}), flush=True)
    if agent.proxy_url is None:
        await agent.read_proxy_from_stdin()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_event_loop().add_signal_handler(sig, stop.set)
    parent = os.getppid()
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except asyncio.TimeoutError:
            if os.getppid() != parent:
                break
    for call in list(agent.calls):
        await call.pc.close()
    await agent.http.close()
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
