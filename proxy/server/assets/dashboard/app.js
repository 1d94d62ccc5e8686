// tokentap dashboard: a hash-routed single page served by the admin API. No dependencies; every
// chart is SVG drawn here. Aggregation happens on the server (/_tokentap/api/summary, /api/list),
// so the page only draws what it is given. Plain scripts sharing one global scope, loaded in this
// order by index.html: app.js (constants, state, helpers, charts), webrtc.js, list.js, request.js,
// session.js, summary.js, turns.js, router.js (last: it draws the first view).
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
