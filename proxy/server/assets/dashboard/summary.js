// The Summary page: percentiles, ECDFs, goodput and the turn and realtime sections, per group.

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
