// The request list and its live feed.

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
