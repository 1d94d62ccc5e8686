#!/usr/bin/env python3
"""A Pipecat voice bot behind tokentap: SmallWebRTC transport, OpenAI speech to text, model and
text to speech, all pointed at tokentap (in front of the built-in mock: no key, offline).

The browser POSTs its SDP offer to tokentap's `/v1/realtime/calls`; `tokentap demo --webrtc-peer
URL` routes it here. Each connection runs one Pipecat pipeline: the transport's audio in, Silero
VAD (bundled with Pipecat, no download) ending the user's turn, `OpenAISTTService`, the context
aggregator, `OpenAILLMService`, `OpenAITTSService`, the transport's audio out. Every HTTP call of
the pipeline carries the trace context the offer came with (`traceparent`), so tokentap puts the
voice turn and the page's WebRTC measurements in one trace.

    python bot.py --proxy http://127.0.0.1:8787     # tokentap's proxy address
    python bot.py --proxy -                         # read it from stdin's first line

Prints {"listening": PORT} once its offer endpoint listens; exits with its parent (Linux).
"""

import argparse
import asyncio
import ctypes
import json
import os
import signal
import sys

import httpx
from aiohttp import web
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair, LLMUserAggregatorParams
from pipecat.services.openai.llm import OpenAILLMService
from pipecat.services.openai.stt import OpenAISTTService
from pipecat.services.openai.tts import OpenAITTSService
from pipecat.transports.base_transport import TransportParams
from pipecat.transports.smallwebrtc.connection import SmallWebRTCConnection
from pipecat.transports.smallwebrtc.transport import SmallWebRTCTransport
from pipecat.workers.runner import WorkerRunner


def die_with_parent():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


async def run_bot(connection, proxy, traceparent):
    headers = {"traceparent": traceparent} if traceparent else {}
    base_url = f"{proxy}/v1"
    transport = SmallWebRTCTransport(
        webrtc_connection=connection, params=TransportParams(audio_in_enabled=True, audio_out_enabled=True)
    )
    stt = OpenAISTTService(api_key="sk-demo", base_url=base_url, http_client=httpx.AsyncClient(headers=headers))
    llm = OpenAILLMService(api_key="sk-demo", base_url=base_url, default_headers={**headers, "x-mock-tokens": "16"})
    tts = OpenAITTSService(api_key="sk-demo", base_url=base_url, http_client=httpx.AsyncClient(headers=headers))
    context = LLMContext([{"role": "system", "content": "You are a helpful voice assistant. Answer in one sentence."}])
    aggregators = LLMContextAggregatorPair(
        context, user_params=LLMUserAggregatorParams(vad_analyzer=SileroVADAnalyzer())
    )
    pipeline = Pipeline(
        [transport.input(), stt, aggregators.user(), llm, tts, transport.output(), aggregators.assistant()]
    )
    worker = PipelineWorker(pipeline, params=PipelineParams(enable_metrics=True))

    @transport.event_handler("on_client_disconnected")
    async def on_client_disconnected(_transport, _client):
        await worker.cancel()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()


async def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--proxy", required=True, help="tokentap's proxy URL, or - to read it from stdin")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    die_with_parent()
    proxy = None if args.proxy == "-" else args.proxy.rstrip("/")
    known = asyncio.Event()
    bots = set()

    async def offer(request):
        sdp = await request.text()
        connection = SmallWebRTCConnection(ice_servers=[])
        try:
            await connection.initialize(sdp=sdp, type="offer")
        except Exception as e:
            return web.json_response({"error": {"type": "invalid_request_error", "message": str(e)}}, status=400)
        await known.wait()
        bot = asyncio.ensure_future(run_bot(connection, proxy, request.headers.get("traceparent")))
        bots.add(bot)
        bot.add_done_callback(bots.discard)
        answer = connection.get_answer()
        return web.Response(status=201, text=answer["sdp"], content_type="application/sdp")

    app = web.Application()
    app.router.add_post("/v1/realtime/calls", offer)
    app.router.add_post("/v1/realtime/calls/", offer)  # tokentap's route for exactly this path adds a "/"
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    await site.start()
    print(json.dumps({"listening": site._server.sockets[0].getsockname()[1]}), flush=True)
    if proxy is None:
        line = await asyncio.get_event_loop().run_in_executor(None, sys.stdin.readline)
        proxy = line.strip().rstrip("/")
    known.set()
    parent = os.getppid()
    while os.getppid() == parent:
        await asyncio.sleep(1)


if __name__ == "__main__":
    asyncio.run(main())
