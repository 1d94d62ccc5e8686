// A chat app server between a page and the model, with tokentap's browser probe on the page.
//
// The page (served here, on the app's own origin) posts its messages to /api/chat. This server
// calls the model through tokentap with the Vercel AI SDK (`streamText` with `@ai-sdk/openai`'s
// Chat Completions model) and streams the AI SDK's UI message stream to the page (SSE events
// `{"type":"text-delta","delta":...}`): by default its `toUIMessageStreamResponse()` piped to
// Express, with APP_STREAM=pipe its `pipeUIMessageStreamToResponse(res)`.
//
//   TOKENTAP_URL=http://127.0.0.1:8787 node server.mjs --port 3000
//   APP_COMPRESSION=1 ...   # the classic mistake: Express's compression() on the event stream
//
// Environment: TOKENTAP_URL (tokentap's proxy origin; the model's base URL is TOKENTAP_URL/v1, the
// page loads the probe from there), OPENAI_API_KEY (passed on to the provider; tokentap never
// records it), APP_MODEL, APP_COMPRESSION ("1": compression() middleware), APP_STREAM ("pipe": the
// SDK's pipeUIMessageStreamToResponse, which flushes compression() after every event).
// Prints "app listening on http://HOST:PORT" once it accepts connections (--port 0: a free port).
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { Readable } from "node:stream";
import { parseArgs } from "node:util";
import compression from "compression";
import express from "express";
import { createOpenAI } from "@ai-sdk/openai";
import { convertToModelMessages, streamText } from "ai";

const { values: args } = parseArgs({
  options: { host: { type: "string", default: "127.0.0.1" }, port: { type: "string", default: "3000" } },
});
const tokentapUrl = (process.env.TOKENTAP_URL ?? "http://127.0.0.1:8787").replace(/\/+$/, "");
const modelName = process.env.APP_MODEL ?? "gpt-4o-mini";
const compressed = process.env.APP_COMPRESSION === "1";
const streamWith = process.env.APP_STREAM === "pipe" ? "pipe" : "response";
const escapeAttr = (s) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const page = readFileSync(new URL("./index.html", import.meta.url), "utf8").replaceAll("{{TOKENTAP_URL}}", escapeAttr(tokentapUrl));

const openai = createOpenAI({ baseURL: `${tokentapUrl}/v1`, apiKey: process.env.OPENAI_API_KEY ?? "sk-example" });

// The page's trace, continued: the same trace id with a new span id for this server's model call
// (W3C trace context). An app running OpenTelemetry's Node SDK with its HTTP/undici
// instrumentation gets this for free; without it, this is the one explicit step.
function childTraceparent(incoming) {
  const m = /^00-([0-9a-f]{32})-[0-9a-f]{16}-([0-9a-f]{2})$/.exec(String(incoming ?? "").trim());
  if (!m) return undefined;
  return `00-${m[1]}-${randomBytes(8).toString("hex")}-${m[2]}`;
}

const app = express();
if (compressed) {
  // compression() compresses text/event-stream too (brotli or gzip), and its compressor is flushed
  // only when the app calls res.flush() or the response ends: piped without a flush per event,
  // the page gets the answer at once.
  app.use(compression());
}
app.use(express.json({ limit: "256kb" }));

app.get("/", (_req, res) => res.type("html").send(page));

app.post("/api/chat", async (req, res) => {
  const traceparent = childTraceparent(req.get("traceparent"));
  const result = streamText({
    model: openai.chat(modelName),
    messages: await convertToModelMessages(req.body?.messages ?? []),
    headers: traceparent ? { traceparent } : {},
  });
  if (streamWith === "pipe") {
    // The SDK's Node helper: it calls res.flush() after every write when compression() added it.
    result.pipeUIMessageStreamToResponse(res);
    return;
  }
  // The UI message stream response (a web Response, as a fetch-style route handler returns it),
  // piped to Express: no flush per event.
  const response = result.toUIMessageStreamResponse();
  res.status(response.status);
  response.headers.forEach((value, name) => res.setHeader(name, value));
  Readable.fromWeb(response.body).pipe(res);
});

// Express 5 calls back with the error when the server cannot listen (e.g. the port is taken).
const server = app.listen(Number(args.port), args.host, (error) => {
  if (error) {
    console.error(`app: cannot listen on ${args.host}:${args.port}: ${error.message}`);
    process.exit(1);
  }
  const { address, port } = server.address();
  console.log(`app listening on http://${address}:${port} (compression ${compressed ? "on" : "off"})`);
});
