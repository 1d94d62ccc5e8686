//! The voice demo page in headless Chromium, with a WAV file of real speech (made by espeak-ng) as
//! the microphone: the page detects the end of speech itself, sends the recording to speech to
//! text, the transcript to the model and each sentence of the answer to text to speech, all
//! through tokentap to the mock, and plays the answer through an AudioContext with the probe
//! watching. tokentap joins the three kinds of request and the probe's reports into one voice
//! turn, from the end of speech to the answer heard.
//!
//! The checks are orderings, the mock's configured leading silence (a property of the audio, not
//! of the machine's speed), and counts; never how fast anything was.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tokentap_e2e::browser::{run_dashboard, run_page, PageRun, Reports};
use tokentap_e2e::otlp_receiver::{attr_f64, attr_str, hex};
use tokentap_e2e::{Mock, OtlpReceiver, RecordFeed, Tokentap};

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The voice demo page with `query`, `wav` as the microphone, waiting for `reports` probe reports.
/// The page as a person reads it at Chromium's default 1,280 px: no `null`, `undefined` or `NaN`,
/// no horizontal scrolling.
/// espeak-ng's speech with 300 ms of silence before it and 2 s after it (Chromium loops the file:
/// the trailing silence lets the page's end-of-speech detection fire before the speech repeats).
fn speech_wav(dir: &Path) -> PathBuf {
    tokentap_e2e::speech::espeak_wav(dir, "What is the weather in Paris today?", 300, 2_000)
}

fn assert_reads_cleanly(result: &Value) {
    let text = result["page_text"].as_str().unwrap_or_else(|| panic!("no page text: {result}"));
    for word in ["null", "undefined", "NaN"] {
        assert!(!text.contains(word), "the voice page shows {word:?}:\n{text}");
    }
    assert_eq!(result["page_width"], 1280);
    assert!(result["page_overflow"].as_f64().unwrap() <= 0.0, "the voice page scrolls sideways: {result}");
}

fn voice_page(tokentap: &Tokentap, query: &str, reports: usize, wav: &Path) -> PageRun {
    PageRun {
        origin: format!("http://{}", tokentap.addr),
        path: format!("/_tokentap/demo/voice/?{query}"),
        page_file: None,
        probe_fallback: false,
        reports,
        report_mode: Reports::Observe,
        timeout_ms: 60_000,
        // What the page resolves with, and what a person reads on it once done.
        result_expr: Some(
            "window.__done.then((r) => Object.assign({}, r, { page_text: document.body.innerText, page_width: window.innerWidth, page_overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth }))"
                .into(),
        ),
        chromium_args: vec![
            "--use-fake-ui-for-media-stream".into(),
            "--use-fake-device-for-media-stream".into(),
            format!("--use-file-for-fake-audio-capture={}", wav.display()),
        ],
    }
}

/// Runs one voice turn on the page and returns what the page resolved with (the turn as the admin
/// API served it, once the browser's playback had joined it).
fn voice_turn(mock_headers: &[(&str, &str)], extra_query: &str) -> (Value, Tokentap, Mock, RecordFeed) {
    let mock = Mock::start(&["--ttft-ms", "40", "--itl-ms", "5", "--tokens", "24"]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokentap.toml");
    std::fs::write(&config, "demo_page = true\n").unwrap();
    let tokentap = Tokentap::start(&mock.url, &["--config", config.to_str().unwrap()]);
    let feed = tokentap.feed();
    let wav = speech_wav(dir.path());
    let headers: serde_json::Map<String, Value> =
        mock_headers.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect();
    let query: String = url_encode(&Value::Object(headers).to_string());
    // The transcription, the model call and at least one speech request report.
    let out = run_page(&voice_page(&tokentap, &format!("auto=1&talk_ms=6000&mock={query}{extra_query}"), 3, &wav));
    assert!(out["error"].is_null(), "browser run failed: {out:#}");
    assert_eq!(out["page_errors"], serde_json::json!([]), "{out:#}");
    let result = out["result"].clone();
    assert!(result["error"].is_null(), "the page failed: {out:#}");
    assert!(!result["turn"].is_null(), "the page never got its turn: {out:#}");
    assert_reads_cleanly(&result);
    assert!(out["report_answers"].as_array().unwrap().iter().all(|a| a["status"] == 202), "{out:#}");
    (result, tokentap, mock, feed)
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[test]
fn a_spoken_question_is_one_voice_turn_from_the_end_of_speech_to_the_answer_heard() {
    // Each answer opens with 300 ms of silence and arrives five times faster than it plays.
    let (result, tokentap, _mock, mut feed) =
        voice_turn(&[("x-mock-tts-silence-ms", "300"), ("x-mock-tts-audio-ms", "700"), ("x-mock-tts-rtf", "0.2")], "");
    let turn = &result["turn"];
    let voice = &turn["voice"];
    // Shown with --no-capture: the breakdown this run measured.
    eprintln!("voice turn segments: {}", voice["segments"]);
    eprintln!("voice to voice: {} ms; first speech: {}", voice["voice_to_voice_ms"], voice["speech"][0]);
    assert!(!result["transcript"].as_str().unwrap().is_empty(), "{result}");
    // One trace for the whole turn: every voice request joined by it.
    assert_eq!(voice["transcription"]["link"], "trace_id", "{voice:#}");
    let speech = voice["speech"].as_array().unwrap();
    assert!(!speech.is_empty(), "{voice:#}");
    assert!(speech.iter().all(|s| s["link"] == "trace_id"), "{voice:#}");

    // Every stage is present, in order, contiguous, from the end of speech to the answer heard.
    let kinds: Vec<&str> = voice["segments"].as_array().unwrap().iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "after_speech",
            "upload",
            "transcription",
            "to_model",
            "first_token",
            "to_speech",
            "speech_first_byte",
            "leading_silence",
            "playout"
        ],
        "{voice:#}"
    );
    let segments = voice["segments"].as_array().unwrap();
    for pair in segments.windows(2) {
        assert_eq!(pair[0]["end_ms"], pair[1]["start_ms"], "{voice:#}");
    }
    let speech_end = f(&voice["user_speech_end_ms"]);
    assert!(speech_end <= 0.0, "the end of speech comes before the upload starts: {voice:#}");
    assert_eq!(f(&segments[0]["start_ms"]), speech_end);
    let heard = f(&voice["heard_ms"]);
    assert_eq!(f(&segments.last().unwrap()["end_ms"]), heard.max(f(&segments[7]["end_ms"])));
    assert!((f(&voice["voice_to_voice_ms"]) - (heard - speech_end)).abs() < 1e-6, "{voice:#}");
    assert!(heard > f(&voice["first_answer_token_ms"]), "{voice:#}");

    // The mock's 300 ms of leading silence: first audible − first byte on the wire (the onset rule
    // resolves 10 ms windows), and the same silence between playback start and heard in the page.
    let first = &speech[0];
    let silence = f(&first["leading_silence_ms"]);
    assert!((290.0..=310.0).contains(&silence), "leading silence {silence}: {first:#}");
    let wire_gap = f(&first["first_audible_ms"]) - f(&first["first_audio_ms"]);
    assert!((silence - 1.0..=silence + 15.0).contains(&wire_gap), "first audible − first byte {wire_gap}: {first:#}");
    let playout = &first["playout"];
    assert!((f(&playout["heard_ms"]) - f(&playout["started_ms"]) - silence).abs() < 1e-6, "{playout:#}");
    assert!(f(&playout["started_ms"]) > f(&first["first_audio_ms"]), "played after it arrived: {first:#}");
    assert_eq!(playout["interrupted"], false, "{playout:#}");
    assert_eq!(first["predicted_underruns"], 0, "{first:#}");
    // The wire predicts no underrun. The page can still run dry for a few milliseconds when the
    // machine is so loaded that a chunk reaches it late (seen: 12 ms under a load average of 17):
    // that is a real underrun, not a fault of the measurement, so only a long one fails here.
    assert!(f(&playout["starved_ms"]) < 100.0, "{playout:#}");
    assert_eq!(result["interrupted"], false);

    // The answer's paints belong to the model call, not to the speech requests opened while it
    // still streamed: its joined record has every answer character painted.
    let chat = loop {
        let r = feed.next_record();
        if r["request_id"] == result["chat_request_id"] && !r["browser"].is_null() {
            break r;
        }
    };
    assert_eq!(chat["browser"]["painted_chars"], chat["browser"]["answer_chars"], "{:#}", chat["browser"]);
    assert!(chat["browser"]["answer_chars"].as_u64().unwrap() > 0);

    // The dashboard's turn page draws the voice lanes.
    let turn_id = turn["turn_id"].as_str().unwrap();
    let out =
        run_dashboard(&serde_json::json!({ "admin": format!("http://{}", tokentap.admin), "turn_ids": [turn_id] }));
    assert!(out["error"].is_null(), "dashboard run failed: {out:#}");
    assert_eq!(out["page_errors"], serde_json::json!([]), "{out:#}");
    let page = &out["turn_pages"][turn_id];
    let lanes: Vec<&str> = page["voice_lanes"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    for lane in ["after_speech", "playout", "speech_end", "transcription", "model", "speech", "played"] {
        assert!(lanes.contains(&lane), "no {lane} lane: {page:#}");
    }
    assert!(page["voice_cards"][0].as_str().unwrap().contains(" ms"), "voice to voice shown: {page:#}");
}

#[test]
fn speech_slower_than_real_time_runs_dry_as_predicted_and_as_heard() {
    // 1.5 s of audio delivered at half real-time speed, in 100 ms chunks.
    let (result, _tokentap, _mock, _feed) = voice_turn(
        &[
            ("x-mock-tts-silence-ms", "100"),
            ("x-mock-tts-audio-ms", "1500"),
            ("x-mock-tts-rtf", "2"),
            ("x-mock-tts-chunk-ms", "100"),
        ],
        "",
    );
    let speech = result["turn"]["voice"]["speech"].as_array().unwrap().clone();
    let first = &speech[0];
    assert!(f(&first["real_time_factor"]) > 1.5, "{first:#}");
    assert!(first["predicted_underruns"].as_u64().unwrap() > 0, "tokentap predicts underruns: {first:#}");
    assert!(f(&first["predicted_starved_ms"]) > 0.0, "{first:#}");
    let playout = &first["playout"];
    assert!(playout["underruns"].as_u64().unwrap() > 0, "the page heard it run dry: {first:#}");
    assert!(f(&playout["starved_ms"]) > 0.0, "{playout:#}");
}

#[test]
fn barge_in_is_recorded_as_an_interrupted_playback() {
    // The user interrupts 150 ms into the first answer's 2 s of audio (which arrived long before).
    let (result, _tokentap, _mock, _feed) = voice_turn(
        &[("x-mock-tts-silence-ms", "50"), ("x-mock-tts-audio-ms", "2000"), ("x-mock-tts-rtf", "0.1")],
        "&interrupt_ms=150",
    );
    assert_eq!(result["interrupted"], true, "{result}");
    let first = &result["turn"]["voice"]["speech"][0];
    let playout = &first["playout"];
    assert_eq!(playout["interrupted"], true, "{first:#}");
    let (started, end) = (f(&playout["started_ms"]), f(&playout["end_ms"]));
    assert!(end > started, "{playout:#}");
    assert!(end - started < f(&first["audio_ms"]), "stopped before its end: {first:#}");
}

#[test]
fn a_realtime_session_on_the_voice_page_is_heard_after_its_first_audio_arrived() {
    // The page streams the microphone over one WebSocket to /v1/realtime; the mock's server VAD
    // ends the turn and answers on its schedule (first audio 300 ms after the trigger).
    let mock = Mock::start(&[]);
    let receiver = OtlpReceiver::start();
    let endpoint = receiver.grpc_endpoint();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("OTEL_METRICS_EXPORTER", "none"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokentap.toml");
    std::fs::write(&config, "demo_page = true\n").unwrap();
    let tokentap = Tokentap::start_with_env(&["--upstream", &mock.url, "--config", config.to_str().unwrap()], &env);
    let wav = speech_wav(dir.path());
    // The session's report, once the socket closed and its playback ended.
    let query = "auto=1&talk_ms=6000&mode=realtime&mock_first_audio_ms=300&mock_delta_ms=50&mock_audio_ms=800";
    let out = run_page(&voice_page(&tokentap, query, 1, &wav));
    assert!(out["error"].is_null(), "browser run failed: {out:#}");
    assert_eq!(out["page_errors"], serde_json::json!([]), "{out:#}");
    assert!(out["report_answers"].as_array().unwrap().iter().all(|a| a["status"] == 202), "{out:#}");
    let result = &out["result"];
    assert_eq!(result["mode"], "realtime", "{out:#}");
    assert_reads_cleanly(result);
    // "You said" shows the session's input transcription; the status followed the answer.
    // (the mock's fixed input transcript, `INPUT_TRANSCRIPT` in its realtime module)
    assert_eq!(result["transcript"], "What is the weather in Paris today?", "{result:#}");
    assert!(!result["status"].as_str().unwrap_or_default().contains("the server decides"), "{result:#}");
    let record = &result["record"];
    assert!(!record.is_null(), "the page never got the session's record: {out:#}");
    // The page named the trace; tokentap continued it from the socket's URL.
    assert_eq!(record["trace_id"], result["trace_id"], "{record:#}");
    assert!(!record["path"].as_str().unwrap().contains("tokentap_traceparent"), "{}", record["path"]);

    let responses = record["realtime"]["responses"].as_array().unwrap();
    assert!(!responses.is_empty(), "{:#}", record["realtime"]);
    let wire = &responses[0];
    assert_eq!(wire["trigger"], "server_vad", "{wire:#}");
    // Orderings only (the schedule itself is checked against the SDK client in tests/realtime.rs;
    // here the mock's events pass a loaded browser and can be delayed unevenly).
    let from_stopped = f(&wire["time_to_first_audio_from_speech_stopped_ms"]);
    assert!(from_stopped > 0.0, "{wire:#}");
    let from_end = f(&wire["time_to_first_audio_from_speech_end_ms"]);
    assert!(from_end >= from_stopped, "{wire:#}");

    // What the page saw and heard of it, on tokentap's timeline.
    let browser = &record["browser"];
    let uncertainty = f(&browser["clock"]["uncertainty_ms"]);
    let seen = browser["realtime"].as_array().unwrap();
    let page = seen.iter().find(|r| r["index"] == 0).unwrap_or_else(|| panic!("response 0 not in {browser:#}"));
    eprintln!("realtime response as heard: {page}");
    assert_eq!(page["response_id"], wire["response_id"]);
    let page_first_audio = f(&page["first_audio_ms"]);
    assert!(page_first_audio >= f(&wire["first_audio_ms"]) - uncertainty, "in the page after tokentap: {page:#}");
    let heard = f(&page["heard_ms"]);
    assert!(heard > page_first_audio, "heard after its first audio delta reached the page: {page:#}");
    assert!((f(&page["heard_after_first_audio_ms"]) - (heard - f(&wire["first_audio_ms"]))).abs() < 1e-6);
    let v2v = f(&page["voice_to_voice_ms"]);
    assert!(v2v > from_end, "voice to voice includes getting the audio to the ear: {page:#}");
    let playout = &page["playout"];
    assert_eq!(playout["kind"], "audio_context", "{playout:#}");
    assert_ne!(playout["interrupted"], true, "{playout:#}");
    assert!(f(&playout["scheduled_audio_ms"]) > 0.0, "{playout:#}");

    // OTLP (the official protobuf): the playback is a `playout` span under the response's
    // realtime_inference span, with the same voice to voice.
    let trace = record["trace_id"].as_str().unwrap().to_string();
    let ok = |r: &tokentap_e2e::otlp_receiver::Received| {
        r.spans().iter().any(|s| hex(&s.trace_id) == trace && s.name == "playout")
    };
    let received = receiver.wait_for(std::time::Duration::from_secs(60), "the playout span", ok);
    let spans: Vec<_> = received.spans().into_iter().filter(|s| hex(&s.trace_id) == trace).collect();
    let playout_span = spans.iter().find(|s| s.name == "playout").unwrap();
    let inference = spans
        .iter()
        .find(|s| s.span_id == playout_span.parent_span_id)
        .unwrap_or_else(|| panic!("the playout span's parent was not exported: {spans:#?}"));
    assert!(inference.name.starts_with("realtime_inference"), "{}", inference.name);
    // The same number, up to the last bit serde_json's float parsing may round differently.
    let span_v2v = attr_f64(&playout_span.attributes, "tokentap.voice.voice_to_voice_ms").expect("voice to voice");
    assert!((span_v2v - v2v).abs() < 1e-9, "span {span_v2v} ms, record {v2v} ms");
    assert_eq!(attr_str(&playout_span.attributes, "gen_ai.response.id"), wire["response_id"].as_str());

    // The dashboard's session page: the timeline's lanes and one row per response.
    let id = record["request_id"].as_str().unwrap();
    let out = run_dashboard(&serde_json::json!({ "admin": format!("http://{}", tokentap.admin), "request_ids": [id] }));
    assert!(out["error"].is_null(), "dashboard run failed: {out:#}");
    assert_eq!(out["page_errors"], serde_json::json!([]), "{out:#}");
    let session = &out["requests"][id];
    let lanes: Vec<&str> = session["session_lanes"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    for lane in ["speech", "model", "audio", "heard"] {
        assert!(lanes.contains(&lane), "no {lane} lane: {session:#}");
    }
    assert_eq!(session["session_rows"].as_u64(), Some(responses.len() as u64), "{session:#}");
}
