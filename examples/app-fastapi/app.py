"""A chat app server between a page and the model, with tokentap's browser probe on the page.

The page (served here, on the app's own origin) asks for an answer by one of four transports,
and this server calls the model with the official openai SDK through tokentap and re-encodes every
answer delta in its own small events:
    POST /api/chat           fetch, SSE events `data: {"text": "..."}` (the default)
    GET  /api/chat/events    EventSource: named events `event: delta` / `data: {"text": "..."}`,
                             then `event: done`
    WS   /api/chat/ws        a WebSocket: the page sends {"message": ...}, the server sends one
                             message `{"text": "..."}` per delta, then `{"done": true}`, and closes
    POST /api/chat/lines     fetch, JSON lines of the app's own shape:
                             `{"seq": N, "piece": "..."}` (application/x-ndjson)
OpenTelemetry carries the page's `traceparent` (set by the probe) through this server to the model
call, so tokentap joins the page's report to its record of that call. An EventSource or a WebSocket
cannot send headers: the probe puts the trace context in the URL's `tokentap_traceparent` query
parameter, and this server continues the trace from there (`page_context`).

    TOKENTAP_URL=http://127.0.0.1:8787 python app.py --port 8000
    APP_GZIP=1 ...   # the classic mistake: Starlette's GZipMiddleware on the event stream

Environment:
    TOKENTAP_URL    tokentap's proxy origin (the model's base URL is TOKENTAP_URL/v1; the page loads
                    the probe from TOKENTAP_URL and reports there)
    OPENAI_API_KEY  passed on to the provider (tokentap never records it); default "sk-example"
    APP_MODEL       model name (default "gpt-4o-mini")
    APP_GZIP        "1": compress responses with GZipMiddleware (holds the stream; see README.md)
    APP_PROPAGATION "header": no OpenTelemetry; send the page's traceparent as x-tokentap-page-trace
    APP_FIELD       the JSON field that carries each delta (default "text"); any other name also adds
                    the model's chunk id to every event, as apps of their own shape often do (the
                    probe has no reader for such a shape and infers which field is the text)

Prints "app listening on http://HOST:PORT" once it accepts connections (--port 0 picks a free port).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import pathlib
import socket
import sys

# Tracing first: the instrumentors patch the libraries before the app uses them.
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor
from opentelemetry.sdk.trace import TracerProvider

# APP_PROPAGATION=header: no OpenTelemetry; the page's traceparent is copied onto the model call
# as x-tokentap-page-trace instead (the fallback for apps that do not propagate trace context).
PROPAGATION = "header" if os.environ.get("APP_PROPAGATION") == "header" else "otel"
if PROPAGATION == "otel":
    trace.set_tracer_provider(TracerProvider())  # add your exporter here; propagation needs none
    HTTPX2ClientInstrumentor().instrument()

import uvicorn  # noqa: E402
from fastapi import FastAPI, Request, WebSocket  # noqa: E402
from fastapi.responses import HTMLResponse, StreamingResponse  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from starlette.middleware.gzip import GZipMiddleware  # noqa: E402

TOKENTAP_URL = os.environ.get("TOKENTAP_URL", "http://127.0.0.1:8787").rstrip("/")
MODEL = os.environ.get("APP_MODEL", "gpt-4o-mini")
GZIP = os.environ.get("APP_GZIP", "") == "1"
FIELD = os.environ.get("APP_FIELD", "text")
PAGE = (pathlib.Path(__file__).parent / "index.html").read_text(encoding="utf-8")

client = AsyncOpenAI(base_url=f"{TOKENTAP_URL}/v1", api_key=os.environ.get("OPENAI_API_KEY", "sk-example"))
app = FastAPI()
if GZIP:
    # Starlette < 0.46 compresses text/event-stream too, and flushes the compressor only when the
    # response ends: the page gets the whole answer at once.
    app.add_middleware(GZipMiddleware, minimum_size=0)
if PROPAGATION == "otel":
    FastAPIInstrumentor.instrument_app(app)


@app.get("/", response_class=HTMLResponse)
async def page() -> str:
    page = PAGE.replace("{{TOKENTAP_URL}}", html.escape(TOKENTAP_URL, quote=True))
    return page.replace("{{APP_FIELD}}", html.escape(FIELD, quote=True))


def page_headers(traceparent: str | None) -> dict[str, str]:
    """Headers for the model call: with APP_PROPAGATION=header, the page's trace named explicitly."""
    if PROPAGATION == "header" and traceparent:
        return {"x-tokentap-page-trace": traceparent}
    return {}


async def model_stream(message: str, traceparent: str | None, from_url: bool):
    """Opens the model's stream. `from_url`: the page's trace context came in the URL (an
    EventSource or a WebSocket, which cannot send headers), so it is made the current context
    for the call; OpenTelemetry's httpx instrumentation then continues the page's trace."""
    token = None
    if from_url and PROPAGATION == "otel" and traceparent:
        token = otel_context.attach(propagate.extract({"traceparent": traceparent}))
    try:
        return await client.chat.completions.create(
            model=MODEL,
            stream=True,
            messages=[{"role": "user", "content": message[:4000]}],
            extra_headers=page_headers(traceparent),
        )
    finally:
        if token is not None:
            otel_context.detach(token)


async def deltas(stream):
    """The answer's text deltas, with the model chunk's id."""
    async for chunk in stream:
        for choice in chunk.choices:
            if choice.delta and choice.delta.content:
                yield chunk.id, choice.delta.content


def text_event(chunk_id: str, text: str) -> dict:
    event = {FIELD: text}
    if FIELD != "text":
        event["mid"] = chunk_id
    return event


@app.post("/api/chat")
async def chat(request: Request) -> StreamingResponse:
    body = await request.json()
    # Called here, inside the request's server span: the SDK's request carries its trace context.
    stream = await model_stream(str(body.get("message", "")), request.headers.get("traceparent"), False)

    async def events():
        async for chunk_id, text in deltas(stream):
            yield f"data: {json.dumps(text_event(chunk_id, text))}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers={"cache-control": "no-store"})


@app.get("/api/chat/events")
async def chat_events(message: str = "", tokentap_traceparent: str | None = None) -> StreamingResponse:
    stream = await model_stream(message, tokentap_traceparent, True)

    async def events():
        async for chunk_id, text in deltas(stream):
            yield f"event: delta\ndata: {json.dumps(text_event(chunk_id, text))}\n\n"
        # The page closes its EventSource here; otherwise the browser would reconnect.
        yield "event: done\ndata: {}\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers={"cache-control": "no-store"})


@app.websocket("/api/chat/ws")
async def chat_socket(socket: WebSocket) -> None:
    await socket.accept()
    request = await socket.receive_json()
    stream = await model_stream(str(request.get("message", "")), socket.query_params.get("tokentap_traceparent"), True)
    async for chunk_id, text in deltas(stream):
        await socket.send_text(json.dumps(text_event(chunk_id, text)))
    await socket.send_text(json.dumps({"done": True}))
    await socket.close()


@app.post("/api/chat/lines")
async def chat_lines(request: Request) -> StreamingResponse:
    body = await request.json()
    stream = await model_stream(str(body.get("message", "")), request.headers.get("traceparent"), False)

    async def lines():
        seq = 0
        async for _, text in deltas(stream):
            seq += 1
            yield json.dumps({"seq": seq, "piece": text}) + "\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson", headers={"cache-control": "no-store"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    host, port = sock.getsockname()[:2]
    # Listening before uvicorn starts: a connection made right after the announcement waits in the
    # backlog instead of being refused.
    sock.listen(128)
    print(f"app listening on http://{host}:{port} (gzip {'on' if GZIP else 'off'}, trace by {PROPAGATION})", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])

if __name__ == "__main__":
    sys.exit(main())
