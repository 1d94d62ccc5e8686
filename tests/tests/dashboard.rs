//! The dashboard in headless Chromium, after a scripted run through the real tokentap and
//! tokentap-mock: the list shows the records, a request page draws one line per hop present with
//! one point per chunk that completed answer text, and the summary shows the right counts.
//!
//! `tests/browser/dashboard.mjs` drives the page and waits on the page's own "drawn" signal; the
//! expected values are computed here from the records. Screenshots go to
//! `tests/artifacts/dashboard/`.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use tokentap_e2e::browser::{page_query, repo_root, run_dashboard as drive_dashboard, run_page, PageRun};
use tokentap_e2e::{http1, Mock, Tokentap};

const CHAT: &str = "/v1/chat/completions";

/// Points per hop, by the rule the page documents: walk the chunks; a chunk that raises the
/// cumulative answer characters (completed answer events, by end offset) is a point of every hop
/// that has a time for it.
fn expected_hops(record: &Value) -> BTreeMap<String, usize> {
    let chunks = record["timeline"]["chunks"].as_array().unwrap();
    let answers: Vec<&Value> = record["analysis"]["events"]
        .as_array()
        .map(|e| e.iter().filter(|e| e["class"] == "answer").collect())
        .unwrap_or_default();
    let browser = record["browser"]["chunks"].as_array().cloned().unwrap_or_default();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let (mut cum, mut prev) = (0u64, 0u64);
    for (i, c) in chunks.iter().enumerate() {
        let end = c["offset"].as_u64().unwrap() + c["len"].as_u64().unwrap();
        cum = if answers.is_empty() {
            end
        } else {
            answers
                .iter()
                .filter(|e| e["end_offset"].as_u64().unwrap() <= end)
                .map(|e| e["answer_chars_cum"].as_u64().unwrap())
                .max()
                .unwrap_or(cum)
        };
        if cum <= prev {
            continue;
        }
        prev = cum;
        *counts.entry("upstream".into()).or_default() += 1;
        if c["t_handoff_ns"].is_u64() {
            *counts.entry("handoff".into()).or_default() += 1;
        }
        if c["t_acked_ns"].is_u64() {
            *counts.entry("ack".into()).or_default() += 1;
        }
        if browser.get(i).is_some_and(|b| b["t_browser_ms"].is_number()) {
            *counts.entry("browser".into()).or_default() += 1;
        }
        if browser.get(i).is_some_and(|b| b["t_paint_ms"].is_number()) {
            *counts.entry("paint".into()).or_default() += 1;
        }
    }
    counts
}

fn chat_body() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "model": "mock-gpt", "stream": true,
        "messages": [{"role": "user", "content": "Plot me."}],
    }))
    .unwrap()
}

#[test]
fn dashboard_shows_the_records_the_hops_and_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokentap.toml");
    // A stall threshold well below the scheduled 1,100 ms gap: on a loaded machine tokentap may
    // read the chunk before the gap late, which shortens the gap it measures.
    std::fs::write(
        &config,
        "[analysis]\nwarmup_requests = 1\nstall_threshold_ms = 500\n[slo]\nttft_answer_ms = 60000\n",
    )
    .unwrap();
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &["--config", config.to_str().unwrap()]);
    let mut feed = tokentap.feed();

    let mut records: Vec<Value> = Vec::new();
    let scenarios: &[&[(&str, &str)]] = &[
        &[("x-mock-tokens", "30"), ("x-mock-itl-ms", "5"), ("x-mock-ttft-ms", "30")],
        // The upstream itself bursts: five tokens per event, so fewer, taller steps.
        &[("x-mock-tokens", "40"), ("x-mock-tokens-per-chunk", "5"), ("x-mock-itl-ms", "20")],
        &[("x-mock-status", "500")],
        &[
            ("x-mock-tokens", "12"),
            ("x-mock-itl-ms", "5"),
            ("x-mock-stall-at", "5"),
            ("x-mock-stall-ms", "1100"),
            ("x-mock-heartbeat-ms", "200"),
        ],
        &[("x-mock-scenario", "reasoning"), ("x-mock-tokens", "10"), ("x-mock-reasoning-tokens", "6")],
    ];
    for extra in scenarios {
        let mut headers = vec![("content-type", "application/json")];
        headers.extend_from_slice(extra);
        http1::post(tokentap.addr, CHAT, &headers, &chat_body());
        records.push(feed.next_record_for(CHAT));
    }
    // A page in Chromium streams through tokentap; its probe report adds the browser hops.
    let page = run_page(&PageRun::test_page(
        &format!("http://{}", tokentap.addr),
        "stream.html",
        &page_query(&[("x-mock-tokens", "25"), ("x-mock-itl-ms", "10"), ("x-mock-ttft-ms", "50")], ""),
    ));
    assert!(page["error"].is_null(), "browser run failed: {page:#}");
    let browser_id = page["result"]["request_id"].as_str().expect("request id").to_string();
    let joined = loop {
        let r = feed.next_record();
        if r["request_id"] == browser_id.as_str() && r["browser"].is_object() {
            break r;
        }
    };
    records.push(joined);

    let artifacts = repo_root().join("tests/artifacts/dashboard");
    let ids: Vec<&str> = records.iter().map(|r| r["request_id"].as_str().unwrap()).collect();
    let out = drive_dashboard(&json!({
        "admin": format!("http://{}", tokentap.admin),
        "request_ids": ids,
        "summary_hash": "#/summary?window=all&group_by=model&include_warmup=true",
        "artifacts": artifacts.display().to_string(),
    }));
    assert!(out["error"].is_null(), "dashboard run failed: {out:#}");
    assert_eq!(out["page_errors"], json!([]), "{out:#}");
    assert_eq!(out["failed_requests"], json!([]), "{out:#}");
    assert_no_placeholder_text(&out);

    // The list: every record, newest first.
    let mut newest_first = records.clone();
    newest_first.sort_by_key(|r| std::cmp::Reverse(r["timeline"]["t0_unix_ns"].as_u64().unwrap()));
    let expected_ids: Vec<&str> = newest_first.iter().map(|r| r["request_id"].as_str().unwrap()).collect();
    assert_eq!(out["list"]["ids"], json!(expected_ids), "{:#}", out["list"]);
    assert_eq!(out["list"]["total"], records.len());

    // Each request page: one line per hop present, one point per chunk that completed answer text.
    for r in &records {
        let id = r["request_id"].as_str().unwrap();
        let shown = &out["requests"][id];
        let expected = expected_hops(r);
        let hops: BTreeMap<String, usize> = shown["hops"]
            .as_object()
            .unwrap_or_else(|| panic!("no chart for {id}: {shown}"))
            .iter()
            .map(|(hop, v)| {
                assert_eq!(v["paths"], 1, "{id} {hop}: one line");
                assert_eq!(v["circles"], v["points"], "{id} {hop}: {v}");
                (hop.clone(), v["points"].as_u64().unwrap() as usize)
            })
            .collect();
        assert_eq!(hops, expected, "request {id} ({})", r["outcome"]);
        assert_eq!(shown["verdict"], if r["outcome"] == "ok" { "good" } else { "not good" }, "{id}");
        if r["outcome"] == "ok" {
            assert!(shown["phases"].as_array().unwrap().contains(&json!("answer")), "{id}: {shown}");
        }
    }
    let browser_hops = &out["requests"][browser_id.as_str()]["hops"];
    for hop in ["upstream", "handoff", "browser", "paint"] {
        assert!(
            browser_hops[hop]["points"].as_u64().unwrap() > 0,
            "the browser request shows the {hop} hop: {browser_hops}"
        );
    }
    let reasoning = &out["requests"][records[4]["request_id"].as_str().unwrap()];
    assert!(reasoning["phases"].as_array().unwrap().contains(&json!("reasoning")), "{reasoning}");
    let stalled = &out["requests"][records[3]["request_id"].as_str().unwrap()];
    assert!(stalled["lanes"].as_array().unwrap().iter().any(|l| l["lane"] == "stall"), "{stalled}");

    // The summary: everything in memory, warm-up included, grouped by model.
    let s = &out["summary"];
    assert_eq!(s["used"], records.len(), "{s:#}");
    assert_eq!(s["warmup_excluded"], 0);
    let ok: Vec<&Value> = records.iter().filter(|r| r["outcome"] == "ok").collect();
    let all = s["goodput"].as_array().unwrap().iter().find(|g| g["group"] == "all").unwrap();
    assert_eq!(all["requests"], records.len());
    assert_eq!(all["good"], ok.len(), "the SLO is generous: every successful request is good");
    for row in s["latency"].as_array().unwrap() {
        let metric = row["metric"].as_str().unwrap();
        let expected = ok
            .iter()
            .filter(|r| {
                if metric == "time_to_first_paint_ms" {
                    r["browser"]["time_to_first_paint_ms"].is_number()
                } else {
                    r["analysis"]["metrics"][metric].is_number()
                }
            })
            .count();
        assert_eq!(row["group"], "model=mock-gpt");
        assert_eq!(row["count"], expected, "{metric}: {s:#}");
        // Rows only for metrics the group has; each with its distribution drawn.
        assert!(expected > 0 && row["plotted"] == true, "{metric}: {s:#}");
    }
    assert_eq!(s["sections"], json!(["chat"]), "one section per kind of traffic: {s:#}");
    assert!(artifacts.join("dashboard-summary.png").exists());
}

/// A two-step tool turn, sent as an app would (no SDK, no instrumentation): the turns list shows
/// it with its breakdown, and its page draws a model bar per step, a tool bar per call with its id,
/// the critical path outlined, and the steps and tool runs tables.
#[test]
fn dashboard_shows_a_turn_with_its_gantt() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let tools = json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
    ]);
    let headers = [
        ("content-type", "application/json"),
        ("x-mock-agent", "1"),
        ("x-mock-agent-parallel", "2"),
        ("x-mock-tokens", "5"),
    ];
    let user = json!({"role": "user", "content": "Weather and time?"});
    let first = http1::post(
        tokentap.addr,
        CHAT,
        &headers,
        &serde_json::to_vec(&json!({"model": "mock-gpt", "messages": [user], "tools": tools})).unwrap(),
    );
    let reply: Value = serde_json::from_slice(&first.body).unwrap();
    let message = reply["choices"][0]["message"].clone();
    let calls = message["tool_calls"].as_array().expect("the mock answers with tool calls").clone();
    assert_eq!(calls.len(), 2, "{reply}");
    let mut messages = vec![user, message];
    for call in &calls {
        messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": "ok"}));
    }
    http1::post(
        tokentap.addr,
        CHAT,
        &headers,
        &serde_json::to_vec(&json!({"model": "mock-gpt", "messages": messages, "tools": tools})).unwrap(),
    );
    let turn = feed.next_turn();
    let turn_id = turn["turn_id"].as_str().unwrap().to_string();
    assert_eq!(turn["totals"]["steps"], 2, "{turn}");

    let out = drive_dashboard(&json!({
        "admin": format!("http://{}", tokentap.admin),
        "turn_ids": [turn_id],
        "artifacts": repo_root().join("tests/artifacts/dashboard").display().to_string(),
    }));
    assert!(out["error"].is_null(), "dashboard run failed: {out:#}");
    assert_eq!(out["page_errors"], json!([]), "{out:#}");
    assert_eq!(out["turns"]["ids"], json!([turn_id]), "{:#}", out["turns"]);
    assert!(out["turns"]["bars"].as_array().unwrap().contains(&json!("model")), "{:#}", out["turns"]);
    let page = &out["turn_pages"][turn_id.as_str()];
    assert_eq!(page["model_bars"], json!([1, 2]), "{page}");
    let ids: Vec<Value> = calls.iter().map(|c| c["id"].clone()).collect();
    assert_eq!(page["tool_bars"], json!(ids), "{page}");
    assert!(page["critical"].as_u64().unwrap() >= 3, "model, tool, model on the critical path: {page}");
    assert_eq!((page["steps"].as_u64(), page["tool_rows"].as_u64()), (Some(2), Some(2)), "{page}");
}

/// No view prints what JavaScript makes of a missing value: `null` (the DOM turns a `null` child
/// into that text), `undefined` or `NaN`.
fn assert_no_placeholder_text(out: &Value) {
    let texts = out["texts"].as_object().expect("the driver reads each view's text");
    assert!(!texts.is_empty(), "{out:#}");
    for (view, text) in texts {
        let text = text.as_str().unwrap();
        for word in ["null", "undefined", "NaN"] {
            assert!(!text.contains(word), "the {view} view shows {word:?}:\n{text}");
        }
    }
}

/// A fresh tokentap: every view of an empty store reads cleanly. Then two requests, both warm-up
/// (the first 3 of the route): the summary counts none of them by default and says so where the
/// tables are empty, and its "Show them" link counts them.
#[test]
fn dashboard_reads_cleanly_empty_and_says_when_warm_up_is_left_out() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let admin = format!("http://{}", tokentap.admin);
    let out = drive_dashboard(&json!({ "admin": admin }));
    assert!(out["error"].is_null(), "dashboard run failed: {out:#}");
    assert_eq!(out["page_errors"], json!([]), "{out:#}");
    assert_eq!(out["summary"]["used"], 0, "{out:#}");
    assert!(out["summary"]["warmup_note"].is_null(), "nothing was left out: {out:#}");
    assert_no_placeholder_text(&out);

    let mut feed = tokentap.feed();
    for _ in 0..2 {
        let resp = http1::post(tokentap.addr, CHAT, &[("content-type", "application/json")], &chat_body());
        assert_eq!(resp.status, 200);
        feed.next_record_for(CHAT);
    }
    let out = drive_dashboard(&json!({ "admin": admin, "show_warmup": true }));
    assert!(out["error"].is_null(), "dashboard run failed: {out:#}");
    assert_eq!(out["page_errors"], json!([]), "{out:#}");
    assert_no_placeholder_text(&out);
    let s = &out["summary"];
    assert_eq!((s["used"].as_u64(), s["warmup_excluded"].as_u64()), (Some(0), Some(2)), "{s:#}");
    let note = s["warmup_note"].as_str().unwrap_or_else(|| panic!("no warm-up note: {s:#}"));
    assert!(note.contains("2 warm-up requests excluded") && note.contains("analysis.warmup_requests = 3"), "{note}");
    let shown = &out["summary_with_warmup"];
    assert_eq!((shown["used"].as_u64(), shown["warmup_excluded"].as_u64()), (Some(2), Some(0)), "{shown:#}");
    assert!(shown["warmup_note"].is_null(), "{shown:#}");
}

/// Every view with traffic of every kind (a streamed chat, a non-streaming one, an agent turn, a
/// voice turn, a realtime session), read at 1,280 px as a person would: no `null`, `undefined`,
/// `NaN` or raw markdown on screen, no horizontal scrolling, no console error; the Summary has a
/// section per kind. Screenshots go to `tests/artifacts/dashboard/` (and, with
/// `TOKENTAP_SCREENSHOTS_DIR` set, the README's four under stable names there:
/// `scripts/screenshots.sh`).
#[test]
fn every_view_reads_cleanly_with_every_kind_of_traffic() {
    let mock = Mock::start(&["--ttft-ms", "30", "--itl-ms", "5", "--tokens", "12"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let sent = tokentap_e2e::traffic::every_kind(&tokentap, &mut feed);
    let voice_ids = &sent.voice["request_ids"];
    let request_ids = [
        sent.chat_id.as_str(),
        sent.non_streaming_id.as_str(),
        sent.realtime_id.as_str(),
        voice_ids["transcription"].as_str().unwrap(),
        voice_ids["speech_0"].as_str().unwrap(),
    ];
    let turn_ids = [sent.agent_turn["turn_id"].as_str().unwrap(), sent.voice_turn["turn_id"].as_str().unwrap()];
    let artifacts = repo_root().join("tests/artifacts/dashboard");
    let out = drive_dashboard(&json!({
        "admin": format!("http://{}", tokentap.admin),
        "request_ids": request_ids,
        "turn_ids": turn_ids,
        "summary_hash": "#/summary?window=all&include_warmup=true",
        "viewport_width": 1280,
        "artifacts": artifacts.display().to_string(),
    }));
    assert!(out["error"].is_null(), "dashboard run failed: {out:#}");
    assert_eq!(out["page_errors"], json!([]), "{out:#}");
    let errors: Vec<&Value> = out["console"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m.as_str().is_some_and(|m| m.starts_with("error")))
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    assert_no_placeholder_text(&out);
    for (view, text) in out["texts"].as_object().unwrap() {
        let text = text.as_str().unwrap();
        for raw in ["|---", "| --- |", "**", "\n## ", "\n- **"] {
            assert!(!text.contains(raw), "the {view} view shows raw markdown {raw:?}:\n{text}");
        }
    }
    for (view, px) in out["overflow"].as_object().unwrap() {
        assert!(px.as_f64().unwrap() <= 0.0, "the {view} view is {px} px wider than 1,280 px");
    }
    assert_eq!(out["overflow"].as_object().unwrap().len(), out["texts"].as_object().unwrap().len());
    let s = &out["summary"];
    assert_eq!(s["sections"], json!(["chat", "non_streaming", "speech", "transcription", "realtime"]), "{s:#}");
    assert!(
        s["latency"].as_array().unwrap().iter().all(|row| row["count"].as_u64() > Some(0)),
        "rows only for metrics a group has samples of: {s:#}"
    );
    // Every row drawn: the latency rows of every kind (the realtime section's per response) and
    // the turn sections' rows.
    for row in s["latency"].as_array().unwrap().iter().chain(s["turns"].as_array().unwrap()) {
        assert_eq!(row["plotted"], true, "{row}: {s:#}");
    }
    let realtime_rows: Vec<&Value> =
        s["latency"].as_array().unwrap().iter().filter(|r| r["traffic"] == "realtime").collect();
    assert!(!realtime_rows.is_empty(), "the realtime section has per-response rows: {s:#}");
    let turn_fields: Vec<&str> = s["turns"].as_array().unwrap().iter().filter_map(|r| r["field"].as_str()).collect();
    for field in ["e2e_ms", "model_share", "tool_run_ms", "voice_to_first_audible_ms"] {
        assert!(turn_fields.contains(&field), "{field} in the turn sections: {s:#}");
    }
    let summary_text = out["texts"]["summary"].as_str().unwrap();
    assert!(
        summary_text.contains("Agent turns (with tool calls)") && summary_text.contains("Voice turns"),
        "{summary_text}"
    );
    let realtime_page = out["texts"][format!("request:{}", sent.realtime_id)].as_str().unwrap();
    assert!(
        !realtime_page.to_lowercase().contains("first paint"),
        "a realtime session has no first paint:\n{realtime_page}"
    );
    let voice_page = out["texts"][format!("turn:{}", turn_ids[1])].as_str().unwrap();
    assert!(!voice_page.contains("end to end"), "a voice turn's headline is the voice chain:\n{voice_page}");
    for shot in out["screenshots"].as_array().unwrap() {
        assert!(std::path::Path::new(shot.as_str().unwrap()).exists(), "{shot}");
    }
    // The README's screenshots, under stable names, when asked for.
    if let Some(dir) = std::env::var_os("TOKENTAP_SCREENSHOTS_DIR") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (from, to) in [
            ("dashboard-summary.png".to_string(), "summary.png"),
            (format!("dashboard-request-{}.png", sent.chat_id), "request.png"),
            (format!("dashboard-turn-{}.png", turn_ids[0]), "agent-turn.png"),
            (format!("dashboard-turn-{}.png", turn_ids[1]), "voice-turn.png"),
        ] {
            std::fs::copy(artifacts.join(&from), dir.join(to)).unwrap_or_else(|e| panic!("{from}: {e}"));
        }
    }
}
