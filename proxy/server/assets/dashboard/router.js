// The hash router: draws the view the location names; loaded last.

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
