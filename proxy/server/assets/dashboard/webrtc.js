// tokentap dashboard: WebRTC voice sessions (a record whose SDP offer carried a peer connection the
// browser probe measured: `browser.webrtc`). Loaded before app.js, whose helpers (el, svg, frame,
// fmt, kv, fill, getJson) these functions call when a view draws.
//
// Each answer's voice turn is one row, aligned at the user's end of speech: the server and the
// network (end of speech → the answer's first audible packet in the page, with the data channel's
// events as ticks), the jitter buffer (→ its first audible sample handed to playout) and playout
// (→ heard). Voice to ear is the whole bar. Times in the record are ms since the offer's t0.
"use strict";

const WEBRTC_COLORS = { response: "#7e57c2", jitter_buffer: "#0288d1", playout: "#66bb6a", event: "#f57c00", speech_end: "#475569" };
const WEBRTC_PART_NAMES = { response: "end of speech → first packet (server + network)", jitter_buffer: "jitter buffer", playout: "playout" };

const isNum = (v) => typeof v === "number" && Number.isFinite(v);

/// A turn's parts ({part, s, e} in ms since the offer's t0) from the end of speech to heard.
function webrtcParts(t) {
  const packet = isNum(t.first_packet_ms) ? t.first_packet_ms : t.delivered_ms;
  const parts = [];
  if (isNum(t.speech_end_ms)) parts.push({ part: "response", s: t.speech_end_ms, e: packet });
  if (isNum(t.first_packet_ms)) parts.push({ part: "jitter_buffer", s: t.first_packet_ms, e: t.delivered_ms });
  parts.push({ part: "playout", s: t.delivered_ms, e: t.heard_ms });
  return parts;
}

/// Where a turn's row starts: its end of speech, else its first event, else its first packet.
function webrtcOrigin(t) {
  if (isNum(t.speech_end_ms)) return t.speech_end_ms;
  if (t.events?.length) return t.events[0].t_ms;
  return isNum(t.first_packet_ms) ? t.first_packet_ms : t.delivered_ms;
}

const median = (xs) => {
  if (!xs.length) return undefined;
  const s = [...xs].sort((a, b) => a - b), m = (s.length - 1) / 2;
  return (s[Math.floor(m)] + s[Math.ceil(m)]) / 2;
};

const webrtcAudio = (t) => `${t.choppy ? "choppy" : "clean"}${isNum(t.concealed_ratio) ? ` (${fmt(100 * t.concealed_ratio, 1)} % concealed)` : ""}`;

/// One row per answer (`turns`, numbered from `first`), aligned at its end of speech.
function webrtcTimeline(turns, first) {
  const rows = turns.map((t) => ({ t, o: webrtcOrigin(t) }));
  const ends = rows.flatMap(({ t, o }) => [t.heard_ms - o, ...(t.events ?? []).map((e) => e.t_ms - o)]).filter(isNum);
  const xMin = Math.min(0, ...ends), xMax = Math.max(1, ...ends) + 1;
  const f = frame({ xMin, xMax, yMax: rows.length, height: 28 + rows.length * 26 + 30, left: 90, yTicks: false, xLabel: "ms after the end of speech" });
  f.root.id = "webrtc-timeline";
  const rowY = (i) => f.inner.top + 6 + i * 26;
  rows.forEach(({ t, o }, i) => {
    const label = `answer ${first + i + 1}`;
    f.root.append(svg("text", { x: 84, y: rowY(i) + 13, "text-anchor": "end" }, label));
    for (const p of webrtcParts(t)) {
      if (!isNum(p.s) || !isNum(p.e)) continue;
      const s = p.s - o, e = Math.max(p.e - o, s);
      f.root.append(svg("rect", { class: "webrtc", "data-part": p.part, x: f.x(s), y: rowY(i), width: Math.max(2, f.x(e) - f.x(s)), height: 18, fill: WEBRTC_COLORS[p.part] },
        svg("title", {}, `${label}: ${WEBRTC_PART_NAMES[p.part]} ${fmt(e - s, 1)} ms`)));
    }
    for (const ev of t.events ?? []) {
      if (!isNum(ev.t_ms)) continue;
      f.root.append(svg("rect", { class: "webrtc-event", "data-event": ev.name, x: f.x(ev.t_ms - o) - 1, y: rowY(i) - 3, width: 2, height: 24, fill: WEBRTC_COLORS.event },
        svg("title", {}, `${label}: ${ev.name} at ${fmt(ev.t_ms - o, 1)} ms`)));
    }
  });
  return f.root;
}

/// The table of answers: each part in ms, the data channel's events after the end of speech.
function webrtcTable(turns, first) {
  const head = ["answer", "end of speech"].map((h) => el("th", {}, h)).concat(el("th", {}, "server events (ms after the end of speech)"),
    ["→ first packet ms", "jitter buffer ms", "playout ms", "voice to ear ms"].map((h) => el("th", { class: "n" }, h)), el("th", {}, "audio"));
  return el("table", { id: "webrtc-turns" }, el("thead", {}, el("tr", {}, head)),
    el("tbody", {}, turns.map((t, i) => {
      const o = webrtcOrigin(t);
      const toPacket = isNum(t.speech_end_ms) && isNum(t.first_packet_ms) ? t.first_packet_ms - t.speech_end_ms : undefined;
      const events = (t.events ?? []).map((e) => `${e.name} ${e.t_ms >= o ? "+" : ""}${fmt(e.t_ms - o, 0)}`).join(", ");
      return el("tr", { "data-choppy": t.choppy ? "true" : "false" },
        el("td", {}, `#${first + i + 1}`),
        el("td", {}, t.speech_end_source ? `detected (${t.speech_end_source})` : "not known"),
        el("td", { style: "white-space: normal" }, events || "none"),
        el("td", { class: "n" }, fmt(toPacket)), el("td", { class: "n" }, fmt(t.jitter_buffer_ms)),
        el("td", { class: "n" }, fmt(t.playout_delay_ms)), el("td", { class: "n" }, fmt(t.voice_to_ear_ms)),
        el("td", { class: t.choppy ? "bad" : "" }, webrtcAudio(t) + (isNum(t.barge_in_ms) ? ", talked over" : "")));
    })));
}

/// The session's headline cards, its choppy-audio verdict, and the answers (all, or `turns`).
function webrtcSection(w, turns = w.turns, first = 0) {
  const card = (k, v, attrs = {}) => el("div", { class: "card", ...attrs }, el("div", { class: "k" }, k), el("div", { class: "v" }, v));
  const ms = (x) => x === undefined ? "–" : `${fmt(x)} ms`;
  const v2e = turns.map((t) => t.voice_to_ear_ms).filter(isNum);
  const toPacket = turns.filter((t) => isNum(t.speech_end_ms) && isNum(t.first_packet_ms)).map((t) => t.first_packet_ms - t.speech_end_ms);
  const choppy = w.choppy || turns.some((t) => t.choppy);
  const verdict = choppy
    ? `Choppy audio: ${isNum(w.concealed_ratio) ? `${fmt(100 * w.concealed_ratio, 1)} % of the received samples were concealed` : "concealment above 2 %"}${isNum(w.loss_ratio) ? `, ${fmt(100 * w.loss_ratio, 1)} % of packets lost` : ""}.`
    : `Clean audio: ${isNum(w.concealed_ratio) ? `${fmt(100 * w.concealed_ratio, 2)} % concealed` : "no concealment reported"} (choppy above 2 %).`;
  return [
    el("div", { class: "cards", id: "webrtc-cards" },
      card("answers", String(turns.length)),
      card("voice to ear (median)", v2e.length ? ms(median(v2e)) : "– (no end of speech known)"),
      card("end of speech → first packet (median)", ms(median(toPacket))),
      card("jitter buffer (session mean)", ms(w.jitter_buffer_ms)),
      card("playout delay (session mean)", ms(w.playout_delay_ms)),
      card("round trip", ms(w.rtt_ms)),
      card("packets lost", isNum(w.loss_ratio) ? `${fmt(100 * w.loss_ratio, 1)} %` : "–"),
      card("barge-ins", String(w.barge_ins ?? 0)),
    ),
    el("p", { id: "webrtc-verdict", class: choppy ? "bad" : "good" }, verdict),
    el("div", { class: "legend" }, Object.entries(WEBRTC_PART_NAMES).map(([k, name]) => el("span", { style: `--c:${WEBRTC_COLORS[k]}` }, name)),
      el("span", { style: `--c:${WEBRTC_COLORS.event}` }, "data channel event")),
    turns.length ? webrtcTimeline(turns, first) : el("p", { class: "muted" }, "No answer was heard."),
    turns.length ? webrtcTable(turns, first) : null,
  ];
}

/// The request page of an offer whose peer connection the page measured.
function showWebrtcSession(record) {
  const w = record.browser.webrtc;
  fill(view,
    el("p", {}, el("a", { href: "#/" }, "← requests")),
    el("h2", {}, `WebRTC session (${record.method} ${record.path.split("?")[0]})`),
    el("p", { class: "muted" }, "Only the SDP offer passed tokentap; the audio and the data channel went peer to peer, measured by the browser probe. Each answer from the end of your speech to its first sample heard."),
    ...webrtcSection(w),
    el("div", { class: "grid2" },
      el("div", {}, el("h3", {}, "Offer"), kv([
        ["request id", record.request_id], ["started", record.started_at], ["route", record.route], ["upstream", record.upstream],
        ["status", record.status], ["trace", record.trace_id]])),
      el("div", {}, el("h3", {}, "Connection"), kv([
        ["connected ms", fmt(w.connected_ms)], ["closed ms", fmt(w.closed_ms)], ["jitter ms", fmt(w.jitter_ms)],
        ["jitter buffer target ms", fmt(w.jitter_buffer_target_ms)], ["concealment events", w.concealment_events],
        ["data channel events", (w.event_counts ?? []).map((c) => `${c.name} ×${c.count}`).join(", ") || "none"],
        ["browser clock ±ms", record.browser.clock ? fmt(record.browser.clock.uncertainty_ms, 2) : undefined]]))),
  );
  window.__dashboard.ready = location.hash || "#/";
}

/// A voice turn's WebRTC session, when its trace carries one (the agent's calls went through
/// tokentap in the offer's trace): the answers heard while the turn ran, else the whole session.
async function webrtcForTurn(t) {
  let list;
  try { list = await getJson(`${API}/requests?limit=20&trace_id=${encodeURIComponent(t.trace_id)}`); } catch { return []; }
  const record = (list.records ?? []).find((r) => r.browser?.webrtc);
  if (!record) return [];
  const w = record.browser.webrtc, t0 = Date.parse(record.started_at), start = Date.parse(t.started_at);
  let index = -1;
  if (Number.isFinite(t0) && Number.isFinite(start)) {
    // The answer whose end of speech came before the turn's first request and that was heard after it.
    index = w.turns.findIndex((a) => isNum(a.speech_end_ms) && t0 + a.speech_end_ms <= start + 50 && t0 + a.heard_ms >= start);
  }
  const turns = index >= 0 ? [w.turns[index]] : w.turns;
  return [
    el("h3", { id: "turn-webrtc" }, "Heard over WebRTC"),
    el("p", { class: "muted" }, ["The session's offer: ", el("a", { href: `#/r/${encodeURIComponent(record.request_id)}` }, record.request_id),
      index >= 0 ? `; this turn is its answer ${index + 1} of ${w.turns.length}.` : `; its ${w.turns.length} answers.`]),
    ...webrtcSection(w, turns, Math.max(index, 0)),
  ];
}

/// The Summary's WebRTC section (the report's `webrtc`): per answer over every session in the
/// window, and how many sounded choppy.
function webrtcSummary(w) {
  if (!w) return null;
  const rows = [["voice to ear: end of speech → heard ms", "voice_to_ear_ms"], ["end of speech → first packet ms", "speech_end_to_first_packet_ms"],
    ["jitter buffer ms", "jitter_buffer_ms"], ["playout delay ms", "playout_delay_ms"]].filter(([, key]) => w[key]);
  return el("section", { class: "traffic", id: "summary-webrtc", "data-traffic": "webrtc" },
    el("h4", {}, `WebRTC sessions: ${w.sessions}, ${w.answers} answers`),
    el("p", { class: w.choppy_sessions ? "bad" : "muted" }, `Measured in the page by the browser probe (only the offer passes tokentap). Choppy audio: ${w.choppy_sessions} of ${w.sessions} sessions, ${w.choppy_answers} of ${w.answers} answers; talked over: ${w.barge_ins}.`),
    rows.length ? el("table", {},
      el("thead", {}, el("tr", {}, ["metric", "n", "p50", "p90", "p95", "p99", "max"].map((h, i) => el("th", { class: i ? "n" : "" }, h)))),
      el("tbody", {}, rows.map(([label, key]) => {
        const d = w[key];
        return el("tr", { "data-field": key }, el("td", {}, label), el("td", { class: "n" }, d.count),
          ...[d.p50, d.p90, d.p95, d.p99, d.max].map((v) => el("td", { class: "n" }, fmt(v, 2))));
      }))) : el("p", { class: "muted" }, "No answer with these times yet."));
}
