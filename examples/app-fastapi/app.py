"""A chat app server between a page and the model, with tokentap's browser probe on the page.

The page (served here, on the app's own origin) posts to /api/chat. This server calls the model
with the official openai SDK through tokentap and re-encodes every answer delta as its own small
SSE event (`data: {"text": "..."}`) to the page. OpenTelemetry carries the page's `traceparent`
(set by the probe) through this server to the model call, so tokentap joins the page's report to
its record of that call.

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
from opentelemetry import trace
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
from fastapi import FastAPI, Request  # noqa: E402
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


@app.post("/api/chat")
async def chat(request: Request) -> StreamingResponse:
    body = await request.json()
    message = str(body.get("message", ""))[:4000]
    # Called here, inside the request's server span: the SDK's request carries its trace context.
    headers = {}
    if PROPAGATION == "header" and request.headers.get("traceparent"):
        headers["x-tokentap-page-trace"] = request.headers["traceparent"]
    stream = await client.chat.completions.create(
        model=MODEL, stream=True, messages=[{"role": "user", "content": message}], extra_headers=headers
    )

    async def events():
        async for chunk in stream:
            for choice in chunk.choices:
                if choice.delta and choice.delta.content:
                    event = {FIELD: choice.delta.content}
                    if FIELD != "text":
                        event["mid"] = chunk.id
                    yield f"data: {json.dumps(event)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers={"cache-control": "no-store"})


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
