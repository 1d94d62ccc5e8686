//! The demo chat page in headless Chromium: it streams an answer through tokentap from the mock,
//! the probe's report joins the record, and the page shows the user's own breakdown.

use std::io::Write;

use serde_json::Value;
use tokentap_e2e::browser::run_demo_page;
use tokentap_e2e::otlp_receiver::{hex, OtlpReceiver};
use tokentap_e2e::{Mock, Tokentap};

/// Fills in the form, sends, and waits until the page shows the breakdown (or 30 s pass).
const SEND_AND_WAIT: &str = r##"(async () => {
  const wait = async (cond, ms) => { const end = Date.now() + ms; while (!cond()) { if (Date.now() > end) return false; await new Promise(r => setTimeout(r, 20)); } return true; };
  if (!await wait(() => window.tokentapProbe, 10000)) return { error: "probe did not load" };
  document.querySelector("#scenario").value = "reasoning";
  document.querySelector("#send").click();
  const shown = await wait(() => !document.querySelector("#breakdown").hidden, 30000);
  return {
    shown,
    status: document.querySelector("#status").textContent,
    answer: document.querySelector("#answer").textContent,
    ttfp: document.querySelector("#ttfp").textContent,
    legend: [...document.querySelectorAll("#legend span")].map(s => s.textContent),
    metrics_rows: document.querySelectorAll("#metrics tbody tr").length,
    text: document.body.innerText,
    width: window.innerWidth,
    overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  };
})()"##;

#[test]
fn demo_page_streams_through_tokentap_and_shows_the_breakdown() {
    let mock = Mock::start(&["--ttft-ms", "80", "--itl-ms", "15", "--tokens", "30", "--reasoning-tokens", "0"]);
    let receiver = OtlpReceiver::start();
    let mut config = tempfile::NamedTempFile::new().unwrap();
    writeln!(config, "demo_page = true\n[otel]\nendpoint = \"{}\"\nbatch_delay_ms = 50", receiver.http_endpoint())
        .unwrap();
    let tokentap = Tokentap::start(&mock.url, &["--config", config.path().to_str().unwrap()]);
    let mut feed = tokentap.feed();
    let out = run_demo_page(&format!("http://{}", tokentap.addr), SEND_AND_WAIT, 60_000);
    let result = &out["result"];
    assert_eq!(result["status"], "done");
    assert!(result["ttfp"].as_str().unwrap().contains("ms"), "{result}");
    assert!(result["metrics_rows"].as_u64().unwrap() >= 8);
    // Read as a person would, at Chromium's default 1,280 px: no placeholder, no raw markdown,
    // no horizontal scrolling, no console error.
    let text = result["text"].as_str().unwrap();
    for word in ["null", "undefined", "NaN", "|---", "**"] {
        assert!(!text.contains(word), "the demo page shows {word:?}:\n{text}");
    }
    assert_eq!(result["width"], 1280, "{result}");
    assert!(result["overflow"].as_f64().unwrap() <= 0.0, "the demo page scrolls sideways: {result}");
    assert_eq!(out["page_errors"], serde_json::json!([]), "{out:#}");
    let errors: Vec<&Value> = out["console"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m.as_str().is_some_and(|m| m.starts_with("error")))
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    let legend = result["legend"].to_string();
    assert!(legend.contains("reasoning") && legend.contains("render"), "{legend}");

    // The record of the chat request, first as written, then again with the browser joined.
    let first = feed.next_record_for("/v1/chat/completions");
    assert!(first["browser"].is_null());
    let joined = feed.next_record_for("/v1/chat/completions");
    assert_eq!(joined["request_id"], first["request_id"]);
    assert_eq!(out["report_answers"][0]["status"], 202, "{out:#}");
    // Nothing the page did by itself (a /favicon.ico, asked for right after the page loaded) went
    // upstream and was recorded as the user's traffic: the chat is the only request recorded.
    let (_, listed) = tokentap.admin_get("/_tokentap/api/requests");
    let paths: Vec<&str> = listed["records"].as_array().unwrap().iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["/v1/chat/completions"], "{listed:#}");
    // The probe's fetch span is the parent of tokentap's span, and the provider saw the same trace.
    assert_eq!(joined["parent_span_id"], joined["browser"]["probe_span_id"]);
    let last = mock.control("/_mock/last_request").1;
    let trace_id = joined["trace_id"].as_str().unwrap();
    assert!(last.to_string().contains(&format!("00-{trace_id}-")), "{last}");

    let browser = &joined["browser"];
    assert_eq!(browser["bytes_match"], true, "{browser:#}");
    assert_eq!(browser["painted_chars"], browser["answer_chars"], "{browser:#}");
    assert_eq!(browser["time_to_first_paint_from"], "user_send");
    let chunks = joined["timeline"]["chunks"].as_array().unwrap();
    let joined_chunks = browser["chunks"].as_array().unwrap();
    assert_eq!(chunks.len(), joined_chunks.len());
    let uncertainty = browser["clock"]["uncertainty_ms"].as_f64().unwrap_or(1.0) + 0.5;
    let mut painted = 0;
    for (c, b) in chunks.iter().zip(joined_chunks) {
        let up = c["t_up_ns"].as_f64().unwrap() / 1e6;
        let handoff = c["t_handoff_ns"].as_f64().unwrap() / 1e6;
        let arrival = b["t_browser_ms"].as_f64().expect("every chunk reached the page");
        assert!(up <= handoff, "{c}");
        assert!(handoff <= arrival + uncertainty, "browser arrival {arrival} before handoff {handoff}");
        if let Some(paint) = b["t_paint_ms"].as_f64() {
            painted += 1;
            assert!(arrival <= paint, "paint {paint} before arrival {arrival}");
        }
    }
    assert!(painted >= 25, "{painted} chunks painted of {}", chunks.len());
    for key in ["delivery_delay_ms", "render_delay_ms"] {
        assert!(browser[key]["count"].as_u64().unwrap() > 0, "{key}: {browser:#}");
    }
    // The browser's spans join the same trace: the page's fetch is the parent of tokentap's span.
    let probe_span = joined["browser"]["probe_span_id"].as_str().unwrap().to_string();
    let received = receiver.wait_for(std::time::Duration::from_secs(60), "the browser's spans", |r| {
        r.spans().iter().any(|s| hex(&s.span_id) == probe_span) && r.spans().iter().any(|s| s.name == "browser render")
    });
    let spans: Vec<_> = received.spans().into_iter().filter(|s| hex(&s.trace_id) == trace_id).collect();
    let fetch = spans.iter().find(|s| hex(&s.span_id) == probe_span).expect("browser fetch span");
    let request =
        spans.iter().find(|s| hex(&s.span_id) == joined["span_id"].as_str().unwrap()).expect("tokentap's request span");
    assert_eq!(hex(&request.parent_span_id), probe_span);
    assert!(fetch.start_time_unix_nano <= request.start_time_unix_nano);
    let render = spans.iter().find(|s| s.name == "browser render").unwrap();
    assert_eq!(hex(&render.parent_span_id), probe_span);
    assert!(
        render.start_time_unix_nano >= fetch.start_time_unix_nano
            && render.end_time_unix_nano <= fetch.end_time_unix_nano
    );

    let value = |v: &Value| v.as_f64().unwrap();
    assert!(value(&browser["first_paint_ms"]) >= value(&joined["analysis"]["metrics"]["ttft_answer_ms"]) - uncertainty);
}
