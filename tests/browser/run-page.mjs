// Drives one page in headless Chromium (the system's /usr/bin/chromium, through playwright-core)
// and prints one JSON object on stdout: what the page returned, the probe reports it sent, and
// the console. tests/src/browser.rs runs it; see there for the fields.
//
//   node tests/browser/run-page.mjs '{"origin":"http://127.0.0.1:8787","path":"/_tokentap/demo/", ...}'
//
// Options (JSON, first argument):
//   origin           tokentap's proxy address; every request the page makes goes there
//   path             the page's path (with query) on that origin
//   page_file        serve this file at `path` instead of asking tokentap (test pages)
//   chromium_args    more Chromium flags (e.g. a WAV file as the fake microphone)
//   probe_dir        serve /_tokentap/probe/* from this folder when tokentap answers 404
//   reports          how many probe reports to wait for (default 1)
//   report_mode      "observe": reports go to tokentap, their bodies and answers are recorded;
//                    "intercept": reports are answered here with 204 and never reach tokentap
//   result_expr      JS expression awaited in the page after load (default "window.__done")
//   timeout_ms       overall deadline (default 30000)
//   chromium         executable (default $TOKENTAP_CHROMIUM or /usr/bin/chromium)
import { readFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, extname } from "node:path";
import { chromium } from "playwright-core";

const options = JSON.parse(process.argv[2] ?? "{}");
const origin = options.origin;
const reportsWanted = options.reports ?? 1;
const reportMode = options.report_mode ?? "observe";
const timeoutMs = options.timeout_ms ?? 30000;
const executablePath = options.chromium ?? process.env.TOKENTAP_CHROMIUM ?? "/usr/bin/chromium";
const types = { ".js": "text/javascript", ".wasm": "application/wasm", ".html": "text/html; charset=utf-8" };

const out = { result: null, reports: [], report_answers: [], probe_source: "tokentap", console: [], page_errors: [], failed_requests: [] };
const userDataDir = mkdtempSync(join(tmpdir(), "tokentap-chromium-"));
let context;
// Requests the page started and that have not finished or failed: named when the run times out.
const pending = new Map();
const started = Date.now();
const deadline = setTimeout(() => {
  const waiting = [...pending.values()].map((r) => `${r.method()} ${r.url()}`);
  finish(`timed out after ${timeoutMs} ms; requests still open: ${JSON.stringify(waiting)}`);
}, timeoutMs);

// The first cause wins: closing the browser on a timeout makes the awaited call fail too, and that
// later error must not hide why the run ended.
let finishing = false;
async function finish(error) {
  if (finishing) return;
  finishing = true;
  clearTimeout(deadline);
  if (error) out.error = `${error} (after ${Date.now() - started} ms)`;
  try { await context?.close(); } catch {}
  rmSync(userDataDir, { recursive: true, force: true });
  process.stdout.write(JSON.stringify(out) + "\n");
  process.exit(0);
}

try {
  // A fresh profile per run; flags that keep Chromium quiet on a machine without network.
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--autoplay-policy=no-user-gesture-required",
      ...(options.chromium_args ?? [])],
  });
  const page = context.pages()[0] ?? await context.newPage();
  page.on("console", (m) => out.console.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => out.page_errors.push(String(e)));
  page.on("request", (r) => pending.set(r, r));
  page.on("requestfinished", (r) => pending.delete(r));
  page.on("requestfailed", (r) => {
    pending.delete(r);
    out.failed_requests.push(`${r.method()} ${r.url()}: ${r.failure()?.errorText}`);
  });
  page.on("crash", () => finish("the page crashed"));
  context.on("close", () => finish("the browser closed"));

  let reportArrived;
  const reportWaiters = [];
  const reportsDone = new Promise((resolve) => { reportArrived = () => { if (out.reports.length >= reportsWanted) resolve(); }; });
  const isReport = (req) => req.method() === "POST" && new URL(req.url()).pathname === "/_tokentap/v1/probe";
  // A cross-origin beacon's body is not on the finished request: the route below keeps it.
  const routedBodies = [];
  const keepReport = (req) => {
    const body = req.postData() || routedBodies.shift() || "";
    try { out.reports.push(JSON.parse(body)); } catch { out.reports.push({ unparsable: body }); }
  };

  if (options.page_file) {
    const pagePath = options.path.split("?")[0];
    await page.route((url) => url.origin === origin && url.pathname === pagePath, (route) =>
      route.fulfill({ status: 200, contentType: types[".html"], body: readFileSync(options.page_file) }));
  }
  if (options.probe_dir) {
    await page.route((url) => url.origin === origin && url.pathname.startsWith("/_tokentap/probe/"), async (route) => {
      const response = await route.fetch();
      if (response.status() !== 404) return route.fulfill({ response });
      out.probe_source = "disk";
      const name = new URL(route.request().url()).pathname.slice("/_tokentap/probe/".length);
      route.fulfill({ status: 200, contentType: types[extname(name)] ?? "application/octet-stream", body: readFileSync(join(options.probe_dir, name)) });
    });
  }
  if (reportMode === "intercept") {
    await page.route((url) => url.origin === origin && url.pathname === "/_tokentap/v1/probe", (route) => {
      keepReport(route.request());
      route.fulfill({ status: 204 });
      reportArrived();
    });
  } else {
    await page.route((url) => url.pathname === "/_tokentap/v1/probe", (route) => {
      const body = route.request().postData();
      if (body) routedBodies.push(body);
      route.continue();
    });
    page.on("requestfinished", async (req) => {
      if (!isReport(req)) return;
      keepReport(req);
      const response = await req.response();
      out.report_answers.push({ status: response?.status(), body: await response?.text().catch(() => null) });
      reportArrived();
    });
    page.on("requestfailed", (req) => { if (isReport(req)) { keepReport(req); out.report_answers.push({ status: null }); reportArrived(); } });
  }

  await page.goto(origin + options.path);
  out.result = await page.evaluate(options.result_expr ?? "window.__done");
  if (reportsWanted > 0) await reportsDone;
  await finish();
} catch (e) {
  await finish(e?.stack ?? e);
}
