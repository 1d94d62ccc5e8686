// tokentap dashboard: a hash-routed single page served by the admin API. No dependencies; every
// chart is SVG drawn here. Aggregation happens on the server (/_tokentap/api/summary, /api/list),
// so the page only draws what it is given.
//
//   #/                  request list (live, filterable, paginated)
//   #/r/<request_id>    one request: phase waterfall, cumulative characters per hop, event lanes,
//                       ITL histogram, verdict, conditions (a realtime session's responses; a WebRTC
//                       offer's answers, from webrtc.js)
//   #/summary           percentiles, stall rate and goodput per group over a time window
//                       (#/summary?window=15m&group_by=route,model&include_warmup=true)
//   #/turns             user turns (agent tool loops): status, steps, tool calls, where the time went
//   #/t/<turn_id>       one turn (voice turns add their lanes, and their WebRTC session's answer: webrtc.js): breakdown bar, Gantt of model / tool / client lanes with the
//                       critical path outlined, the steps and tool runs
"use strict";

const API = "/_tokentap/api";
const PAGE_SIZE = 100;
const SVG_NS = "http://www.w3.org/2000/svg";
const HOP_COLORS = { upstream: "#2563eb", handoff: "#16a34a", ack: "#0891b2", browser: "#ea580c", paint: "#9333ea" };
const HOP_LABELS = { upstream: "upstream arrival", handoff: "proxy handoff", ack: "client TCP ACK", browser: "browser arrival", paint: "paint" };
const LANE_COLORS = { model: "#2563eb", tool: "#ca8a04", client: "#9ca3af", mcp: "#92400e" };
const CLASS_COLORS = { reasoning: "#a855f7", answer: "#2563eb", tool_call: "#ca8a04", error: "#dc2626", stall: "#f87171" };

const view = document.getElementById("view");
const state = { list: { offset: 0, q: "", route: "", model: "", outcome: "" }, summary: { window: "1h", group_by: "route,model", include_warmup: false } };
// Tests wait for `ready` to equal the hash whose view finished drawing.
window.__dashboard = { ready: false, view: null };

// ---------- helpers ----------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

// Replaces `node`'s children, skipping absent ones (null, undefined) as `el` does: the DOM's own
// `replaceChildren` turns them into the text "null".
function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
  return node;
}

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, v);
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function fmt(v, digits = 1) {
  if (v === undefined || v === null || Number.isNaN(v)) return "–";
  if (Math.abs(v) >= 1000) return Math.round(v).toLocaleString("en-US");
  return (Math.round(v * 10 ** digits) / 10 ** digits).toString();
}

function pct(v) { return v === undefined || v === null ? "–" : (v * 100).toFixed(1) + "%"; }

async function getJson(path) {
  const resp = await fetch(path, { cache: "no-store" });
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(body.error || `${resp.status} ${resp.statusText}`);
  return body;
}

function niceTicks(min, max, count = 5) {
  const span = max - min || 1;
  const step0 = span / count;
  const mag = 10 ** Math.floor(Math.log10(step0));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => span / s <= count) || 10 * mag;
  const ticks = [];
  for (let t = Math.ceil(min / step) * step; t <= max + 1e-9; t += step) ticks.push(+t.toFixed(10));
  return ticks;
}

// A plot frame: scales and axes. Returns {root, x, y, inner}.
function frame({ width = 760, height = 260, xMin, xMax, yMin = 0, yMax, xLabel, yLabel, left = 56, yTicks = true }) {
  const m = { left, right: 16, top: 10, bottom: 36 };
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height });
  const w = width - m.left - m.right, h = height - m.top - m.bottom;
  const xs = (xMax - xMin) || 1, ys = (yMax - yMin) || 1;
  const x = (v) => m.left + ((v - xMin) / xs) * w;
  const y = (v) => m.top + h - ((v - yMin) / ys) * h;
  for (const t of yTicks ? niceTicks(yMin, yMax) : []) {
    root.append(svg("line", { class: "grid", x1: m.left, x2: m.left + w, y1: y(t), y2: y(t) }));
    root.append(svg("text", { x: m.left - 5, y: y(t) + 4, "text-anchor": "end" }, fmt(t, 2)));
  }
  for (const t of niceTicks(xMin, xMax, 8)) {
    root.append(svg("line", { class: "axis", x1: x(t), x2: x(t), y1: m.top + h, y2: m.top + h + 4 }));
    root.append(svg("text", { x: x(t), y: m.top + h + 16, "text-anchor": "middle" }, fmt(t, 2)));
  }
  root.append(svg("line", { class: "axis", x1: m.left, x2: m.left + w, y1: m.top + h, y2: m.top + h }));
  root.append(svg("line", { class: "axis", x1: m.left, x2: m.left, y1: m.top, y2: m.top + h }));
  if (xLabel) root.append(svg("text", { x: m.left + w / 2, y: height - 4, "text-anchor": "middle" }, xLabel));
  if (yLabel) root.append(svg("text", { x: 12, y: m.top + h / 2, transform: `rotate(-90 12 ${m.top + h / 2})`, "text-anchor": "middle" }, yLabel));
  return { root, x, y, inner: { left: m.left, top: m.top, w, h } };
}

// ---------- live feed ----------

let feedRefresh = null;
function startFeed() {
  const live = document.getElementById("live");
  const source = new EventSource(`${API}/stream`);
  source.onopen = () => { live.textContent = "● live"; live.classList.add("on"); };
  source.onerror = () => { live.textContent = "○ reconnecting"; live.classList.remove("on"); };
  source.addEventListener("turn", () => {
    if (window.__dashboard.view === "turns" && !turnRefresh) {
      turnRefresh = setTimeout(() => { turnRefresh = null; if (window.__dashboard.view === "turns") loadTurns(); }, 250);
    }
  });
  source.addEventListener("record", () => {
    // The list re-asks the server for its page; several records in a burst cost one request.
    if (window.__dashboard.view !== "list" || state.list.offset !== 0 || feedRefresh) return;
    feedRefresh = setTimeout(() => { feedRefresh = null; if (window.__dashboard.view === "list") loadList(false); }, 250);
  });
}

// ---------- list ----------

function listQuery() {
  const p = new URLSearchParams({ limit: PAGE_SIZE, offset: state.list.offset });
  for (const k of ["q", "route", "model", "outcome"]) if (state.list[k]) p.set(k, state.list[k]);
  return p.toString();
}

function renderListShell() {
  const opt = (values, current, none) => [el("option", { value: "" }, none), ...values.map((v) => el("option", { value: v, selected: v === current }, v))];
  const controls = el("div", { class: "controls" },
    el("input", { id: "f-q", type: "search", placeholder: "filter: id, path, model, verdict…", value: state.list.q, size: 32,
      oninput: (e) => { state.list.q = e.target.value; state.list.offset = 0; loadList(false); } }),
    el("select", { id: "f-route", onchange: (e) => { state.list.route = e.target.value; state.list.offset = 0; loadList(false); } }, opt([], "", "all routes")),
    el("select", { id: "f-model", onchange: (e) => { state.list.model = e.target.value; state.list.offset = 0; loadList(false); } }, opt([], "", "all models")),
    el("select", { id: "f-outcome", onchange: (e) => { state.list.outcome = e.target.value; state.list.offset = 0; loadList(false); } },
      opt(["ok", "http_error", "client_cancelled", "upstream_error", "upstream_connect_error", "upstream_timeout", "no_route", "proxy_error", "shutdown"], state.list.outcome, "all outcomes")),
  );
  const head = el("tr", {}, ["started", "route", "model", "status", "outcome", "first answer ms", "tok/s", "tokens", "stalls", "e2e ms", "first paint ms", "verdict"]
    .map((h, i) => el("th", { class: i >= 5 && i <= 10 ? "n" : "" }, h)));
  fill(view,
    el("h2", {}, "Requests"),
    controls,
    el("div", { class: "pager", id: "pager" }),
    el("table", { id: "requests" }, el("thead", {}, head), el("tbody", { id: "rows" })),
  );
}

function fillSelect(id, values, current) {
  const select = document.getElementById(id);
  if (!select) return;
  const known = new Set([...select.options].map((o) => o.value));
  for (const v of values) if (!known.has(v)) select.append(el("option", { value: v }, v));
  select.value = current;
}

let listSeq = 0;
async function loadList(shell = true) {
  if (shell) renderListShell();
  const seq = ++listSeq;
  let data;
  try { data = await getJson(`${API}/list?${listQuery()}`); } catch (e) {
    view.append(el("div", { class: "error" }, `cannot load the list: ${e.message}`));
    return;
  }
  if (seq !== listSeq || window.__dashboard.view !== "list") return;
  fillSelect("f-route", data.routes, state.list.route);
  fillSelect("f-model", data.models, state.list.model);
  const rows = data.rows.map((r) => el("tr", { class: "row", "data-id": r.request_id, onclick: () => { location.hash = `#/r/${r.request_id}`; } },
    el("td", { title: r.started_at }, new Date(r.t0_unix_ns / 1e6).toLocaleTimeString()),
    el("td", {}, r.route),
    el("td", {}, r.model ?? "–"),
    el("td", {}, r.status ?? "–"),
    el("td", { class: r.outcome === "ok" ? "" : "bad" }, r.outcome),
    el("td", { class: "n" }, fmt(r.ttft_answer_ms)),
    el("td", { class: "n" }, fmt(r.output_tps)),
    el("td", { class: "n" }, r.output_tokens ?? "–"),
    el("td", { class: r.stalls ? "n bad" : "n" }, r.stalls),
    el("td", { class: "n" }, fmt(r.e2e_ms)),
    el("td", { class: "n" }, fmt(r.time_to_first_paint_ms)),
    el("td", { class: r.good ? "good" : "bad" }, r.verdict + (r.warm_up ? " (warm-up)" : "")),
  ));
  fill(document.getElementById("rows"), ...rows);
  const from = data.total ? data.offset + 1 : 0, to = data.offset + data.rows.length;
  fill(document.getElementById("pager"),
    el("button", { disabled: data.offset === 0, onclick: () => { state.list.offset = Math.max(0, data.offset - PAGE_SIZE); loadList(false); } }, "← newer"),
    el("span", { id: "list-count", "data-total": data.total }, `${from}–${to} of ${data.total} (newest first, from the records kept in memory)`),
    el("button", { disabled: to >= data.total, onclick: () => { state.list.offset = data.offset + PAGE_SIZE; loadList(false); } }, "older →"),
  );
  window.__dashboard.ready = location.hash || "#/";
}

// ---------- request page ----------

// The cumulative-progress series of each hop: one point per chunk that completed answer text
// (or, for a stream without answer text, per chunk, in body bytes), at the hop's time for that chunk.
function hopSeries(record) {
  const chunks = record.timeline?.chunks ?? [];
  const answers = (record.analysis?.events ?? []).filter((e) => e.class === "answer");
  const unit = answers.length ? "answer characters" : "body bytes";
  const browser = record.browser?.chunks ?? [];
  const series = { upstream: [], handoff: [], ack: [], browser: [], paint: [] };
  let j = 0, cum = 0, prev = 0;
  chunks.forEach((c, i) => {
    const end = c.offset + c.len;
    if (answers.length) {
      while (j < answers.length && answers[j].end_offset <= end) { cum = Math.max(cum, answers[j].answer_chars_cum); j++; }
    } else cum = end;
    if (cum <= prev) return;
    prev = cum;
    series.upstream.push([c.t_up_ns / 1e6, cum]);
    if (c.t_handoff_ns !== undefined) series.handoff.push([c.t_handoff_ns / 1e6, cum]);
    // ACK times are sampled: a chunk without one simply has no point on that line.
    if (c.t_acked_ns !== undefined) series.ack.push([c.t_acked_ns / 1e6, cum]);
    if (browser[i]?.t_browser_ms !== undefined) series.browser.push([browser[i].t_browser_ms, cum]);
    if (browser[i]?.t_paint_ms !== undefined) series.paint.push([browser[i].t_paint_ms, cum]);
  });
  for (const k of Object.keys(series)) if (!series[k].length) delete series[k];
  return { unit, series };
}

function cumulativeChart(record) {
  const { unit, series } = hopSeries(record);
  const all = Object.values(series).flat();
  if (!all.length) return el("p", { class: "muted" }, "No body chunks were recorded.");
  const xMax = Math.max(...all.map((p) => p[0])) * 1.02 || 1;
  const yMax = Math.max(...all.map((p) => p[1])) || 1;
  const f = frame({ xMin: 0, xMax, yMax, xLabel: "ms since the request arrived at tokentap", yLabel: unit, height: 300 });
  for (const [hop, points] of Object.entries(series)) {
    // A step line: the hop holds its count until the next point, so a buffering hop is a staircase.
    let d = `M${f.x(points[0][0]).toFixed(1)},${f.y(0).toFixed(1)}`;
    let last = 0;
    for (const [t, v] of points) { d += ` L${f.x(t).toFixed(1)},${f.y(last).toFixed(1)} L${f.x(t).toFixed(1)},${f.y(v).toFixed(1)}`; last = v; }
    const g = svg("g", { class: `hop hop-${hop}`, "data-hop": hop, "data-points": points.length });
    g.append(svg("path", { d, fill: "none", stroke: HOP_COLORS[hop], "stroke-width": 1.6 }, svg("title", {}, HOP_LABELS[hop])));
    for (const [t, v] of points) g.append(svg("circle", { class: "pt", cx: f.x(t).toFixed(1), cy: f.y(v).toFixed(1), r: 2, fill: HOP_COLORS[hop] }, svg("title", {}, `${HOP_LABELS[hop]}: ${fmt(t, 2)} ms, ${v}`)));
    f.root.append(g);
  }
  f.root.id = "cumulative-chart";
  const legend = el("div", { class: "legend" }, Object.entries(series).map(([hop, pts]) => el("span", { style: `--c:${HOP_COLORS[hop]}` }, `${HOP_LABELS[hop]} (${pts.length})`)));
  const missing = ["upstream", "handoff", "ack", "browser", "paint"].filter((h) => !series[h]).map((h) => HOP_LABELS[h]);
  return el("div", {}, legend, f.root, missing.length ? el("p", { class: "muted" }, `Not measured for this request: ${missing.join(", ")}.`) : null);
}

// Phases: where the wait went, as bars on the request's timeline.
function phases(record) {
  const a = record.analysis, m = a?.metrics ?? {}, ev = a?.events ?? [], b = record.browser;
  const span = (cls) => { const e = ev.filter((x) => x.class === cls); return e.length ? [e[0].t_ms, e[e.length - 1].t_ms] : null; };
  const chunks = record.timeline?.chunks ?? [];
  const ms = (ns) => (ns === undefined || ns === null ? undefined : ns / 1e6);
  const firstOutput = Math.min(...[m.ttft_reasoning_ms, m.ttft_answer_ms, m.ttft_tool_ms, m.time_to_first_chunk_ms].filter((v) => v !== undefined));
  const out = [];
  const waitEnd = Number.isFinite(firstOutput) ? firstOutput : ms(record.timeline?.t_end_ns);
  if (waitEnd !== undefined) out.push(["waiting", 0, waitEnd, `request sent ${fmt(ms(record.timeline.t_upstream_sent_ns), 2)} ms, headers ${fmt(ms(record.timeline.t_upstream_headers_ns), 2)} ms`]);
  // What the server said it spent, placed to end where tokentap saw the moment it reported
  // (server_split.compared_at); the rest of the wait is network and proxy.
  const sv = record.server, split = record.server_split;
  if (sv && split) {
    const note = `as ${sv.source} reported; ${split.check === "consistent" ? "consistent with the wire" : "the server claims more than the wire saw"}`;
    let t = Math.max(0, split.wire_ms - split.server_ms);
    out.push(["network+proxy", 0, t, `wire ${fmt(split.wire_ms, 2)} ms − server ${fmt(split.server_ms, 2)} ms at ${split.compared_at.replace("_", " ")}`]);
    for (const [name, v] of [["server queue", sv.queue_ms], ["server load", sv.load_ms], ["server prefill", sv.prefill_ms]]) {
      if (v !== undefined && split.compared_at !== "response_head") { out.push([name, t, t + v, note]); t += v; }
    }
    if (sv.decode_ms !== undefined && split.compared_at === "first_token") out.push(["server decode", split.wire_ms, split.wire_ms + sv.decode_ms, note]);
  }
  for (const [name, cls] of [["reasoning", "reasoning"], ["answer", "answer"], ["tool call", "tool_call"]]) {
    const s = span(cls);
    if (s) out.push([name, s[0], s[1], `${ev.filter((x) => x.class === cls).length} events`]);
  }
  const lastUp = chunks.length ? chunks[chunks.length - 1].t_up_ns / 1e6 : undefined;
  const end = b?.fetch_end_ms ?? ms(record.timeline?.t_end_ns);
  if (lastUp !== undefined && end !== undefined) out.push(["delivery", lastUp, Math.max(end, lastUp), b?.fetch_end_ms !== undefined ? "last upstream chunk → browser read the end" : "last upstream chunk → last byte handed to the client"]);
  if (b?.first_paint_ms !== undefined) out.push(["render", b.first_paint_ms, b.last_paint_ms ?? b.first_paint_ms, "first → last paint of answer text"]);
  return out;
}

function waterfall(record) {
  const rows = phases(record);
  if (!rows.length) return el("p", { class: "muted" }, "No phases: the request got no response.");
  const xMax = Math.max(...rows.map((r) => r[2])) * 1.02 || 1;
  const height = 28 + rows.length * 24 + 30;
  const f = frame({ xMin: 0, xMax, yMax: rows.length, height, left: 90, yTicks: false, xLabel: "ms since t0" });
  f.root.id = "waterfall";
  rows.forEach(([name, s, e, note], i) => {
    const y = f.inner.top + 6 + i * 24;
    f.root.append(svg("text", { x: 84, y: y + 13, "text-anchor": "end" }, name));
    f.root.append(svg("rect", { class: "phase", "data-phase": name, x: f.x(s), y, width: Math.max(2, f.x(e) - f.x(s)), height: 16, fill: { waiting: "#9ca3af", reasoning: CLASS_COLORS.reasoning, answer: CLASS_COLORS.answer, "tool call": CLASS_COLORS.tool_call, delivery: "#16a34a", render: "#ea580c", "network+proxy": "#cbd5e1", "server queue": "#a78bfa", "server load": "#c4b5fd", "server prefill": "#7c3aed", "server decode": "#5b21b6" }[name] },
      svg("title", {}, `${name}: ${fmt(s, 2)} → ${fmt(e, 2)} ms (${fmt(e - s, 2)} ms). ${note}`)));
    f.root.append(svg("text", { x: Math.min(f.x(e) + 4, f.inner.left + f.inner.w - 60), y: y + 13 }, `${fmt(e - s)} ms`));
  });
  return f.root;
}

function lanes(record) {
  const a = record.analysis;
  const ev = a?.events ?? [];
  const stalls = a?.stalls?.list ?? [];
  const names = ["reasoning", "answer", "tool_call", "error"].filter((c) => ev.some((e) => e.class === c));
  if (stalls.length) names.push("stall");
  if (!names.length) return el("p", { class: "muted" }, "No content events.");
  const xMax = Math.max(...ev.map((e) => e.t_ms), ...stalls.map((s) => s.start_ms + s.gap_ms), 1) * 1.02;
  const f = frame({ xMin: 0, xMax, yMax: names.length, height: 30 + names.length * 22 + 30, left: 90, yTicks: false, xLabel: "ms since t0 (upstream arrival)" });
  f.root.id = "lanes";
  names.forEach((name, i) => {
    const y = f.inner.top + 6 + i * 22;
    f.root.append(svg("text", { x: 84, y: y + 12, "text-anchor": "end" }, name === "stall" ? "stalls" : name));
    const g = svg("g", { class: `lane lane-${name}`, "data-lane": name });
    if (name === "stall") {
      for (const s of stalls) g.append(svg("rect", { x: f.x(s.start_ms), y, width: Math.max(2, f.x(s.start_ms + s.gap_ms) - f.x(s.start_ms)), height: 14, fill: CLASS_COLORS.stall, opacity: 0.6 },
        svg("title", {}, `stall ${fmt(s.gap_ms)} ms from ${fmt(s.start_ms)} ms; ${s.heartbeats} heartbeats arrived`)));
    } else {
      for (const e of ev.filter((x) => x.class === name)) g.append(svg("line", { x1: f.x(e.t_ms), x2: f.x(e.t_ms), y1: y, y2: y + 14, stroke: CLASS_COLORS[name], "stroke-width": 1 }));
    }
    f.root.append(g);
  });
  const counts = a?.event_counts ?? {};
  return el("div", {}, f.root, el("p", { class: "muted" }, `Heartbeats: ${counts.heartbeat ?? 0}, control: ${counts.control ?? 0}, usage: ${counts.usage ?? 0}, done: ${counts.done ?? 0} (not drawn: they carry no content).`));
}

function itlHistogram(record) {
  const ev = (record.analysis?.events ?? []).filter((e) => e.class !== "error");
  const gaps = [];
  for (let i = 1; i < ev.length; i++) gaps.push(ev[i].t_ms - ev[i - 1].t_ms);
  if (!gaps.length) return el("p", { class: "muted" }, "Fewer than two content events: no gaps.");
  const max = Math.max(...gaps) || 1;
  const bins = Math.min(40, Math.max(8, Math.ceil(Math.sqrt(gaps.length))));
  const width = max / bins;
  const counts = new Array(bins).fill(0);
  for (const g of gaps) counts[Math.min(bins - 1, Math.floor(g / width))]++;
  const f = frame({ xMin: 0, xMax: max, yMax: Math.max(...counts), height: 220, xLabel: "gap between content events, ms", yLabel: "gaps" });
  f.root.id = "itl-histogram";
  counts.forEach((c, i) => {
    if (!c) return;
    f.root.append(svg("rect", { class: "bin", x: f.x(i * width) + 0.5, y: f.y(c), width: Math.max(1, f.x((i + 1) * width) - f.x(i * width) - 1), height: f.y(0) - f.y(c), fill: "#60a5fa" },
      svg("title", {}, `${fmt(i * width, 2)}–${fmt((i + 1) * width, 2)} ms: ${c}`)));
  });
  const d = record.analysis?.metrics?.itl_ms;
  return el("div", {}, f.root, d ? el("p", { class: "muted" }, `itl_ms: n ${d.count}, p50 ${fmt(d.p50, 2)}, p90 ${fmt(d.p90, 2)}, p99 ${fmt(d.p99, 2)}, max ${fmt(d.max, 2)}`) : null);
}

function kv(pairs) {
  return el("dl", { class: "kv" }, pairs.filter(([, v]) => v !== undefined && v !== null && v !== "").flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))]));
}

async function loadRequest(id) {
  fill(view, el("p", { class: "muted" }, "loading…"));
  let record, verdict;
  try {
    [record, verdict] = await Promise.all([getJson(`${API}/requests/${encodeURIComponent(id)}`), getJson(`${API}/verdict/${encodeURIComponent(id)}`)]);
  } catch (e) {
    fill(view, el("p", { class: "error" }, `Cannot load request ${id}: ${e.message}`), el("a", { href: "#/" }, "← requests"));
    return;
  }
  if (window.__dashboard.view !== "request") return;
  if (record.realtime) { showSession(record); return; }
  if (record.browser?.webrtc) { showWebrtcSession(record); return; }
  const m = record.analysis?.metrics ?? {}, c = record.conditions ?? {}, b = record.browser;
  const card = (k, v) => el("div", { class: "card" }, el("div", { class: "k" }, k), el("div", { class: "v" }, v));
  const objectives = verdict.objectives.map((o) => `${o.objective} ${o.result.replace("_", " ")}: ${o.value_ms !== undefined ? `${fmt(o.value_ms)} ms` : "no value"} (limit ${fmt(o.limit_ms)} ms)`).join("; ");
  fill(view,
    el("p", {}, el("a", { href: "#/" }, "← requests")),
    el("h2", {}, `${record.method} ${record.path}`),
    el("div", { class: "cards" },
      card("outcome", `${record.outcome}${record.status ? " " + record.status : ""}`),
      card("verdict", el("span", { id: "verdict", class: verdict.good ? "good" : "bad" }, verdict.good ? "good" : "not good")),
      card("first answer", `${fmt(m.ttft_answer_ms)} ms`),
      card("first output", `${fmt(m.time_to_first_output_ms)} ms`),
      card("tokens/s", fmt(m.output_tps)),
      card("stalls", record.analysis?.stalls?.count ?? "–"),
      card("e2e", `${fmt(m.e2e_ms)} ms`),
      card("first paint", b?.time_to_first_paint_ms !== undefined ? `${fmt(b.time_to_first_paint_ms)} ms` : "–"),
    ),
    el("p", { class: "muted" }, `Objectives: ${objectives || "none configured"}.`),
    record.diagnosis ? el("p", { id: "diagnosis", class: record.diagnosis.kind === "no_rebuffering" ? "good" : "bad" }, `Re-buffering: ${record.diagnosis.verdict}`) : el("span", {}),
    el("h3", {}, "Phases"), waterfall(record),
    el("h3", {}, "Cumulative progress per hop"), cumulativeChart(record),
    el("div", { class: "grid2" },
      el("div", {}, el("h3", {}, "Event classes"), lanes(record)),
      el("div", {}, el("h3", {}, "Inter-token latency"), itlHistogram(record))),
    el("div", { class: "grid2" },
      el("div", {}, el("h3", {}, "Conditions"), kv([
        ["request id", record.request_id], ["started", record.started_at], ["route", record.route], ["upstream", record.upstream],
        ["model", c.model], ["stream", c.stream], ["prompt bytes", record.request?.prompt_bytes], ["prompt tokens", c.prompt_tokens],
        ["cached prompt tokens", c.cached_prompt_tokens], ["prompt cache", c.prompt_cache], ["concurrency at t0", c.concurrency_at_t0],
        ["server report", record.server ? `${record.server.source}${record.server.rejected_values ? ` (${record.server.rejected_values} values rejected)` : ""}` : undefined],
        ["network + proxy ms", record.server_split ? `${fmt(record.server_split.network_and_proxy_ms, 2)} (${record.server_split.check.replace(/_/g, " ")}, ±${fmt(record.server_split.tolerance_ms, 1)})` : undefined],
        ["connection", c.upstream_connection_reused === undefined ? undefined : c.upstream_connection_reused ? "reused" : "new"],
        ["warm-up", c.warm_up], ["tokentap", c.tokentap_version], ["format", record.analysis?.format]])),
      el("div", {}, el("h3", {}, "Metrics"), kv([
        ["ttfb ms", fmt(m.ttfb_ms, 2)], ["first chunk ms", fmt(m.time_to_first_chunk_ms, 2)], ["first reasoning ms", fmt(m.ttft_reasoning_ms, 2)],
        ["first answer ms", fmt(m.ttft_answer_ms, 2)], ["first tool call ms", fmt(m.ttft_tool_ms, 2)], ["tpot ms", fmt(m.tpot_ms, 2)],
        ["output tokens", m.output_tokens ? `${m.output_tokens.total} (answer ${m.output_tokens.answer}, reasoning ${m.output_tokens.reasoning}, tool ${m.output_tokens.tool_call})` : undefined],
        ["chunks", `${record.timeline.chunk_count} (${record.timeline.body_bytes} bytes)`],
        ["handoff lag p99 µs", fmt(record.self_overhead?.handoff_lag_p99_us, 1)],
        ["browser clock ±ms", b ? fmt(b.clock.uncertainty_ms, 2) : undefined],
        ["delivery delay p50/p99 ms", b?.delivery_delay_ms ? `${fmt(b.delivery_delay_ms.p50, 2)} / ${fmt(b.delivery_delay_ms.p99, 2)}` : undefined],
        ["render delay p50/p99 ms", b?.render_delay_ms ? `${fmt(b.render_delay_ms.p50, 2)} / ${fmt(b.render_delay_ms.p99, 2)}` : undefined]]))),
  );
  window.__dashboard.ready = location.hash || "#/";
}

// ---------- realtime session ----------

const SESSION_COLORS = { speech: "#475569", model: "#7e57c2", audio: "#f57c00", heard: "#16a34a", interrupted: "#dc2626", tool: "#ca8a04" };

/// A realtime session's responses on one timeline (ms since the upgrade): the user's speech (the
/// estimated start and end), the model (end of speech, else response.created → first audio delta),
/// the audio as it reached tokentap (first delta → audio done), the playback heard in the page, and
/// tool gaps. One row per lane; each response's bars are labelled with its number.
function sessionGantt(record) {
  const responses = record.realtime.responses;
  const heard = new Map((record.browser?.realtime ?? []).map((r) => [r.index, r]));
  const lanes = [["you", "speech"], ["model", "model"], ["audio at tokentap", "audio"], ["heard in the page", "heard"], ["tools", "tool"]];
  const bars = [];
  responses.forEach((r, i) => {
    const u = r.user ?? {};
    const label = `response ${i + 1}`;
    if (typeof u.speech_start_estimated_ms === "number" || typeof u.speech_end_estimated_ms === "number") {
      const s = u.speech_start_estimated_ms ?? u.speech_end_estimated_ms, e = u.speech_end_estimated_ms ?? s;
      bars.push({ lane: 0, kind: "speech", s, e, title: `${label}: your speech (estimated, padding and silence taken out)` });
    }
    const from = u.speech_end_estimated_ms ?? u.speech_stopped_ms ?? r.create_sent_ms ?? r.created_ms;
    bars.push({ lane: 1, kind: "model", s: from, e: r.first_audio_ms ?? r.done_ms ?? r.created_ms, title: `${label}: to its first audio delta${r.status ? ` (${r.status})` : ""}` });
    if (typeof r.first_audio_ms === "number") {
      const end = r.audio_done_ms ?? (r.received?.length ? r.received[r.received.length - 1][0] : r.first_audio_ms);
      bars.push({ lane: 2, kind: "audio", s: r.first_audio_ms, e: end, title: `${label}: ${fmt(r.audio_ms)} ms of audio, real-time factor ${fmt(r.real_time_factor, 2)}` });
    }
    const b = heard.get(i);
    if (b?.playout) {
      const p = b.playout;
      bars.push({ lane: 3, kind: p.interrupted ? "interrupted" : "heard", s: p.audible_ms, e: p.end_ms ?? p.audible_ms,
        title: `${label}: heard in the page${p.interrupted ? ", interrupted" : ""}; underruns ${p.underruns}` });
    }
    for (const c of r.tool_calls ?? []) {
      if (typeof c.next_response_requested_ms === "number") bars.push({ lane: 4, kind: "tool", s: c.ready_ms, e: c.next_response_requested_ms, title: `${label}: tool ${c.name ?? c.call_id} (ready → next response asked for)` });
    }
  });
  const times = bars.flatMap((b) => [b.s, b.e]).filter((t) => typeof t === "number" && Number.isFinite(t));
  if (!times.length) return el("p", { class: "muted" }, "No responses.");
  const xMin = Math.min(0, ...times), xMax = Math.max(...times) + 1;
  const f = frame({ xMin, xMax, yMax: lanes.length, height: 28 + lanes.length * 26 + 30, left: 130, yTicks: false, xLabel: "ms since the session opened" });
  f.root.id = "session-timeline";
  const rowY = (i) => f.inner.top + 6 + i * 26;
  lanes.forEach(([name], i) => f.root.append(svg("text", { x: 124, y: rowY(i) + 13, "text-anchor": "end" }, name)));
  for (const b of bars) {
    if (typeof b.s !== "number" || typeof b.e !== "number") continue;
    f.root.append(svg("rect", { class: "session", "data-lane": lanes[b.lane][1], x: f.x(b.s), y: rowY(b.lane), width: Math.max(2, f.x(b.e) - f.x(b.s)), height: 18, fill: SESSION_COLORS[b.kind] },
      svg("title", {}, `${b.title}: ${fmt(b.s, 1)} → ${fmt(b.e, 1)} ms (${fmt(b.e - b.s, 1)} ms)`)));
  }
  return f.root;
}

const audioFormat = (f) => typeof f === "string" ? f.replaceAll("_", " ") : f?.pcm16 ? `PCM16 ${f.pcm16.rate_hz} Hz` : "–";

function showSession(record) {
  const rt = record.realtime, b = record.browser;
  const heard = new Map((b?.realtime ?? []).map((r) => [r.index, r]));
  const card = (k, v) => el("div", { class: "card" }, el("div", { class: "k" }, k), el("div", { class: "v" }, v));
  const v2v = [...heard.values()].map((r) => r.voice_to_voice_ms).filter((x) => typeof x === "number");
  const ttfa = rt.responses.map((r) => r.time_to_first_audio_from_speech_end_ms).filter((x) => typeof x === "number");
  const median = (xs) => { if (!xs.length) return undefined; const s = [...xs].sort((a, c) => a - c); const m = (s.length - 1) / 2; return (s[Math.floor(m)] + s[Math.ceil(m)]) / 2; };
  const ms = (x) => x === undefined ? "–" : `${fmt(x)} ms`;
  fill(view,
    el("p", {}, el("a", { href: "#/" }, "← requests")),
    el("h2", {}, `Realtime session ${rt.session_id ?? ""} (${record.path.split("?")[0]})`),
    el("div", { class: "cards", id: "session-cards" },
      card("responses", String(rt.responses.length)),
      card("end of speech → first audio (median)", ms(median(ttfa))),
      card("voice to voice (median)", v2v.length ? ms(median(v2v)) : "– (needs the browser probe)"),
      card("interrupted", String(rt.responses.filter((r) => r.interruption && Object.keys(r.interruption).length).length)),
      card("session end", String(rt.end).replaceAll("_", " ")),
      card("duration", ms(rt.duration_ms)),
    ),
    el("div", { class: "legend" }, Object.entries(SESSION_COLORS).map(([k, c]) => el("span", { style: `--c:${c}` }, k))),
    sessionGantt(record),
    el("h3", {}, "Responses"),
    el("table", { id: "session-responses" },
      el("thead", {}, el("tr", {}, ["#", "id", "trigger", "status"].map((h) => el("th", {}, h)),
        ["speech stopped → first audio ms", "speech end → first audio ms", "audio ms", "predicted underruns", "first audio: tokentap → page ms", "→ heard ms", "voice to voice ms", "heard underruns"].map((h) => el("th", { class: "n" }, h)))),
      el("tbody", {}, rt.responses.map((r, i) => {
        const h = heard.get(i);
        return el("tr", {},
          el("td", {}, String(i + 1)), el("td", {}, r.response_id ?? "–"), el("td", {}, r.trigger.replaceAll("_", " ")), el("td", {}, r.status ?? "–"),
          el("td", { class: "n" }, fmt(r.time_to_first_audio_from_speech_stopped_ms)), el("td", { class: "n" }, fmt(r.time_to_first_audio_from_speech_end_ms)),
          el("td", { class: "n" }, fmt(r.audio_ms)), el("td", { class: "n" }, r.predicted?.underruns ?? "–"),
          el("td", { class: "n" }, fmt(h?.first_audio_delivery_ms)), el("td", { class: "n" }, fmt(h?.heard_after_first_audio_ms)),
          el("td", { class: "n" }, fmt(h?.voice_to_voice_ms)), el("td", { class: "n" }, h?.playout ? String(h.playout.underruns) : "–"));
      }))),
    el("div", { class: "grid2" },
      el("div", {}, el("h3", {}, "Session"), kv([
        ["request id", record.request_id], ["started", record.started_at], ["route", record.route], ["upstream", record.upstream],
        ["model", rt.model], ["trace", record.trace_id], ["input audio", `${audioFormat(rt.input_format)} (${fmt(rt.input_audio_ms)} ms in ${rt.appends} appends)`],
        ["output audio", audioFormat(rt.output_format)], ["compression", rt.deflate ? "permessage-deflate" : "none"],
        ["events (client / server)", `${rt.client.events} / ${rt.server.events}`], ["unknown events", rt.client.unknown_events + rt.server.unknown_events]])),
      el("div", {}, el("h3", {}, "Browser"), kv([
        ["probe", b ? "joined" : "no report (load the probe on the page)"],
        ["clock ±ms", b?.clock ? fmt(b.clock.uncertainty_ms, 2) : undefined],
        ["responses heard", b ? `${[...heard.values()].filter((r) => r.playout).length} of ${rt.responses.length}` : undefined]]))),
  );
  window.__dashboard.ready = location.hash || "#/";
}

// ---------- summary ----------

const METRICS = [["ttft_answer_ms", "first answer ms"], ["time_to_first_paint_ms", "first paint ms"], ["tpot_ms", "tpot ms"], ["output_tps", "tokens/s"], ["e2e_ms", "e2e ms"]];

/// The kinds of traffic the Summary has a section for (the report's `traffic` grouping), in
/// order, each with its own words for the metrics it can have.
const TRAFFIC = {
  chat: { title: "Chat (streamed answers)", words: { ttft_answer_ms: "first answer token ms", time_to_first_paint_ms: "first paint in the browser ms", tpot_ms: "time per output token ms", output_tps: "output tokens/s", e2e_ms: "whole answer ms" } },
  non_streaming: { title: "Non-streaming requests (whole answers, embeddings…)", words: { ttft_answer_ms: "first answer byte ms", time_to_first_paint_ms: "first paint in the browser ms", tpot_ms: "time per output token ms", output_tps: "output tokens/s", e2e_ms: "response complete ms" } },
  speech: { title: "Text to speech", words: { e2e_ms: "all audio received ms" }, note: "First audible sample, leading silence and underruns per request: open a request, or its voice turn." },
  transcription: { title: "Speech to text", words: { ttft_answer_ms: "first transcript text ms", e2e_ms: "transcript done ms" } },
  realtime: { title: "Realtime sessions (WebSocket)", words: {}, note: "A session's latency is per response: the rows are over every response of every session (open a session for its own). Counts and goodput are below." },
  webrtc: { title: "WebRTC offers (only the SDP exchange passes tokentap)", words: { e2e_ms: "offer answered ms" }, note: "The audio went peer to peer: each answer's wait, as the page measured it, is in the WebRTC sessions section below (open an offer for its session)." },
};

/// The realtime section's rows (the summary's `realtime`, per response), in words.
const REALTIME_ROWS = [
  ["time_to_first_audio_from_speech_end_ms", "end of speech (estimated) → first audio ms"],
  ["time_to_first_audio_from_speech_stopped_ms", "speech_stopped → first audio ms"],
  ["time_to_first_audio_from_create_ms", "response.create → first audio ms"],
  ["real_time_factor", "audio real-time factor"],
  ["tool_gap_ms", "tool call ready → next response.create ms"],
  ["voice_to_voice_ms", "end of speech → heard in the browser ms"],
  ["heard_after_first_audio_ms", "first audio → heard in the browser ms"],
];

/// An inline ECDF of one metric's samples (quantile points from the summary), with p50, p90 and
/// p99 marked.
function ecdfPlot(e, d, width = 180, height = 34) {
  if (!e || !e.values?.length) return "";
  const v = e.values, lo = v[0], hi = v[v.length - 1], span = hi - lo || Math.abs(hi) || 1;
  const x = (val) => 2 + ((val - lo) / span) * (width - 4), y = (p) => height - 2 - p * (height - 4);
  const pts = v.map((val, i) => `${x(val).toFixed(1)},${y(v.length === 1 ? 1 : i / (v.length - 1)).toFixed(1)}`).join(" ");
  const root = svg("svg", { width, height, class: "ecdf", role: "img" }, svg("title", {}, `distribution of ${e.n} samples: ${fmt(lo, 2)} … ${fmt(hi, 2)}`));
  root.append(svg("polyline", { points: pts, fill: "none", stroke: "#2563eb", "stroke-width": 1.5 }));
  for (const [p, val] of [[0.5, d.p50], [0.9, d.p90], [0.99, d.p99]]) {
    root.append(svg("line", { x1: x(val), x2: x(val), y1: y(0), y2: y(p), stroke: "#999", "stroke-dasharray": "2,2" }, svg("title", {}, `p${Math.round(p * 100)} ${fmt(val, 2)}`)));
  }
  return root;
}

/// A group's label in words: its kind of traffic, then the rest of its key.
function kindLabel(g) {
  const kind = g.key?.find(([k]) => k === "traffic")?.[1];
  if (!kind) return g.label;
  const rest = groupLabel(g);
  return rest === "all" ? (TRAFFIC[kind]?.title ?? kind) : `${TRAFFIC[kind]?.title ?? kind}: ${rest}`;
}

/// A group's label without its `traffic=` part ("all" when nothing else was grouped by).
function groupLabel(g) {
  const rest = (g.key ?? []).filter(([k]) => k !== "traffic").map(([k, v]) => `${k}=${v}`);
  return rest.length ? rest.join(" ") : "all";
}

async function loadSummary() {
  const s = state.summary;
  const p = new URLSearchParams({ window: s.window, group_by: ["traffic", ...s.group_by.split(",").filter(Boolean)].join(",") });
  if (s.include_warmup) p.set("include_warmup", "true");
  const groupBox = (key) => el("label", {}, el("input", { type: "checkbox", checked: s.group_by.split(",").includes(key), onchange: (e) => {
    const keys = new Set(s.group_by.split(",").filter(Boolean));
    e.target.checked ? keys.add(key) : keys.delete(key);
    s.group_by = ["route", "model", "concurrency", "prompt_cache"].filter((k) => keys.has(k)).join(",");
    loadSummary();
  } }), ` ${key}`);
  const controls = el("div", { class: "controls" },
    "window",
    el("select", { id: "s-window", onchange: (e) => { s.window = e.target.value; loadSummary(); } },
      ["5m", "15m", "1h", "6h", "24h", "7d", "all"].map((w) => el("option", { value: w, selected: w === s.window }, w === "all" ? "everything in memory" : `last ${w}`))),
    "group by", groupBox("route"), groupBox("model"), groupBox("concurrency"), groupBox("prompt_cache"),
    el("label", {}, el("input", { type: "checkbox", checked: s.include_warmup, onchange: (e) => { s.include_warmup = e.target.checked; loadSummary(); } }), " include warm-up"));
  let r;
  try { r = await getJson(`${API}/summary?${p}`); } catch (e) {
    fill(view, el("h2", {}, "Summary"), controls, el("p", { class: "error" }, e.message));
    return;
  }
  if (window.__dashboard.view !== "summary") return;
  const groups = r.groups.length ? r.groups : [r.overall];
  // One section per kind of traffic, rows only for the metrics its groups have samples of.
  const kinds = Object.keys(TRAFFIC).filter((k) => groups.some((g) => g.key?.[0]?.[1] === k));
  const latency = el("div", { id: "summary-latency" }, kinds.length ? kinds.map((kind) => {
    const t = TRAFFIC[kind], mine = groups.filter((g) => g.key?.[0]?.[1] === kind);
    const requests = mine.reduce((a, g) => a + g.requests, 0);
    const rows = mine.flatMap((g) => METRICS.filter(([key]) => g.metrics[key] && t.words[key]).map(([key]) => {
      const d = g.metrics[key];
      return el("tr", { "data-group": groupLabel(g), "data-traffic": kind, "data-metric": key },
        el("td", {}, groupLabel(g)), el("td", {}, t.words[key]), el("td", { class: "n", "data-count": d.count }, d.count),
        ...[d.p50, d.p90, d.p95, d.p99, d.max].map((v) => el("td", { class: "n" }, fmt(v, 2))),
        el("td", { class: "plot" }, ecdfPlot(g.ecdf?.[key], d)));
    }));
    if (kind === "realtime" && r.realtime) {
      const rt = r.realtime;
      rows.push(...REALTIME_ROWS.filter(([key]) => rt[key]).map(([key, words]) => {
        const d = rt[key];
        return el("tr", { "data-group": "responses", "data-traffic": kind, "data-metric": key },
          el("td", {}, `${rt.responses} responses of ${rt.sessions} sessions`), el("td", {}, words), el("td", { class: "n", "data-count": d.count }, d.count),
          ...[d.p50, d.p90, d.p95, d.p99, d.max].map((v) => el("td", { class: "n" }, fmt(v, 2))), el("td", { class: "plot" }, ecdfPlot(rt.ecdf?.[key], d)));
      }));
    }
    return el("section", { class: "traffic", "data-traffic": kind },
      el("h4", {}, `${t.title}: ${requests} request${requests === 1 ? "" : "s"}`),
      t.note ? el("p", { class: "muted" }, t.note) : null,
      rows.length ? el("table", {},
        el("thead", {}, el("tr", {}, ["group", "metric", "n", "p50", "p90", "p95", "p99", "max", "distribution (p50, p90, p99 marked)"].map((h, i) => el("th", { class: i >= 2 && i < 8 ? "n" : "" }, h)))),
        el("tbody", {}, rows))
        : (t.note ? null : el("p", { class: "muted" }, "No successful request with these metrics yet.")));
  }) : el("p", { class: "muted" }, "No request in the window."));
  const turnSections = turnSummary(r.turns);
  // Cold and warm prompts are never averaged together without saying so: TTFT per cache state.
  const cacheRows = groups.flatMap((g) => Object.entries(g.ttft_answer_by_prompt_cache ?? {}).map(([state, d]) => [g, state, d]));
  const byCache = cacheRows.length ? el("table", { id: "summary-prompt-cache" },
    el("thead", {}, el("tr", {}, ["group", "prompt cache", "n", "p50", "p90", "p95", "p99", "max"].map((h, i) => el("th", { class: i >= 2 ? "n" : "" }, h)))),
    el("tbody", {}, cacheRows.map(([g, state, d]) => el("tr", { "data-group": g.label, "data-cache": state },
      el("td", {}, kindLabel(g)), el("td", {}, state), el("td", { class: "n" }, d.count), ...[d.p50, d.p90, d.p95, d.p99, d.max].map((v) => el("td", { class: "n" }, fmt(v, 2))))))) : null;
  const serverRows = groups.filter((g) => g.server).flatMap((g) => [["server.queue_ms", g.server.queue_ms], ["server.prefill_ms", g.server.prefill_ms], ["server.decode_ms", g.server.decode_ms], ["network_and_proxy_ms", g.server.network_and_proxy_ms]].filter(([, d]) => d).map(([k, d]) => [g, k, d]));
  const server = serverRows.length ? el("table", { id: "summary-server" },
    el("thead", {}, el("tr", {}, ["group", "metric", "n", "p50", "p90", "p95", "p99", "max"].map((h, i) => el("th", { class: i >= 2 ? "n" : "" }, h)))),
    el("tbody", {}, serverRows.map(([g, k, d]) => el("tr", { "data-group": g.label, "data-metric": k },
      el("td", {}, kindLabel(g)), el("td", {}, k), el("td", { class: "n" }, d.count), ...[d.p50, d.p90, d.p95, d.p99, d.max].map((v) => el("td", { class: "n" }, fmt(v, 2))))))) : null;
  const goodRows = r.groups.length ? [...r.groups, r.overall] : [r.overall];
  const goodput = el("table", { id: "summary-goodput" },
    el("thead", {}, el("tr", {}, ["group", "requests", "ok", "good", "attainment", "good tokens/s", "stalled / analysed", "stall rate"].map((h, i) => el("th", { class: i ? "n" : "" }, h)))),
    el("tbody", {}, goodRows.map((g) => el("tr", { "data-group": g.label, "data-requests": g.requests, "data-good": g.goodput.good },
      el("td", {}, kindLabel(g)), el("td", { class: "n" }, g.requests), el("td", { class: "n" }, g.outcomes.ok ?? 0), el("td", { class: "n" }, g.goodput.good),
      el("td", { class: "n" }, pct(g.goodput.attainment)), el("td", { class: "n" }, fmt(g.goodput.good_tokens_per_s, 2)),
      el("td", { class: "n" }, `${g.stalls.stalled} / ${g.stalls.analysed}`), el("td", { class: "n" }, pct(g.stalls.rate))))));
  const slo = Object.entries(r.slo).map(([k, v]) => `${k.replace(/_ms$/, "")} ≤ ${v} ms`).join(", ") || "none configured (every successful request is good)";
  fill(view,
    el("h2", {}, "Summary"), controls,
    el("p", { id: "summary-counts", class: "muted", "data-used": r.records_used, "data-in-window": r.records_in_window, "data-warmup-excluded": r.warm_up_excluded },
      `${r.records_used} requests used of ${r.records_in_window} in the window (${r.records_total} in memory); warm-up ${r.include_warmup ? "included" : `excluded (${r.warm_up_excluded} left out)`}. `,
      `Percentiles: linear interpolation between closest ranks over successful requests. SLOs: ${slo}.`),
    warmupNote(r),
    el("h3", {}, "Latency and throughput"), latency, turnSections, webrtcSummary(r.webrtc),
    byCache ? el("h3", {}, "Time to first answer token by prompt cache") : null,
    byCache ? el("p", { class: "muted" }, "Cold and warm prompts differ by up to an order of magnitude; the rows above mix them, these do not.") : null, byCache,
    server ? el("h3", {}, "Server-reported time (white box)") : null, server,
    el("h3", {}, "Goodput and stalls"), goodput,
    el("p", { class: "muted" }, `The same numbers as \`tokentap report --json\` over these records. Versions: ${Object.keys(r.conditions.record_versions).join(", ") || "–"}.`),
  );
  window.__dashboard.ready = location.hash || "#/";
}

/// The agent-turn and voice-turn sections of the Summary (the report's `turns`), each with only
/// the rows it has samples of.
function turnSummary(t) {
  if (!t || (!t.agent_turns && !t.voice_turns)) return null;
  // Each row: [words, the summary's field name, share?]; the plot from the field's ECDF points.
  const table = (rows) => {
    const present = rows.filter(([, key]) => t[key]);
    return present.length ? el("table", {},
      el("thead", {}, el("tr", {}, ["metric", "n", "p50", "p90", "p95", "p99", "max", "distribution (p50, p90, p99 marked)"].map((h, i) => el("th", { class: i && i < 7 ? "n" : "" }, h)))),
      el("tbody", {}, present.map(([label, key, share]) => {
        const d = t[key];
        return el("tr", { "data-metric": label, "data-field": key },
          el("td", {}, label), el("td", { class: "n" }, d.count),
          ...[d.p50, d.p90, d.p95, d.p99, d.max].map((v) => el("td", { class: "n" }, share ? pct(v) : fmt(v, 2))),
          el("td", { class: "plot" }, ecdfPlot(t.ecdf?.[key], d)));
      }))) : el("p", { class: "muted" }, "No complete turn yet.");
  };
  return el("div", { id: "summary-turns" },
    t.agent_turns ? el("section", { class: "traffic", "data-traffic": "agent_turns" },
      el("h4", {}, `Agent turns (with tool calls): ${t.agent_turns} of ${t.turns} turns`),
      el("p", { class: "muted" }, "Where a turn's time went, per complete agent turn; tool runs include the client's own work and network. Each turn is on the Turns page."),
      table([["turn e2e ms", "e2e_ms"], ["model share", "model_share", true], ["tool share", "tool_share", true], ["client share", "client_share", true], ["tool run ms", "tool_run_ms"], ["tool server ms (MCP)", "tool_server_ms"], ["harness around the MCP call ms", "tool_harness_ms"]])) : null,
    t.voice_turns ? el("section", { class: "traffic", "data-traffic": "voice_turns" },
      el("h4", {}, `Voice turns: ${t.voice_turns}`),
      el("p", { class: "muted" }, `Voice to voice needs the browser probe; the other times are the wire's, from the transcription request's start. Speech requests with predicted underruns: ${t.speech_with_underruns}.`),
      table([["voice to voice: end of speech → heard ms", "voice_to_voice_ms"], ["voice to first audible sample ms", "voice_to_first_audible_ms"], ["transcription ms", "transcription_ms"], ["speech request → first audible ms", "speech_to_first_audible_ms"]])) : null);
}

/// Said where it changes what the tables show: requests left out as warm-up, with a way to
/// show them.
function warmupNote(r) {
  if (r.include_warmup || !r.warm_up_excluded) return null;
  const n = r.warm_up_excluded;
  const rule = r.warmup_requests === undefined ? "analysis.warmup_requests" : `analysis.warmup_requests = ${r.warmup_requests}`;
  return el("p", { id: "summary-warmup", class: r.records_used ? "muted" : "notice" },
    `${n} warm-up request${n === 1 ? "" : "s"} excluded (the first requests of each route after start; ${rule})${r.records_used ? "" : ", so no request is counted yet"}. `,
    el("a", { href: "#", id: "summary-show-warmup", onclick: (e) => { e.preventDefault(); state.summary.include_warmup = true; loadSummary(); } }, "Show them"));
}

// ---------- turns ----------

let turnRefresh = null;

/// The model / tool / client split of one turn as a stacked bar (shares of e2e).
function breakdownBar(t, width = 220) {
  const e2e = t.totals.e2e_ms || 1;
  const root = svg("svg", { width, height: 14, class: "breakdown" });
  let x = 0;
  for (const lane of ["model", "tool", "client"]) {
    const w = (t.totals[`${lane}_ms`] / e2e) * width;
    if (w > 0) root.append(svg("rect", { x, y: 1, width: w, height: 12, fill: LANE_COLORS[lane], "data-lane": lane },
      svg("title", {}, `${lane}: ${fmt(t.totals[`${lane}_ms`])} ms (${pct(t.totals[`${lane}_ms`] / e2e)})`)));
    x += w;
  }
  return root;
}

async function loadTurns() {
  let data;
  try { data = await getJson(`${API}/turns?limit=200`); } catch (e) {
    fill(view, el("p", { class: "error" }, `cannot load turns: ${e.message}`));
    return;
  }
  if (window.__dashboard.view !== "turns") return;
  const rows = data.turns.map((t) => el("tr", { class: "row turn", "data-id": t.turn_id, onclick: () => { location.hash = `#/t/${encodeURIComponent(t.turn_id)}`; } },
    el("td", { title: t.started_at }, new Date(t.t0_unix_ns / 1e6).toLocaleTimeString()),
    el("td", {}, t.route),
    el("td", { class: t.status === "complete" ? "" : "bad" }, t.status),
    el("td", { class: "n" }, t.totals.steps),
    el("td", { class: "n" }, t.totals.tool_calls),
    el("td", { class: "n" }, fmt(t.totals.e2e_ms)),
    el("td", { class: "n" }, fmt(t.totals.model_ms)),
    el("td", { class: "n" }, fmt(t.totals.tool_ms)),
    el("td", { class: "n" }, fmt(t.totals.client_ms)),
    el("td", {}, breakdownBar(t)),
    el("td", { class: "muted" }, t.conversation_id.slice(0, 12)),
  ));
  fill(view,
    el("h2", {}, "Turns"),
    el("p", { class: "muted" }, "A turn is one user message and the model calls and tool runs it took to answer, rebuilt from the traffic. Tool time runs from the moment a call was complete at the client to the request that carried its result, so it includes the client's own work and network."),
    el("div", { class: "legend" }, ["model", "tool", "client"].map((l) => el("span", { style: `--c:${LANE_COLORS[l]}` }, l))),
    el("table", { id: "turns" },
      el("thead", {}, el("tr", {}, ["started", "route", "status"].map((h) => el("th", {}, h)), ["steps", "tool calls", "e2e ms", "model ms", "tool ms", "client ms"].map((h) => el("th", { class: "n" }, h)), el("th", {}, "where the time went"), el("th", {}, "conversation"))),
      el("tbody", { id: "turn-rows" }, rows)),
    ...(data.turns.length ? [] : [el("p", { class: "muted" }, "No turns yet: they appear when a model call of a conversation ends with a final answer.")]),
  );
  window.__dashboard.ready = location.hash;
}

/// Gantt of one turn: a model lane (one bar per step), one row per tool run, a client lane; the
/// segments of the critical path are outlined.
function turnGantt(t) {
  const runs = t.tool_runs;
  const rows = [["model", null], ...runs.map((r, i) => [`tool ${r.name ?? "?"}`, i]), ["client", null]];
  const xMax = Math.max(t.totals.e2e_ms, ...t.steps.map((s) => s.end_ms)) * 1.02 || 1;
  const f = frame({ xMin: 0, xMax, yMax: rows.length, height: 28 + rows.length * 24 + 30, left: 130, yTicks: false, xLabel: "ms since the turn started" });
  f.root.id = "turn-gantt";
  const rowY = (i) => f.inner.top + 6 + i * 24;
  rows.forEach(([name], i) => f.root.append(svg("text", { x: 124, y: rowY(i) + 13, "text-anchor": "end" }, name)));
  const onPath = (kind, s, e) => t.critical_path.some((c) => c.kind === kind && c.start_ms < e - 1e-9 && c.end_ms > s + 1e-9);
  const bar = (lane, i, s, e, label, attrs = {}) => {
    const critical = onPath(lane, s, e);
    f.root.append(svg("rect", { class: `gantt ${lane}${critical ? " critical" : ""}`, "data-lane": lane, x: f.x(s), y: rowY(i), width: Math.max(2, f.x(e) - f.x(s)), height: 16, fill: LANE_COLORS[lane], ...attrs },
      svg("title", {}, `${label}: ${fmt(s, 1)} → ${fmt(e, 1)} ms (${fmt(e - s, 1)} ms)${critical ? ", on the critical path" : ""}`)));
  };
  for (const s of t.steps) bar("model", 0, s.start_ms, s.end_ms, `step ${s.step} (${s.model ?? "model"})`, { "data-step": s.step });
  runs.forEach((r, i) => {
    if (r.result_ms !== undefined) bar("tool", i + 1, r.ready_ms, r.result_ms, `${r.name} [${r.call_id ?? "no id"}]`, { "data-call-id": r.call_id ?? "" });
    else f.root.append(svg("text", { x: f.x(r.ready_ms) + 4, y: rowY(i + 1) + 13, class: "bad" }, "never answered"));
    // The MCP call that ran it: the tool server's part of the run, inside the harness's.
    const m = r.mcp;
    if (m) {
      const s = r.ready_ms + m.harness_before_ms, e = s + m.server_ms;
      f.root.append(svg("rect", { class: "gantt mcp", "data-lane": "mcp", "data-call-id": r.call_id ?? "", x: f.x(s), y: rowY(i + 1) + 4, width: Math.max(2, f.x(e) - f.x(s)), height: 8, fill: LANE_COLORS.mcp },
        svg("title", {}, `tools/call ${m.tool} on the MCP server: ${fmt(s, 1)} → ${fmt(e, 1)} ms (${fmt(m.server_ms, 1)} ms); harness ${fmt(m.harness_before_ms, 1)} ms before, ${fmt(m.harness_after_ms, 1)} ms after`)));
    }
  });
  for (const c of t.critical_path.filter((c) => c.kind === "client")) bar("client", rows.length - 1, c.start_ms, c.end_ms, "client");
  return f.root;
}

const VOICE_COLORS = {
  after_speech: "#90a4ae", upload: "#4fc3f7", transcription: "#0288d1", to_model: "#b39ddb", first_token: "#7e57c2",
  to_speech: "#ffb74d", speech_first_byte: "#f57c00", leading_silence: "#ffe082", playout: "#66bb6a",
  speech: "#f57c00", played: "#16a34a", interrupted: "#dc2626", user: "#475569",
};

/// Voice lanes of a turn (ms since its voice t0): the chain of waits, the user's speech end, the
/// transcription, the model call, each speech request (request → first audible sample on the wire)
/// and its playback in the browser (start → end, red when interrupted; underruns in the title).
function voiceGantt(v) {
  const rows = [["wait", "chain"], ["you", "user"], ["transcription", "transcription"], ["model", "model"]];
  v.speech.forEach((s, i) => { rows.push([`speech ${i + 1}`, "speech"]); rows.push([`heard ${i + 1}`, "played"]); });
  const times = [0, v.user_speech_end_ms, ...v.segments.flatMap((s) => [s.start_ms, s.end_ms]),
    ...v.speech.flatMap((s) => [s.start_ms, s.first_audible_ms, s.playout?.started_ms, s.playout?.end_ms])].filter((t) => typeof t === "number");
  const xMin = Math.min(...times), xMax = Math.max(...times) + 1;
  const f = frame({ xMin, xMax, yMax: rows.length, height: 28 + rows.length * 24 + 30, left: 130, yTicks: false, xLabel: "ms since the transcription request started" });
  f.root.id = "turn-voice";
  const rowY = (i) => f.inner.top + 6 + i * 24;
  rows.forEach(([name], i) => f.root.append(svg("text", { x: 124, y: rowY(i) + 13, "text-anchor": "end" }, name)));
  const bar = (lane, i, s, e, color, label) => {
    if (typeof s !== "number" || typeof e !== "number") return;
    f.root.append(svg("rect", { class: "voice", "data-lane": lane, x: f.x(s), y: rowY(i), width: Math.max(2, f.x(e) - f.x(s)), height: 16, fill: color },
      svg("title", {}, `${label}: ${fmt(s, 1)} → ${fmt(e, 1)} ms (${fmt(e - s, 1)} ms)`)));
  };
  for (const seg of v.segments) bar(seg.kind, 0, seg.start_ms, seg.end_ms, VOICE_COLORS[seg.kind] ?? "#999", seg.kind.replaceAll("_", " "));
  if (typeof v.user_speech_end_ms === "number") bar("speech_end", 1, v.user_speech_end_ms, v.user_speech_end_ms, VOICE_COLORS.user, "end of speech");
  const t = v.transcription;
  if (t) bar("transcription", 2, 0, t.transcript_done_ms ?? t.upload_end_ms, VOICE_COLORS.transcription, "transcription request");
  if (typeof v.model_start_ms === "number") bar("model", 3, v.model_start_ms, v.first_answer_token_ms ?? v.model_start_ms, LANE_COLORS.model, "model call to its first answer token");
  v.speech.forEach((s, i) => {
    bar("speech", 4 + 2 * i, s.start_ms, s.first_audible_ms ?? s.first_audio_ms ?? s.start_ms, VOICE_COLORS.speech,
      `speech request ${i + 1} to its first audible sample (predicted underruns ${s.predicted_underruns ?? "?"})`);
    const p = s.playout;
    if (p) bar(p.interrupted ? "interrupted" : "played", 5 + 2 * i, p.started_ms, p.end_ms ?? p.heard_ms, p.interrupted ? VOICE_COLORS.interrupted : VOICE_COLORS.played,
      `played in the browser${p.interrupted ? ", interrupted" : ""}; underruns ${p.underruns} (${fmt(p.starved_ms, 1)} ms starved)`);
  });
  return f.root;
}

function voiceSection(v) {
  if (!v) return [];
  const card = (k, val) => el("div", { class: "card" }, el("div", { class: "k" }, k), el("div", { class: "v" }, val));
  const first = v.speech[0];
  const predicted = v.speech.reduce((a, s) => a + (s.predicted_underruns ?? 0), 0);
  const heard = v.speech.filter((s) => s.playout).reduce((a, s) => a + s.playout.underruns, 0);
  return [
    el("h3", {}, "Voice"),
    el("div", { class: "cards", id: "turn-voice-cards" },
      card("voice to voice (end of speech → heard)", v.voice_to_voice_ms === undefined ? "– (needs the browser probe)" : `${fmt(v.voice_to_voice_ms)} ms`),
      card("to first audible sample (wire)", v.first_audible_ms === undefined ? "–" : `${fmt(v.first_audible_ms)} ms`),
      card("leading silence", first?.leading_silence_ms === undefined ? "–" : `${fmt(first.leading_silence_ms)} ms`),
      card("underruns predicted / heard", `${predicted} / ${v.speech.some((s) => s.playout) ? heard : "–"}`),
      card("interrupted", v.speech.some((s) => s.playout?.interrupted) ? "yes" : "no"),
    ),
    el("div", { class: "legend" }, Object.keys(VOICE_COLORS).filter((k) => v.segments.some((s) => s.kind === k)).map((k) => el("span", { style: `--c:${VOICE_COLORS[k]}` }, k.replaceAll("_", " ")))),
    voiceGantt(v),
  ];
}

async function loadTurn(id) {
  fill(view, el("p", { class: "muted" }, "loading…"));
  let t;
  try { t = await getJson(`${API}/turns/${encodeURIComponent(id)}`); } catch (e) {
    fill(view, el("p", { class: "error" }, `Cannot load turn ${id}: ${e.message}`), el("a", { href: "#/turns" }, "← turns"));
    return;
  }
  // A voice turn whose trace carries a WebRTC session (webrtc.js): how its answer was heard.
  const webrtc = t.voice ? await webrtcForTurn(t) : [];
  if (window.__dashboard.view !== "turn") return;
  const card = (k, v) => el("div", { class: "card" }, el("div", { class: "k" }, k), el("div", { class: "v" }, v));
  const tt = t.totals, share = (ms) => tt.e2e_ms ? ` (${pct(ms / tt.e2e_ms)})` : "";
  fill(view,
    el("p", {}, el("a", { href: "#/turns" }, "← turns")),
    el("h2", {}, `Turn ${t.turn_id}`),
    // A voice turn's wait is the voice chain (its own cards below); the model calls are one part.
    t.voice
      ? el("div", { class: "cards", id: "turn-cards" },
        card("status", t.status),
        card("model calls (first start → answer's end)", `${fmt(tt.e2e_ms)} ms`),
        card("steps / tool calls", `${tt.steps} / ${tt.tool_calls}`),
      )
      : el("div", { class: "cards", id: "turn-cards" },
        card("status", t.status),
        card("end to end", `${fmt(tt.e2e_ms)} ms`),
        card("model", `${fmt(tt.model_ms)} ms${share(tt.model_ms)}`),
        card("tools (with client work)", `${fmt(tt.tool_ms)} ms${share(tt.tool_ms)}`),
        card("other client time", `${fmt(tt.client_ms)} ms${share(tt.client_ms)}`),
        card("steps / tool calls", `${tt.steps} / ${tt.tool_calls}`),
      ),
    ...voiceSection(t.voice),
    ...webrtc,
    // A voice turn's split of the model calls alone would read "model 100 %" next to the voice chain.
    t.voice ? null : el("div", { id: "turn-breakdown" }, breakdownBar(t, 600)),
    el("h3", {}, "Timeline"),
    el("div", { class: "legend" }, ["model", "tool", "client"].map((l) => el("span", { style: `--c:${LANE_COLORS[l]}` }, l)), el("span", { class: "muted" }, "outlined: the critical path")),
    turnGantt(t),
    el("h3", {}, "Steps"),
    el("table", { id: "turn-steps" },
      el("thead", {}, el("tr", {}, ["step", "linked by", "request", "outcome", "model"].map((h) => el("th", {}, h)), ["start ms", "end ms", "first answer ms", "first tool call ms", "tool calls"].map((h) => el("th", { class: "n" }, h)))),
      el("tbody", {}, t.steps.map((s) => el("tr", { class: "row", onclick: () => { location.hash = `#/r/${s.request_id}`; } },
        el("td", {}, s.step), el("td", {}, s.link), el("td", {}, s.request_id), el("td", { class: s.outcome === "ok" ? "" : "bad" }, s.outcome), el("td", {}, s.model ?? "–"),
        el("td", { class: "n" }, fmt(s.start_ms)), el("td", { class: "n" }, fmt(s.end_ms)), el("td", { class: "n" }, fmt(s.ttft_answer_ms)), el("td", { class: "n" }, fmt(s.ttft_tool_ms)), el("td", { class: "n" }, s.tool_calls))))),
    el("h3", {}, "Tool runs"),
    t.tool_runs.length ? null : el("p", { class: "muted" }, "No tool calls in this turn."),
    t.tool_runs.length === 0 ? null : el("table", { id: "turn-tools" },
      el("thead", {}, el("tr", {}, ["tool", "call id", "from step", "result in step"].map((h) => el("th", {}, h)), ["ready ms", "result ms", "duration ms", "tool server ms", "harness ms"].map((h) => el("th", { class: "n" }, h)), el("th", {}, "MCP call"))),
      el("tbody", {}, t.tool_runs.map((r) => el("tr", { "data-mcp": r.mcp ? "joined" : "none" },
        el("td", {}, r.name ?? "–"), el("td", {}, r.call_id ?? "–"), el("td", {}, r.step), el("td", {}, r.result_step ?? "never"),
        el("td", { class: "n" }, fmt(r.ready_ms)), el("td", { class: "n" }, fmt(r.result_ms)), el("td", { class: "n" }, fmt(r.duration_ms)),
        el("td", { class: "n" }, r.mcp ? fmt(r.mcp.server_ms) : "–"),
        el("td", { class: "n" }, r.mcp ? `${fmt(r.mcp.harness_before_ms)} + ${fmt(r.mcp.harness_after_ms)}` : "–"),
        el("td", {}, r.mcp
          ? [el("a", { href: `#/r/${encodeURIComponent(r.mcp.request_id)}` }, `tools/call ${r.mcp.tool} #${r.mcp.jsonrpc_id}`), ` (joined by ${r.mcp.joined_by.join(", ")})`]
          : (r.result_ms === undefined ? "–" : "none seen (a local tool?)")))))),
    el("h3", {}, "Conditions"),
    kv([["conversation", `${t.conversation_id} (turn ${t.turn_index + 1})`], ["trace", t.trace_id], ["agent span", t.agent_span_id], ["started", t.started_at], ["route", t.route]]),
  );
  window.__dashboard.ready = location.hash;
}

// ---------- router ----------

function route() {
  const hash = location.hash || "#/";
  window.__dashboard.ready = false;
  let name;
  if (hash.startsWith("#/r/")) { name = "request"; window.__dashboard.view = name; loadRequest(decodeURIComponent(hash.slice(4))); }
  else if (hash.startsWith("#/t/")) { name = "turn"; window.__dashboard.view = name; loadTurn(decodeURIComponent(hash.slice(4))); }
  else if (hash.startsWith("#/turns")) { name = "turns"; window.__dashboard.view = name; loadTurns(); }
  else if (hash.startsWith("#/summary")) {
    // Deep links: #/summary?window=15m&group_by=route,model&include_warmup=true
    const params = new URLSearchParams(hash.split("?")[1] ?? "");
    if (params.has("window")) state.summary.window = params.get("window");
    if (params.has("group_by")) state.summary.group_by = params.get("group_by");
    if (params.has("include_warmup")) state.summary.include_warmup = params.get("include_warmup") === "true";
    name = "summary"; window.__dashboard.view = name; loadSummary();
  }
  else { name = "list"; window.__dashboard.view = name; loadList(true); }
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.dataset.nav === ({ request: "list", turn: "turns" }[name] ?? name));
}

window.addEventListener("hashchange", route);
startFeed();
route();
