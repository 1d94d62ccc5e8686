// The turns list and one turn's page (agent and voice turns).

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
