// Drives tokentap's dashboard (admin listener, /_tokentap/) in headless Chromium and prints one
// JSON object on stdout with what each view showed. tests/tests/dashboard.rs runs it.
//
//   node tests/browser/dashboard.mjs '{"admin":"http://127.0.0.1:8788","request_ids":["…"],"artifacts":"tests/artifacts"}'
//
// Options (JSON, first argument):
//   admin         the admin listener's origin
//   request_ids   request pages to open
//   turn_ids      turn pages to open (and the turns list, when given)
//   summary_hash  the summary's hash route, e.g. "#/summary?window=all&group_by=route" (default "#/summary")
//   artifacts     folder for screenshots (list.png, request-<id>.png, summary.png)
//   show_warmup   after reading the summary, click its "Show them" (warm-up) link and read it again
//                 (into `summary_with_warmup`)
//   timeout_ms    overall deadline (default 60000)
//   viewport_width  the window's width in CSS pixels (default 1300)
//
// `texts` holds the visible text of every view read (list, request:<id>, turns, turn:<id>,
// summary), so tests can check that nothing prints "null", "undefined" or "NaN"; `overflow` holds,
// per view, how many pixels the page is wider than the window.
//   chromium      executable (default $TOKENTAP_CHROMIUM or /usr/bin/chromium)
//
// Waiting is on the page's own signal: `window.__dashboard.ready` equals the hash of the view
// that finished drawing. No timers.
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const options = JSON.parse(process.argv[2] ?? "{}");
const timeoutMs = options.timeout_ms ?? 60000;
const executablePath = options.chromium ?? process.env.TOKENTAP_CHROMIUM ?? "/usr/bin/chromium";
const out = { texts: {}, overflow: {}, list: null, requests: {}, turns: null, turn_pages: {}, summary: null, console: [], page_errors: [], failed_requests: [], screenshots: [] };
const userDataDir = mkdtempSync(join(tmpdir(), "tokentap-dashboard-"));
let context;
const deadline = setTimeout(() => finish(`timed out after ${timeoutMs} ms`), timeoutMs);

async function finish(error) {
  clearTimeout(deadline);
  if (error) out.error = String(error);
  try { await context?.close(); } catch {}
  rmSync(userDataDir, { recursive: true, force: true });
  process.stdout.write(JSON.stringify(out) + "\n");
  process.exit(0);
}

async function show(page, hash) {
  await page.evaluate((h) => { location.hash = h; }, hash);
  await page.waitForFunction((h) => window.__dashboard?.ready === h, hash, { timeout: timeoutMs });
}

async function keepText(page, name) {
  out.texts[name] = await page.evaluate(() => document.getElementById("view").innerText);
  // How far the page is wider than the window (0: no horizontal scroll bar).
  out.overflow[name] = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
}

async function readSummary(page) {
  return page.evaluate(() => {
    const counts = document.getElementById("summary-counts").dataset;
    return {
      used: Number(counts.used), in_window: Number(counts.inWindow), warmup_excluded: Number(counts.warmupExcluded),
      warmup_note: document.getElementById("summary-warmup")?.innerText ?? null,
      latency: [...document.querySelectorAll("#summary-latency tr[data-metric]")].map((tr) => ({ group: tr.dataset.group, traffic: tr.dataset.traffic, metric: tr.dataset.metric, count: Number(tr.children[2].dataset.count), plotted: tr.querySelector("svg.ecdf polyline") !== null })),
      sections: [...document.querySelectorAll("#summary-latency section[data-traffic]")].map((s) => s.dataset.traffic),
      webrtc: [...document.querySelectorAll("#summary-webrtc tr[data-field]")].map((tr) => tr.dataset.field),
      turns: [...document.querySelectorAll("#summary-turns tr[data-field]")].map((tr) => ({ field: tr.dataset.field, plotted: tr.querySelector("svg.ecdf polyline") !== null })),
      goodput: [...document.querySelectorAll("#summary-goodput tr[data-group]")].map((tr) => ({ group: tr.dataset.group, requests: Number(tr.dataset.requests), good: Number(tr.dataset.good) })),
    };
  });
}

// A WebRTC session's drawing (webrtc.js), read in the page (passed to page.evaluate): the parts of each answer's bar, the
// data channel's event ticks, the table's rows and the choppy-audio verdict.
function readWebrtc() {
  return {
    webrtc_parts: [...document.querySelectorAll("#webrtc-timeline rect.webrtc")].map((r) => r.dataset.part),
    webrtc_events: [...document.querySelectorAll("#webrtc-timeline rect.webrtc-event")].map((r) => r.dataset.event),
    webrtc_rows: [...document.querySelectorAll("#webrtc-turns tbody tr")].map((tr) => [...tr.children].map((td) => td.textContent)),
    webrtc_verdict: document.getElementById("webrtc-verdict")?.textContent ?? null,
    webrtc_cards: [...document.querySelectorAll("#webrtc-cards .card")].map((c) => c.textContent),
  };
}

async function shot(page, name) {
  if (!options.artifacts) return;
  mkdirSync(options.artifacts, { recursive: true });
  const path = join(options.artifacts, name);
  await page.screenshot({ path, fullPage: true });
  out.screenshots.push(path);
}

try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    viewport: { width: options.viewport_width ?? 1300, height: 900 },
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  const page = context.pages()[0] ?? await context.newPage();
  page.on("console", (m) => out.console.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => out.page_errors.push(String(e)));
  page.on("requestfailed", (r) => {
    // The live feed is cut when the browser closes; that is not a failure of the page.
    if (!r.url().endsWith("/_tokentap/api/stream")) out.failed_requests.push(`${r.method()} ${r.url()}: ${r.failure()?.errorText}`);
  });

  await page.goto(`${options.admin}/_tokentap/`);
  await page.waitForFunction(() => window.__dashboard?.ready === "#/", null, { timeout: timeoutMs });
  out.list = await page.evaluate(() => ({
    ids: [...document.querySelectorAll("#rows tr[data-id]")].map((tr) => tr.dataset.id),
    total: Number(document.getElementById("list-count")?.dataset.total),
    verdicts: [...document.querySelectorAll("#rows tr[data-id]")].map((tr) => tr.lastElementChild.textContent),
  }));
  await keepText(page, "list");
  await shot(page, "dashboard-list.png");

  for (const id of options.request_ids ?? []) {
    await show(page, `#/r/${id}`);
    out.requests[id] = await page.evaluate(() => ({
      hops: Object.fromEntries([...document.querySelectorAll("#cumulative-chart g.hop")].map((g) =>
        [g.dataset.hop, { points: Number(g.dataset.points), circles: g.querySelectorAll("circle.pt").length, paths: g.querySelectorAll("path").length }])),
      phases: [...document.querySelectorAll("#waterfall rect.phase")].map((r) => r.dataset.phase),
      lanes: [...document.querySelectorAll("#lanes g.lane")].map((g) => ({ lane: g.dataset.lane, marks: g.children.length })),
      itl_bins: document.querySelectorAll("#itl-histogram rect.bin").length,
      verdict: document.getElementById("verdict")?.textContent,
      // A realtime session's page.
      session_lanes: [...document.querySelectorAll("#session-timeline rect.session")].map((r) => r.dataset.lane),
      session_cards: [...document.querySelectorAll("#session-cards .card")].map((c) => c.textContent),
      session_rows: document.querySelectorAll("#session-responses tbody tr").length,
    }));
    Object.assign(out.requests[id], await page.evaluate(readWebrtc));
    await keepText(page, `request:${id}`);
    await shot(page, `dashboard-request-${id}.png`);
  }

  if (options.turn_ids?.length) {
    await show(page, "#/turns");
    out.turns = await page.evaluate(() => ({
      ids: [...document.querySelectorAll("#turn-rows tr[data-id]")].map((tr) => tr.dataset.id),
      bars: [...document.querySelectorAll("#turn-rows svg.breakdown rect")].map((r) => r.dataset.lane),
    }));
    await keepText(page, "turns");
    await shot(page, "dashboard-turns.png");
    for (const id of options.turn_ids) {
      await show(page, `#/t/${encodeURIComponent(id)}`);
      out.turn_pages[id] = await page.evaluate(() => ({
        model_bars: [...document.querySelectorAll("#turn-gantt rect.gantt.model")].map((r) => Number(r.dataset.step)),
        tool_bars: [...document.querySelectorAll("#turn-gantt rect.gantt.tool")].map((r) => r.dataset.callId),
        critical: document.querySelectorAll("#turn-gantt rect.gantt.critical").length,
        steps: document.querySelectorAll("#turn-steps tbody tr").length,
        tool_rows: document.querySelectorAll("#turn-tools tbody tr").length,
        mcp_bars: [...document.querySelectorAll("#turn-gantt rect.gantt.mcp")].map((r) => r.dataset.callId),
        mcp_rows: [...document.querySelectorAll("#turn-tools tbody tr")].map((tr) => tr.dataset.mcp),
        webrtc_heading: document.getElementById("turn-webrtc")?.textContent ?? null,
        mcp_links: [...document.querySelectorAll("#turn-tools tbody a")].map((a) => a.getAttribute("href")),
        breakdown: [...document.querySelectorAll("#turn-breakdown rect")].map((r) => r.dataset.lane),
        voice_lanes: [...document.querySelectorAll("#turn-voice rect.voice")].map((r) => r.dataset.lane),
        voice_cards: [...document.querySelectorAll("#turn-voice-cards .card")].map((c) => c.textContent),
      }));
      Object.assign(out.turn_pages[id], await page.evaluate(readWebrtc));
      await keepText(page, `turn:${id}`);
      await shot(page, `dashboard-turn-${id}.png`);
    }
  }

  await show(page, options.summary_hash ?? "#/summary");
  // Wait until the last requested summary is the one on screen.
  await page.waitForFunction(() => document.getElementById("summary-counts") !== null, null, { timeout: timeoutMs });
  out.summary = await readSummary(page);
  await keepText(page, "summary");
  await shot(page, "dashboard-summary.png");
  if (options.show_warmup) {
    await page.evaluate(() => { window.__dashboard.ready = false; });
    await page.click("#summary-show-warmup");
    await page.waitForFunction(() => window.__dashboard?.ready && document.getElementById("summary-counts")?.dataset.warmupExcluded === "0", null, { timeout: timeoutMs });
    out.summary_with_warmup = await readSummary(page);
    await keepText(page, "summary_with_warmup");
  }
  await finish();
} catch (e) {
  await finish(e?.stack ?? e);
}
