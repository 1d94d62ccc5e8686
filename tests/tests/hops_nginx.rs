//! The re-buffering verdict against real nginx between tokentap and headless Chromium.
//!
//!   Chromium page + probe ──► nginx (the setting under test) ──► [nginx ──►] tokentap ──► mock
//!
//! The page (tests/browser/pages/stream.html) is served on the outer nginx's origin by the driver;
//! it loads the probe from /_tokentap/probe/ and streams /v1/chat/completions, both through nginx.
//! The probe's report also goes through nginx, and tokentap joins it to the record, whose
//! `diagnosis` is then judged. The stream is ~300-byte events every 25 ms.
//!
//! nginx asks its upstream with HTTP/1.0 by default, and tokentap answers such a client with a
//! close-delimited body (an HTTP/1.0 client cannot read chunked encoding). That is the body nginx's
//! buffers hold, page by page: with 4 KiB buffers and ~300-byte events, nginx fills a buffer about
//! every 330 ms. The scenarios run both with nginx directly in front of tokentap and with an edge
//! nginx in front of an inner one (buffering off), as in deployments with a CDN or ingress.
//!
//! Each scenario runs three times with the same verdict expected every time; each run prints its
//! numbers (`--nocapture`) so the margins to the thresholds in docs/metrics.md can be read off.

use serde_json::Value;
use tokentap_e2e::browser::{run_page, PageRun};
use tokentap_e2e::diagnosis::{page_query, summary};
use tokentap_e2e::nginx::Nginx;
use tokentap_e2e::{Mock, RecordFeed, Tokentap};

const RUNS: usize = 3;

/// The mock's schedule: 72 answer events of ~300 bytes, 25 ms apart.
const SCHEDULE: [(&str, &str); 4] =
    [("x-mock-tokens", "72"), ("x-mock-itl-ms", "25"), ("x-mock-ttft-ms", "100"), ("x-mock-event-bytes", "300")];

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

/// Where the page's requests go.
enum Topology<'a> {
    /// Chromium → nginx (these directives) → tokentap.
    Direct(&'a str),
    /// Chromium → edge nginx (these directives) → inner nginx (buffering off, these extra
    /// directives) → tokentap.
    Edge(&'a str, &'a str),
}

/// Runs a scenario RUNS times and checks the verdict's kind each time.
fn scenario(name: &str, topology: Topology<'_>, mock_headers: &[(&str, &str)], expect_kind: &str) -> Vec<Value> {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let (_inner, outer) = match topology {
        Topology::Direct(directives) => (None, Nginx::start(tokentap.addr, directives)),
        Topology::Edge(edge, inner) => {
            let inner = Nginx::start(tokentap.addr, &format!("proxy_buffering off; {inner}"));
            let edge = Nginx::start(inner.addr, edge);
            (Some(inner), edge)
        }
    };
    let mut feed = tokentap.feed();
    let query = page_query(mock_headers, "");
    (0..RUNS)
        .map(|run| {
            let record = joined_run(&outer.origin(), &mut feed, &query);
            eprintln!("[{name} #{run}] {}", summary(&record));
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
fn edge_nginx_with_default_buffering_is_named_between_tokentap_and_the_browser() {
    // proxy_buffering on is nginx's default; said explicitly so the test reads on its own.
    for record in
        scenario("edge buffering on", Topology::Edge("proxy_buffering on;", ""), &SCHEDULE, "between_proxy_and_browser")
    {
        let d = &record["diagnosis"];
        assert_eq!(d["hop"], "browser_arrival");
        assert!(d["verdict"].as_str().unwrap().starts_with("between tokentap and the browser:"), "{d:#}");
        // tokentap and nginx's socket kept up: the proxy hops are smooth.
        for hop in &d["hops"].as_array().unwrap()[..2] {
            assert_eq!(hop["rebuffers"], false, "{hop:#}");
        }
        assert!(d["hops"][2]["bursts"].as_u64().unwrap() >= 3, "nginx flushed a full buffer several times: {d:#}");
    }
}

#[test]
fn edge_nginx_with_buffering_off_is_no_rebuffering() {
    for record in
        scenario("edge buffering off", Topology::Edge("proxy_buffering off;", ""), &SCHEDULE, "no_rebuffering")
    {
        let hops = record["diagnosis"]["hops"].as_array().unwrap().len();
        assert_eq!(hops, 4, "every hop observed: {:#}", record["diagnosis"]);
    }
}

#[test]
fn x_accel_buffering_no_from_the_upstream_is_no_rebuffering() {
    // The edge buffers by default, but the provider's response asks it not to. tokentap passes
    // the header through; the inner nginx is told to pass it on too (nginx hides X-Accel-*
    // headers from its clients by default).
    let headers = schedule_with(&[("x-mock-response-header", "X-Accel-Buffering: no")]);
    let topology = Topology::Edge("proxy_buffering on;", "proxy_pass_header X-Accel-Buffering;");
    scenario("x-accel-buffering no", topology, &headers, "no_rebuffering");
}

#[test]
fn nginx_gzip_of_event_streams_is_flagged() {
    // Compression holds text until the compressor has a block worth sending. Directly in front of
    // tokentap, so the hold is gzip's alone.
    let gzip = "gzip on; gzip_types text/event-stream; gzip_min_length 0; gzip_proxied any;";
    for record in scenario("gzip", Topology::Direct(gzip), &SCHEDULE, "between_proxy_and_browser") {
        assert_eq!(record["diagnosis"]["hop"], "browser_arrival");
    }
}

#[test]
fn nginx_with_default_buffering_directly_in_front_of_tokentap_is_flagged() {
    for record in
        scenario("direct buffering on", Topology::Direct("proxy_buffering on;"), &SCHEDULE, "between_proxy_and_browser")
    {
        let d = &record["diagnosis"];
        assert_eq!(d["hop"], "browser_arrival");
        assert!(d["hops"][2]["bursts"].as_u64().unwrap() >= 3, "nginx flushed a full buffer several times: {d:#}");
    }
}

#[test]
fn nginx_with_buffering_off_directly_in_front_of_tokentap_is_no_rebuffering() {
    scenario("direct buffering off", Topology::Direct("proxy_buffering off;"), &SCHEDULE, "no_rebuffering");
}
