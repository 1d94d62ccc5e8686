"""A WebRTC voice peer for tokentap's tests, on aiortc.

It serves an offer endpoint (`POST /v1/realtime/calls` with an `application/sdp` body, answered
201 with the answer SDP, as OpenAI's Realtime API does; or `POST /offer` with `{sdp, type}` JSON,
answered with JSON, as Pipecat and aiortc's examples do). For each end of the caller's speech
(an energy detector over the received audio) it waits `--delay-ms`, then sends `--silence-ms` of
silence and `--tone-ms` of a 440 Hz tone; between answers it sends silence, paced by the wall
clock in 20 ms frames. On the `oai-events` data channel the browser opened it sends OpenAI
Realtime's turn events: `input_audio_buffer.speech_stopped`, `response.created`,
`output_audio_buffer.started`, `output_audio_buffer.stopped`, `response.done`.

`--barge-in`: when the caller speaks while an answer plays, the answer stops after the frame in
which the speech was detected (`output_audio_buffer.cleared`, `response.done`), as a voice agent
stops talking when interrupted. `--jitter-ms N`: each frame is held for a random 0–N ms past its
time before it goes to the encoder (the network's jitter, made by the sender; frames keep their
order).

Prints one JSON line when listening ({"listening": port}), one per answer ({"answer": n,
"speech_end_detected_ms": …, "first_audible_sent_ms": …}) and one per interruption
({"barge_in": n, "speech_start_detected_ms": …, "last_audible_sent_ms": …}), wall-clock ms.
"""

import argparse
import asyncio
import fractions
import json
import math
import random
import struct
import sys
import time

import av
from aiohttp import web
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription

RATE = 48000
FRAME = 960  # 20 ms
VOICED_RMS = 0.01 * 32768  # -40 dBFS
HANGOVER_S = 0.3


def now_ms():
    return time.time() * 1000.0


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class AnswerTrack(MediaStreamTrack):
    """Silence, and the answers' audio when one is queued; stamps the first audible frame sent."""

    kind = "audio"

    def __init__(self, on_first_audible, jitter_ms=0.0):
        super().__init__()
        self.jitter_ms = jitter_ms
        self.last_audible_ms = None  # when the last frame of the answer's tone was sent
        self.start = None
        self.pts = 0
        self.pending = bytearray()
        self.audible_left = 0  # samples until the queued answer's first audible one
        self.on_first_audible = on_first_audible

    def play(self, silence_samples, tone_samples):
        tone = b"".join(
            struct.pack("<h", int(12000 * math.sin(2 * math.pi * 440 * i / RATE))) for i in range(tone_samples)
        )
        self.pending += bytes(2 * silence_samples) + tone
        self.audible_left = silence_samples

    def stop(self):
        """Drops what is left of the answer; True when it was still playing."""
        playing = len(self.pending) > 0 and self.audible_left is None
        self.pending.clear()
        self.audible_left = None
        return playing

    async def recv(self):
        if self.start is None:
            self.start = time.time()
        else:
            self.pts += FRAME
            wait = self.start + self.pts / RATE - time.time()
            if self.jitter_ms > 0:
                wait += random.uniform(0, self.jitter_ms) / 1000
            if wait > 0:
                await asyncio.sleep(wait)
        chunk = bytes(self.pending[: 2 * FRAME])
        del self.pending[: 2 * FRAME]
        first_audible = False
        if self.audible_left is not None and chunk:
            if self.audible_left < FRAME:
                first_audible = True
                self.audible_left = None
            else:
                self.audible_left -= FRAME
        if self.audible_left is None and chunk:
            self.last_audible_ms = now_ms()
        chunk = chunk.ljust(2 * FRAME, b"\0")
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME)
        frame.planes[0].update(chunk)
        frame.pts = self.pts
        frame.sample_rate = RATE
        frame.time_base = fractions.Fraction(1, RATE)
        if first_audible:
            # The frame goes to the encoder and out as soon as recv returns.
            self.on_first_audible(now_ms())
        return frame

    @property
    def playing_ms(self):
        return len(self.pending) / 2 / RATE * 1000


class Session:
    def __init__(self, args):
        self.args = args
        self.pc = RTCPeerConnection()
        self.channel = None
        self.answers = 0
        self.current = None
        self.track = AnswerTrack(self.first_audible, args.jitter_ms)
        self.playing = None  # the answer whose audio is queued or playing
        self.pc.addTrack(self.track)
        self.pc.on("track", self.on_track)
        self.pc.on("datachannel", self.on_datachannel)

    def send_event(self, event_type, **fields):
        if self.channel is not None and self.channel.readyState == "open":
            self.channel.send(json.dumps({"type": event_type, **fields}))

    def on_datachannel(self, channel):
        self.channel = channel

    def on_track(self, track):
        if track.kind == "audio":
            asyncio.ensure_future(self.listen(track))

    async def listen(self, track):
        voiced_s, last_voiced = 0.0, None
        while True:
            try:
                frame = await track.recv()
            except Exception:
                return
            data = bytes(frame.planes[0])[: frame.samples * 2 * len(frame.layout.channels)]
            count = len(data) // 2
            samples = struct.unpack(f"<{count}h", data[: 2 * count]) if frame.format.name == "s16" else ()
            rms = math.sqrt(sum(x * x for x in samples) / count) if samples else 0.0
            t = time.time()
            if rms > VOICED_RMS:
                if voiced_s == 0.0 and self.args.barge_in:
                    self.interrupted()
                voiced_s += frame.samples / frame.sample_rate
                last_voiced = t
            elif last_voiced is not None and voiced_s >= 0.1 and t - last_voiced >= HANGOVER_S:
                voiced_s, last_voiced = 0.0, None
                self.speech_ended()

    def speech_ended(self):
        self.answers += 1
        n = self.answers
        detected = now_ms()
        self.current = {"answer": n, "speech_end_detected_ms": detected}
        self.send_event("input_audio_buffer.speech_stopped")
        loop = asyncio.get_event_loop()
        loop.call_later(self.args.delay_ms / 1000, self.answer, n)

    def interrupted(self):
        n = self.playing
        detected = now_ms()
        if n is None or not self.track.stop():
            return
        self.playing = None
        emit({"barge_in": n, "speech_start_detected_ms": detected, "last_audible_sent_ms": self.track.last_audible_ms})
        self.send_event("output_audio_buffer.cleared")
        self.send_event("response.done", response={"id": f"resp_{n}", "status": "cancelled"})

    def answer(self, n):
        self.playing = n
        self.send_event("response.created", response={"id": f"resp_{n}"})
        silence = int(RATE * self.args.silence_ms / 1000)
        tone = int(RATE * self.args.tone_ms / 1000)
        self.track.play(silence, tone)
        end_s = (self.args.silence_ms + self.args.tone_ms) / 1000 + 0.05
        asyncio.get_event_loop().call_later(end_s, self.answer_done, n)

    def first_audible(self, t_ms):
        self.send_event("output_audio_buffer.started")
        if self.current is not None:
            self.current["first_audible_sent_ms"] = t_ms
            emit(self.current)
            self.current = None

    def answer_done(self, n):
        if self.playing != n:
            return  # interrupted: done already
        self.playing = None
        self.send_event("output_audio_buffer.stopped")
        self.send_event("response.done", response={"id": f"resp_{n}"})


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", required=True)
    parser.add_argument("--delay-ms", type=float, default=300)
    parser.add_argument("--silence-ms", type=float, default=200)
    parser.add_argument("--tone-ms", type=float, default=800)
    parser.add_argument("--barge-in", action="store_true")
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    args = parser.parse_args()
    sessions = []

    async def offer(request):
        sdp_body = request.content_type == "application/sdp"
        if sdp_body:
            offer = RTCSessionDescription(sdp=await request.text(), type="offer")
        else:
            params = await request.json()
            offer = RTCSessionDescription(sdp=params["sdp"], type=params["type"])
        session = Session(args)
        sessions.append(session)
        await session.pc.setRemoteDescription(offer)
        await session.pc.setLocalDescription(await session.pc.createAnswer())
        answer = session.pc.localDescription
        if sdp_body:
            call_id = f"rtc_{len(sessions)}"
            return web.Response(
                status=201,
                text=answer.sdp,
                content_type="application/sdp",
                headers={"Location": f"/v1/realtime/calls/{call_id}"},
            )
        return web.json_response({"sdp": answer.sdp, "type": answer.type, "pc_id": f"pc_{len(sessions)}"})

    app = web.Application()
    app.router.add_post("/v1/realtime/calls", offer)
    app.router.add_post("/offer", offer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, args.host, 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    emit({"listening": port})
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
