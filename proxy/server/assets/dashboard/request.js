// One request's page: phases, waterfall, cumulative progress per hop, event lanes, ITL histogram,
// verdict and conditions.

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
