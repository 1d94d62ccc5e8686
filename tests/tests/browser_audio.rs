//! The probe's audio starts in headless Chromium, against the real tokentap and tokentap-mock.
//!
//! tests/browser/pages/audio.html streams speech from /v1/audio/speech through tokentap (the
//! mock's streamed WAV speech) and, when the first bytes arrive, starts a tone: in an AudioContext
//! tracked with `trackAudio(ctx, start)`, or in an `<audio>` element watched with
//! `observeMedia`. Chromium's headless audio output is a fake device whose output clock runs, so
//! `getOutputTimestamp()` moves and `playing` fires (the driver launches Chromium with
//! `--autoplay-policy=no-user-gesture-required`). The page holds the rest of the stream until it
//! has seen the sound start itself, so the start belongs to this turn without any timing luck.
//! The checks are orderings within one run and agreement between two readings of the same clock,
//! never how fast anything was.

use serde_json::Value;
use tokentap_e2e::browser::{page_query, run_page, PageRun};
use tokentap_e2e::{Mock, RecordFeed, Tokentap};

fn f64_at(v: &Value, what: &str) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

/// Runs the audio page once with `output` ("context" or "media") and returns (driver output, the
/// one report), after the checks every run must pass.
fn audio_page(tokentap: &Tokentap, output: &str) -> (Value, Value) {
    let origin = format!("http://{}", tokentap.addr);
    // Speech in 100 ms chunks, the first after 50 ms, then one every 20 ms.
    let mock = [("x-mock-tts-first-ms", "50"), ("x-mock-tts-chunk-ms", "100"), ("x-mock-tts-rtf", "0.2")];
    let out = run_page(&PageRun::test_page(&origin, "audio.html", &page_query(&mock, &format!("&output={output}"))));
    assert!(out["error"].is_null(), "browser run failed: {out:#}");
    assert_eq!(out["page_errors"], serde_json::json!([]), "{out:#}");
    assert_eq!(out["probe_source"], "tokentap", "{out:#}");
    let result = &out["result"];
    assert_eq!(result["status"], 200, "{out:#}");
    assert_eq!(result["content_type"], "audio/wav", "{out:#}");
    let reports = out["reports"].as_array().expect("reports");
    assert_eq!(reports.len(), 1, "one turn, one report: {out:#}");
    let report = reports[0].clone();
    assert_eq!(out["report_answers"][0]["status"], 202, "tokentap refused the report: {out:#}");
    assert_eq!(report["schema"], "tokentap.probe/1");
    assert_eq!(report["request"], serde_json::json!({"method": "POST", "path": "/v1/audio/speech", "status": 200}));
    assert_eq!(report["fetch"]["chunks"].as_array().unwrap().last().unwrap()["bytes"], result["bytes"], "{report:#}");
    (out, report)
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

/// The joined record is an audio stream, and its one audio start of `kind` comes after the first
/// chunk reached the page (on tokentap's timeline, within the clock's uncertainty). Returns the
/// joined audio start.
fn check_joined_audio(record: &Value, kind: &str) -> Value {
    assert_eq!(record["analysis"]["format"], "audio", "{:#}", record["analysis"]);
    let browser = &record["browser"];
    assert_eq!(browser["bytes_match"], true, "{browser:#}");
    let audio = browser["audio"].as_array().expect("browser.audio");
    assert_eq!(audio.len(), 1, "one sound, one audio start: {browser:#}");
    assert_eq!(audio[0]["kind"], kind, "{browser:#}");
    let slack = f64_at(&browser["clock"]["uncertainty_ms"], "clock uncertainty") + 1.0;
    let first_arrival = f64_at(&browser["chunks"][0]["t_browser_ms"], "browser.chunks[0].t_browser_ms");
    let handoff = f64_at(&record["timeline"]["chunks"][0]["t_handoff_ns"], "t_handoff_ns") / 1e6;
    let audible = f64_at(&audio[0]["audible_ms"], "audible_ms");
    assert!(
        handoff <= first_arrival + slack,
        "first chunk in the page {first_arrival} before its handoff {handoff} (± {slack})"
    );
    assert!(
        audible >= first_arrival - slack,
        "audible at {audible} ms, before the first chunk reached the page at {first_arrival} ms (± {slack}): {browser:#}"
    );
    audio[0].clone()
}

/// The report writes times with 3 decimals: when the probe and the page read the same (coarse)
/// `performance.now()` tick, the reported time and the page's differ by that rounding.
const REPORT_ROUNDING_MS: f64 = 0.0005;

#[test]
fn audio_context_start_is_measured_and_joined() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let (out, report) = audio_page(&tokentap, "context");
    let page = &out["result"]["audio"];

    // In the page's report: one AudioContext start, after the first chunk the page read (the page
    // only scheduled the tone then) and no later than the page's own mapping of that start onto the
    // output clock, read a frame or more after the probe's.
    let audio = report["audio"].as_array().expect("report.audio");
    assert_eq!(audio.len(), 1, "{report:#}");
    assert_eq!(audio[0]["kind"], "audio_context");
    let audible = f64_at(&audio[0]["audible_ms"], "audible_ms");
    let latency = f64_at(&audio[0]["output_latency_ms"], "output_latency_ms");
    assert!(latency >= 0.0, "{report:#}");
    let first_chunk = f64_at(&out["result"]["first_chunk_ms"], "first_chunk_ms");
    let probe_first_chunk = f64_at(&report["fetch"]["chunks"][0]["t_ms"], "fetch.chunks[0].t_ms");
    assert!(
        probe_first_chunk <= first_chunk + REPORT_ROUNDING_MS,
        "the probe stamps a chunk before handing it on: {report:#}"
    );
    assert!(
        audible + REPORT_ROUNDING_MS >= first_chunk,
        "audible at {audible}, before the tone was scheduled at {first_chunk}: {out:#}"
    );
    assert!(
        audible <= f64_at(&page["seen_ms"], "seen_ms") + REPORT_ROUNDING_MS,
        "audible after the page saw the clock pass the start: {out:#}"
    );
    // getOutputTimestamp() pairs the context time leaving the output device with the moment it
    // does, so the start's audible time is that mapping — the output latency is already in it.
    // Two readings of the same clock agree to well within that latency; a probe that adds the
    // latency on top is late by all of it.
    let page_audible = f64_at(&page["start_on_output_clock_ms"], "start_on_output_clock_ms");
    let tolerance = (latency / 2.0).max(2.0);
    assert!(
        (audible - page_audible).abs() <= tolerance,
        "probe says audible at {audible}, the output clock says {page_audible} (output latency {latency} ms): {out:#}"
    );

    let record = joined_record(&mut feed, &out);
    let joined = check_joined_audio(&record, "audio_context");
    assert_eq!(joined["output_latency_ms"].as_f64(), Some(latency), "{joined}");
    assert_eq!(record["browser"]["probe_span_id"], report["span_id"]);
}

#[test]
fn media_element_start_is_measured_and_joined() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let (out, report) = audio_page(&tokentap, "media");
    let page = &out["result"]["audio"];

    // The probe stamps `playing` in its own listener, which runs before the page's; no AudioContext
    // was tracked, so the output latency is unknown and nothing is added.
    let audio = report["audio"].as_array().expect("report.audio");
    assert_eq!(audio.len(), 1, "{report:#}");
    assert_eq!(audio[0]["kind"], "media_element");
    assert!(audio[0]["output_latency_ms"].is_null(), "{report:#}");
    let audible = f64_at(&audio[0]["audible_ms"], "audible_ms");
    let play = f64_at(&page["play_ms"], "play_ms");
    let playing = f64_at(&page["playing_ms"], "playing_ms");
    assert!(f64_at(&out["result"]["first_chunk_ms"], "first_chunk_ms") <= play, "{out:#}");
    assert!(
        play <= audible + REPORT_ROUNDING_MS && audible <= playing + REPORT_ROUNDING_MS,
        "play() {play} ≤ probe's playing {audible} ≤ page's playing {playing}: {out:#}"
    );

    let record = joined_record(&mut feed, &out);
    let joined = check_joined_audio(&record, "media_element");
    assert!(joined.get("output_latency_ms").is_none(), "{joined}");
}

#[test]
fn a_playback_stopped_and_reported_before_any_frame_ran_keeps_its_first_sound() {
    // The page schedules a buffer, waits in the same task until the output clock is 100 ms past
    // its start, then stops it and flushes: the probe's once-a-frame watch never ran in between, so
    // only a read of the output clock at the stop (or the report) can know it was heard.
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let origin = format!("http://{}", tokentap.addr);
    let mock_headers = [("x-mock-tts-first-ms", "50"), ("x-mock-tts-chunk-ms", "100"), ("x-mock-tts-rtf", "0.2")];
    let out = run_page(&PageRun::test_page(&origin, "audio.html", &page_query(&mock_headers, "&output=barge_in")));
    assert!(out["error"].is_null(), "browser run failed: {out:#}");
    assert_eq!(out["page_errors"], serde_json::json!([]), "{out:#}");
    let page = &out["result"]["audio"];
    let start = f64_at(&page["start_context_time"], "start_context_time");
    assert!(
        f64_at(&page["seen_context_time"], "seen_context_time") > start + 0.1,
        "the output clock never passed the start, so the page stopped nothing it had heard: {out:#}"
    );
    let reports = out["reports"].as_array().expect("reports");
    assert_eq!(reports.len(), 1, "the flush sent the turn's report: {out:#}");
    assert_eq!(out["report_answers"][0]["status"], 202, "tokentap refused the report: {out:#}");
    let audio = reports[0]["audio"].as_array().expect("report.audio");
    assert_eq!(audio.len(), 1, "the stopped playback was heard and is reported: {:#}", reports[0]);
    assert_eq!(audio[0]["kind"], "audio_context");
    assert_eq!(audio[0]["interrupted"], true, "{:#}", audio[0]);
    let (audible, end) = (f64_at(&audio[0]["audible_ms"], "audible_ms"), f64_at(&audio[0]["end_ms"], "end_ms"));
    let stopped = f64_at(&page["stopped_ms"], "stopped_ms");
    assert!(
        audible < end && end <= stopped + REPORT_ROUNDING_MS,
        "heard {audible}, stopped {end} (page: {stopped}): {out:#}"
    );
}
