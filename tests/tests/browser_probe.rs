//! The browser probe in headless Chromium, against the real tokentap and tokentap-mock.
//!
//! Each test loads a test page (tests/browser/pages/, served on tokentap's origin by the driver)
//! that imports the probe tokentap serves at /_tokentap/probe/, streams an answer from
//! /v1/chat/completions through tokentap from the mock, and shows it. The probe's report goes to
//! tokentap's ingest; the driver keeps a copy. The checks are orderings and equalities within one
//! run (arrival before paint, bytes equal), never how fast anything was.

use serde_json::Value;
use tokentap_e2e::browser::{run_page, PageRun};
use tokentap_e2e::{Mock, RecordFeed, Tokentap};

use tokentap_e2e::browser::page_query as query;

fn f64_at(v: &Value, what: &str) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

/// Runs the stream page once and returns (driver output, the one report), after the checks every
/// run must pass: no page errors, one report of the right shape, accepted by tokentap.
fn stream_page(tokentap: &Tokentap, query: &str) -> (Value, Value) {
    let origin = format!("http://{}", tokentap.addr);
    let out = run_page(&PageRun::test_page(&origin, "stream.html", query));
    assert!(out["error"].is_null(), "browser run failed: {out:#}");
    assert_eq!(out["page_errors"], serde_json::json!([]), "{out:#}");
    assert_eq!(out["probe_source"], "tokentap", "{out:#}");
    let reports = out["reports"].as_array().expect("reports");
    assert_eq!(reports.len(), 1, "one turn, one report: {out:#}");
    let report = reports[0].clone();
    let answer = &out["report_answers"][0];
    let status = answer["status"].as_u64().unwrap_or(0);
    assert!((200..300).contains(&status), "tokentap refused the report: {answer}\nreport: {report:#}");

    assert_eq!(report["schema"], "tokentap.probe/1");
    let trace_id = report["trace_id"].as_str().unwrap();
    assert!(
        trace_id.len() == 32 && trace_id.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
        "{trace_id}"
    );
    assert_eq!(report["span_id"].as_str().unwrap().len(), 16);
    assert_eq!(report["page_path"], "/_test/stream.html", "no query string in paths");
    assert_eq!(report["request"], serde_json::json!({"method": "POST", "path": "/v1/chat/completions", "status": 200}));
    (out, report)
}

/// Arrival stamps are ordered and cumulative; paints follow arrivals; the app got every byte.
fn check_stream_timeline(out: &Value, report: &Value) {
    let result = &out["result"];
    let fetch = &report["fetch"];
    let start = f64_at(&fetch["start_ms"], "fetch.start_ms");
    let response = f64_at(&fetch["response_ms"], "fetch.response_ms");
    let end = f64_at(&fetch["end_ms"], "fetch.end_ms");
    assert!(start <= response && response <= end, "{fetch}");

    let send = report["marks"].as_array().unwrap().iter().find(|m| m["name"] == "user_send").expect("user_send mark");
    assert!(f64_at(&send["t_ms"], "user_send") <= start, "the mark was made before the fetch");

    let chunks = fetch["chunks"].as_array().unwrap();
    assert!(!chunks.is_empty());
    assert_eq!(fetch["chunks_dropped"], 0);
    let mut last_t = start;
    let mut last_bytes = 0;
    for c in chunks {
        let t = f64_at(&c["t_ms"], "chunk t_ms");
        let bytes = c["bytes"].as_u64().unwrap();
        assert!(t >= last_t, "chunk arrivals go forward from the fetch start: {fetch}");
        assert!(bytes > last_bytes, "bytes are cumulative: {fetch}");
        (last_t, last_bytes) = (t, bytes);
    }
    assert!(last_t <= end, "{fetch}");
    // The app read the stream itself, once, and got every byte the probe counted.
    assert_eq!(result["bytes"].as_u64(), Some(last_bytes), "app bytes vs probe bytes: {out:#}");
    assert_eq!(result["status"], 200);

    let paints = report["paints"].as_array().unwrap();
    assert_eq!(report["paints_dropped"], 0);
    let first_arrival = f64_at(&chunks[0]["t_ms"], "first chunk");
    let mut last_paint = 0.0;
    let mut last_chars = 0;
    for p in paints {
        let t = f64_at(&p["t_ms"], "paint t_ms");
        let chars = p["chars"].as_u64().unwrap();
        assert!(t >= last_paint, "paints in order: {paints:?}");
        assert!(chars >= last_chars, "characters are cumulative: {paints:?}");
        if chars > 0 {
            assert!(t >= first_arrival, "a paint of answer text before any byte arrived: {p} vs {first_arrival}");
        }
        (last_paint, last_chars) = (t, chars);
    }
    assert_eq!(result["chars"].as_u64(), Some(last_chars), "the last paint shows the whole answer: {paints:?}");
    // A paint is in the frame after the text changed: it cannot precede the data that carried it.
    let last_data = chunks.iter().rev().map(|c| f64_at(&c["t_ms"], "t")).find(|&t| t <= last_paint).unwrap_or(f64::NAN);
    assert!(last_paint >= last_data, "{paints:?}");
}

/// The probe counted the answer characters of the body the page read (SSE, `choices[0].delta`):
/// every arrival carries them, cumulative, and the last one is the whole answer the app showed.
fn check_answer_chars(out: &Value, report: &Value) {
    let fetch = &report["fetch"];
    assert_eq!(fetch["text_format"], "sse", "{fetch}");
    let mut last = 0;
    for c in fetch["chunks"].as_array().unwrap() {
        let chars = c["chars"].as_u64().unwrap_or_else(|| panic!("an arrival without answer characters: {fetch}"));
        assert!(chars >= last, "answer characters are cumulative: {fetch}");
        last = chars;
    }
    assert_eq!(out["result"]["chars"].as_u64(), Some(last), "the last arrival counts the whole answer: {fetch}");
}

/// Waits on the live feed for the request's record with the browser timeline joined to it.
fn joined_record(feed: &mut RecordFeed, out: &Value) -> Value {
    let request_id = out["result"]["request_id"].as_str().expect("x-tokentap-request-id").to_string();
    loop {
        let record = feed.next_record();
        if record["request_id"] == request_id.as_str() && !record["browser"].is_null() {
            return record;
        }
    }
}

/// In the joined record, every chunk goes upstream arrival ≤ handoff ≤ browser arrival ≤ paint
/// (browser times carry the clock estimate's uncertainty), and the bytes and characters agree.
fn check_joined_record(record: &Value) {
    let browser = &record["browser"];
    assert_eq!(browser["bytes_match"], true, "{browser:#}");
    assert_eq!(browser["painted_chars"], browser["answer_chars"], "{browser:#}");
    let slack = f64_at(&browser["clock"]["uncertainty_ms"], "clock uncertainty") + 1.0;
    let proxy_chunks = record["timeline"]["chunks"].as_array().expect("timeline.chunks");
    let browser_chunks = browser["chunks"].as_array().expect("browser.chunks");
    assert_eq!(proxy_chunks.len(), browser_chunks.len(), "browser.chunks is parallel to timeline.chunks");
    let mut painted = 0;
    for (proxy, page) in proxy_chunks.iter().zip(browser_chunks) {
        let up = f64_at(&proxy["t_up_ns"], "t_up_ns") / 1e6;
        let handoff = f64_at(&proxy["t_handoff_ns"], "t_handoff_ns") / 1e6;
        let arrival = f64_at(&page["t_browser_ms"], "t_browser_ms");
        assert!(up <= handoff, "upstream arrival after handoff: {proxy}");
        assert!(
            handoff <= arrival + slack,
            "browser arrival {arrival} before handoff {handoff} (± {slack}): {proxy} {page}"
        );
        if let Some(paint) = page["t_paint_ms"].as_f64() {
            assert!(arrival <= paint, "painted before it arrived: {page}");
            painted += 1;
        }
    }
    assert!(painted > 0, "no chunk was painted: {browser:#}");
}

#[test]
fn streamed_answer_is_stamped_from_arrival_to_paint() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let (out, report) = stream_page(
        &tokentap,
        &query(&[("x-mock-tokens", "40"), ("x-mock-itl-ms", "15"), ("x-mock-ttft-ms", "100")], ""),
    );
    check_stream_timeline(&out, &report);
    check_answer_chars(&out, &report);
    let record = joined_record(&mut feed, &out);
    check_joined_record(&record);
    assert_eq!(record["browser"]["probe_span_id"], report["span_id"]);
    assert_eq!(record["browser"]["time_to_first_paint_from"], "user_send");
    // The page read tokentap's own response: arrivals by bytes, the counted characters kept.
    assert_eq!(record["browser"]["alignment"], "bytes", "{:#}", record["browser"]);
    assert_eq!(record["browser"]["text_format"], "sse", "{:#}", record["browser"]);
    assert_eq!(record["browser"]["browser_chars"], out["result"]["chars"], "{:#}", record["browser"]);

    // The traceparent the provider received carries the probe's trace id.
    let (status, last) = mock.control("/_mock/last_request");
    assert_eq!(status, 200);
    let traceparent = last["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h[0].as_str().is_some_and(|n| n.eq_ignore_ascii_case("traceparent")))
        .and_then(|h| h[1].as_str())
        .unwrap_or_else(|| panic!("no traceparent upstream: {last}"));
    assert_eq!(traceparent.split('-').nth(1), report["trace_id"].as_str(), "{traceparent}");

    // Same machine: the clock estimate finds (almost) no offset, within its own uncertainty.
    let clock = &report["clock"];
    let offset = f64_at(&clock["offset_ms"], "clock.offset_ms");
    let uncertainty = f64_at(&clock["uncertainty_ms"], "clock.uncertainty_ms");
    assert_eq!(clock["samples"], 5);
    assert!(uncertainty >= 0.0 && offset.abs() <= uncertainty + 20.0, "{clock}");
}

/// However the app reads the body (`getReader()` above; here `text()`, async iteration, a
/// `TextDecoderStream` pipe), the probe's stream is the one it reads: every chunk is stamped,
/// aligned by bytes, and painted after it arrived. Streaming reads paint as the text comes, and
/// nothing is held; `text()` paints once at the end, and the verdict names the page's paint, not
/// the network.
#[test]
fn every_way_of_reading_the_body_is_stamped() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    for read in ["iterate", "decoder_stream", "text"] {
        let (out, report) = stream_page(
            &tokentap,
            &query(
                &[("x-mock-tokens", "40"), ("x-mock-itl-ms", "15"), ("x-mock-ttft-ms", "100")],
                &format!("&read={read}"),
            ),
        );
        check_stream_timeline(&out, &report);
        check_answer_chars(&out, &report);
        let record = joined_record(&mut feed, &out);
        check_joined_record(&record);
        let browser = &record["browser"];
        assert_eq!(browser["alignment"], "bytes", "{read}: {browser:#}");
        assert!(browser["transport"].is_null(), "{read}: fetch is the default transport: {browser:#}");
        let paints: Vec<f64> =
            browser["chunks"].as_array().unwrap().iter().filter_map(|c| c["t_paint_ms"].as_f64()).collect();
        let distinct = paints.windows(2).filter(|w| w[1] > w[0]).count() + 1;
        let diagnosis = &record["diagnosis"];
        eprintln!("read {read}: {} painted chunks in {distinct} paints, verdict {}", paints.len(), diagnosis["kind"]);
        if read == "text" {
            assert_eq!(distinct, 1, "text() shows the answer once: {browser:#}");
            assert_eq!(diagnosis["kind"], "browser_paint", "{diagnosis:#}");
        } else {
            assert!(distinct > 1, "{read}: the text was painted as it came: {browser:#}");
            assert_eq!(diagnosis["kind"], "no_rebuffering", "{read}: {diagnosis:#}");
        }
    }
}

#[test]
fn app_traceparent_is_kept_and_its_trace_reported() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let app_traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (_, report) =
        stream_page(&tokentap, &query(&[("x-mock-tokens", "5")], &format!("&traceparent={app_traceparent}")));
    assert_eq!(report["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(report["span_id"], "00f067aa0ba902b7");
    let (_, last) = mock.control("/_mock/last_request");
    let upstream = last["headers"].as_array().unwrap().iter().find(|h| h[0] == "traceparent").map(|h| h[1].clone());
    let upstream = upstream.unwrap_or_else(|| panic!("no traceparent upstream: {last}"));
    assert!(upstream.as_str().unwrap().contains("4bf92f3577b34da6a3ce929d0e0e4736"), "{upstream}");
}

#[test]
fn blocked_main_thread_shows_as_long_frame_and_paint_delay() {
    const BLOCK_MS: f64 = 300.0;
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    // Events 500 ms apart and a 300 ms block right after one arrives: no data arrives during the
    // block, so the block delays paints only, not arrivals.
    let mock_headers = [("x-mock-tokens", "6"), ("x-mock-itl-ms", "500"), ("x-mock-ttft-ms", "100")];
    let (out, report) =
        stream_page(&tokentap, &query(&mock_headers, &format!("&block_at_delta=2&block_ms={BLOCK_MS}")));
    check_stream_timeline(&out, &report);
    let block = &out["result"]["block"];
    let block_start = f64_at(&block["start_ms"], "block.start_ms");
    let block_end = f64_at(&block["end_ms"], "block.end_ms");
    let chars_before = block["chars_before"].as_u64().unwrap();

    // The long frame that contains the block.
    let frames = report["long_frames"].as_array().unwrap();
    assert!(
        frames.iter().any(|f| {
            let start = f64_at(&f["start_ms"], "start");
            start <= block_start + 1.0 && start + f64_at(&f["duration_ms"], "duration") >= block_end - 1.0
        }),
        "no long frame covers the {BLOCK_MS} ms block [{block_start}, {block_end}]: {frames:?}"
    );

    // The text that arrived just before the block is painted only after it: the arrival was
    // stamped when the chunk reached the page, the paint when the frame could finally run.
    let paints = report["paints"].as_array().unwrap();
    let delayed = paints.iter().find(|p| p["chars"].as_u64().unwrap() > chars_before).expect("a paint after the block");
    let delayed_paint = f64_at(&delayed["t_ms"], "paint");
    assert!(delayed_paint >= block_end, "painted during the block? {delayed} vs {block_end}");
    let arrival = report["fetch"]["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| f64_at(&c["t_ms"], "t"))
        .filter(|&t| t <= block_start)
        .reduce(f64::max)
        .expect("a chunk arrived before the block");
    assert!(
        delayed_paint - arrival >= BLOCK_MS - 5.0,
        "render delay {} ms, the block was {BLOCK_MS} ms",
        delayed_paint - arrival
    );

    // In the joined record the block is render delay (paint − arrival), not delivery delay.
    let record = joined_record(&mut feed, &out);
    check_joined_record(&record);
    let render_max = f64_at(&record["browser"]["render_delay_ms"]["max"], "render_delay max");
    assert!(render_max >= BLOCK_MS - 5.0, "render_delay max {render_max} ms hides the {BLOCK_MS} ms block");
    let delivery_max = f64_at(&record["browser"]["delivery_delay_ms"]["max"], "delivery_delay max");
    assert!(delivery_max < render_max, "delivery max {delivery_max} ms vs render max {render_max} ms");
}
