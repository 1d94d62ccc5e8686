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
//   APP_PAGE=react ...      # serve the React page of examples/app-react (its dist/, `npm run build` there)
//
// Environment: TOKENTAP_URL (tokentap's proxy origin; the model's base URL is TOKENTAP_URL/v1, the
// page loads the probe from there), OPENAI_API_KEY (passed on to the provider; tokentap never
// records it), APP_MODEL, APP_COMPRESSION ("1": compression() middleware), APP_STREAM ("pipe": the
// SDK's pipeUIMessageStreamToResponse, which flushes compression() after every event).
// Prints "app listening on http://HOST:PORT" once it accepts connections (--port 0: a free port).
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
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
// APP_REACT_DIST: another build folder of the React page (the tests build into their own).
const reactDist = process.env.APP_REACT_DIST
  ? new URL(`file://${process.env.APP_REACT_DIST.replace(/\/?$/, "/")}`)
  : new URL("../app-react/dist/", import.meta.url);
const reactPage = process.env.APP_PAGE === "react";
const pageFile = reactPage ? new URL("index.html", reactDist) : new URL("./index.html", import.meta.url);
const page = readFileSync(pageFile, "utf8").replaceAll("{{TOKENTAP_URL}}", escapeAttr(tokentapUrl));

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
if (reactPage) {
  // The bundle and the probe's wasm, which Vite emitted next to it.
  app.use("/assets", express.static(fileURLToPath(new URL("assets/", reactDist)), { immutable: true, maxAge: "1y" }));
}

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
