// A realtime session on its request's page: the responses' Gantt and table.

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
