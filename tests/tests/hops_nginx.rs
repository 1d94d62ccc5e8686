//! The re-buffering verdict against a real nginx between tokentap and headless Chromium:
//!
//!   Chromium page + probe ──► nginx ──► tokentap ──► tokentap-mock
//!
//! The page (tests/browser/pages/stream.html) is served on nginx's origin by the driver; it loads
//! the probe from /_tokentap/probe/ and streams /v1/chat/completions, both through nginx. The
//! probe's report also goes through nginx, and tokentap joins it to the record, whose
//! `diagnosis` is then judged. The stream is ~300-byte events every 25 ms, so nginx's 4 KiB
//! buffers fill about every 330 ms, many times per answer. Each scenario runs three times with
//! the same verdict expected every time; each run prints its numbers (`--nocapture`) so the
//! margins to the thresholds in docs/metrics.md can be read off.

use serde_json::Value;
use tokentap_e2e::browser::{run_page, PageRun};
use tokentap_e2e::nginx::Nginx;
use tokentap_e2e::{Mock, RecordFeed, Tokentap};

const RUNS: usize = 3;

/// The mock's schedule: 72 answer events of ~300 bytes, 25 ms apart.
const SCHEDULE: [(&str, &str); 4] = [("x-mock-tokens", "72"), ("x-mock-itl-ms", "25"), ("x-mock-ttft-ms", "100"), ("x-mock-event-bytes", "300")];

/// The page's query for a mock schedule (x-mock-* request headers).
fn query(mock_headers: &[(&str, &str)], extra: &str) -> String {
    let mock: serde_json::Map<String, Value> = mock_headers.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect();
    let encoded: String = Value::Object(mock)
        .to_string()
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect();
    format!("?mock={encoded}{extra}")
}

/// Loads the page once on `origin` and returns the request's record with the browser joined.
fn joined_run(origin: &str, feed: &mut RecordFeed, query: &str) -> Value {
    let out = run_page(&PageRun::test_page(origin, "stream.html", query));
    assert!(out["error"].is_null(), "browser run failed: {out:#}");
    assert_eq!(out["page_errors"], serde_json::json!([]), "{out:#}");
    let status = out["report_answers"][0]["status"].as_u64().unwrap_or(0);
    assert!((200..300).contains(&status), "tokentap refused the report: {out:#}");
    let request_id = out["result"]["request_id"].as_str().expect("x-tokentap-request-id through nginx").to_string();
    loop {
        let record = feed.next_record();
        if record["request_id"] == request_id.as_str() && !record["browser"].is_null() {
            assert_eq!(record["browser"]["bytes_match"], true, "the page read what tokentap forwarded");
            return record;
        }
    }
}

/// One line per run with what the thresholds are compared against.
fn print_margins(scenario: &str, run: usize, record: &Value) {
    let d = &record["diagnosis"];
    let hops: Vec<String> = d["hops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            format!(
                "{}: held {:.0}% p50 {:.0} ms, bursts {}, added p50/max {:.1}/{:.1} ms, thr {:.1}, in long frames {}",
                h["hop"].as_str().unwrap(),
                h["held_fraction"].as_f64().unwrap() * 100.0,
                h["held_p50_ms"].as_f64().unwrap_or(0.0),
                h["bursts"],
                h["added_ms"]["p50"].as_f64().unwrap(),
                h["added_ms"]["max"].as_f64().unwrap(),
                h["hold_threshold_ms"].as_f64().unwrap(),
                h["held_chars_in_long_frames"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    eprintln!("[{scenario} #{run}] {} | {}", d["verdict"].as_str().unwrap_or("?"), hops.join(" | "));
}

/// Runs a scenario RUNS times and checks the verdict's kind each time.
fn scenario(name: &str, location: &str, mock_headers: &[(&str, &str)], extra_query: &str, expect_kind: &str) -> Vec<Value> {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let nginx = Nginx::start(tokentap.addr, location);
    let mut feed = tokentap.feed();
    let query = query(mock_headers, extra_query);
    (0..RUNS)
        .map(|run| {
            let record = joined_run(&nginx.origin(), &mut feed, &query);
            print_margins(name, run, &record);
            let d = &record["diagnosis"];
            assert_eq!(d["kind"], expect_kind, "{name} run {run}: {}\n{d:#}", d["verdict"]);
            record
        })
        .collect()
}

fn schedule_with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    SCHEDULE.iter().copied().chain(extra.iter().copied()).collect()
}

#[test]
fn nginx_proxy_buffering_on_is_named_between_tokentap_and_the_browser() {
    // proxy_buffering on is nginx's default; said explicitly so the test reads on its own.
    for record in scenario("buffering on", "proxy_buffering on;", &SCHEDULE, "", "between_proxy_and_browser") {
        let d = &record["diagnosis"];
        assert_eq!(d["hop"], "browser_arrival");
        assert!(d["verdict"].as_str().unwrap().starts_with("between tokentap and the browser:"), "{d:#}");
        // tokentap and nginx's socket kept up: the proxy hops are smooth.
        for hop in &d["hops"].as_array().unwrap()[..2] {
            assert_eq!(hop["rebuffers"], false, "{hop:#}");
        }
    }
}

#[test]
fn nginx_proxy_buffering_off_is_no_rebuffering() {
    for record in scenario("buffering off", "proxy_buffering off;", &SCHEDULE, "", "no_rebuffering") {
        let hops = record["diagnosis"]["hops"].as_array().unwrap().len();
        assert_eq!(hops, 4, "every hop observed: {:#}", record["diagnosis"]);
    }
}

#[test]
fn x_accel_buffering_no_from_the_upstream_is_no_rebuffering() {
    // nginx buffers by default, but the provider's response asks it not to, and tokentap passes
    // the header through.
    let headers = schedule_with(&[("x-mock-response-header", "X-Accel-Buffering: no")]);
    scenario("x-accel-buffering no", "proxy_buffering on;", &headers, "", "no_rebuffering");
}

#[test]
fn nginx_gzip_of_event_streams_is_flagged() {
    // Compression holds text until the compressor has a block worth sending.
    let gzip = "gzip on; gzip_types text/event-stream; gzip_min_length 0; gzip_proxied any;";
    for record in scenario("gzip", gzip, &SCHEDULE, "", "between_proxy_and_browser") {
        assert_eq!(record["diagnosis"]["hop"], "browser_arrival");
    }
}
