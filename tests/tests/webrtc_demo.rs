//! The demo's WebRTC voice session, run the way `scripts/demo.sh` runs it: the voice agent of
//! `examples/voice-webrtc/agent.py` (aiortc, the venv `scripts/setup.sh` makes) and
//! `tokentap demo --webrtc-peer URL` in front of the built-in mock, both on this host; headless
//! Chromium (espeak-ng's speech in a WAV file as its microphone) opens the demo's voice page in
//! WebRTC mode. The browser and the agent meet on the host's own non-loopback address (aiortc
//! gathers no loopback candidates, Chromium skips them), as on a user's machine.
//!
//! The checks: the page shows the answer's breakdown; tokentap joins the page's report to the
//! offer's record (one voice turn); the agent's speech-to-text, model and text-to-speech calls went
//! through tokentap in the offer's trace; and the exported trace holds the page's voice turn (with
//! its `webrtc response`, `jitter buffer` and `playout` parts) next to the server's spans of those
//! calls. The dashboard draws the session on the offer's page and on the agent's voice turn. And
//! the same with a real voice framework as the peer: a Pipecat bot (examples/voice-pipecat,
//! `.cache/venv-pipecat`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tokentap_e2e::browser::{repo_root, run_dashboard, run_page, PageRun, Reports};
use tokentap_e2e::otlp_receiver::{attr_str, hex};
use tokentap_e2e::process::{bin, Proc};
use tokentap_e2e::OtlpReceiver;

/// espeak-ng's speech (real speech: Pipecat's Silero VAD hears no tones) with 3 s of silence before
/// it (the connection comes up meanwhile) and 20 s after it: one end of speech.
fn speech_wav(dir: &Path) -> PathBuf {
    tokentap_e2e::speech::espeak_wav(dir, "What is the weather in Paris today?", 3_000, 20_000)
}

/// The address after `marker` in a banner line (`http://ADDR/...`).
fn url_in(line: &str, marker: &str) -> String {
    let rest = line.split(marker).nth(1).unwrap_or_else(|| panic!("no {marker:?} in {line:?}"));
    let addr = rest.trim_start().trim_start_matches("http://");
    addr.split(['/', ' ']).next().unwrap().to_string()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A demo session run the way `scripts/demo.sh` runs one, with Chromium on the voice page.
struct DemoSession {
    /// What the page run returned (its `result` is the voice page's, with its text).
    out: Value,
    admin: std::net::SocketAddr,
    receiver: OtlpReceiver,
    _agent: Proc,
    _demo: Proc,
    _data_dir: tempfile::TempDir,
}

impl DemoSession {
    fn admin_get(&self, path_and_query: &str) -> Value {
        let resp = tokentap_e2e::http1::get(self.admin, path_and_query, &[]);
        assert_eq!(resp.status, 200, "{path_and_query}: {}", String::from_utf8_lossy(&resp.body));
        serde_json::from_slice(&resp.body).unwrap()
    }
}

/// The WebRTC peer the demo routes the offer to.
struct Peer {
    python: PathBuf,
    script: &'static str,
    /// The voice page's query: the aiortc agent ends the answer with `response.done` on the data
    /// channel; a peer that sends no OpenAI Realtime events is given a fixed session length.
    query: &'static str,
    /// Answers the page counted (`response.done` events).
    answers_done: u64,
}

/// The demo's own agent (examples/voice-webrtc).
fn agent_peer() -> Peer {
    Peer {
        python: tokentap_e2e::speech::webrtc_python(),
        script: "examples/voice-webrtc/agent.py",
        query: "mode=webrtc&auto=1&answers=1&talk_ms=60000",
        answers_done: 1,
    }
}

fn demo_session() -> DemoSession {
    demo_session_with(agent_peer())
}

fn demo_session_with(peer: Peer) -> DemoSession {
    // The agent first (its offer endpoint's port goes to tokentap), told tokentap's address after.
    let mut cmd = Command::new(&peer.python);
    cmd.arg(repo_root().join(peer.script)).args(["--proxy", "-"]);
    let (mut agent, mut agent_stdin) = Proc::spawn_with_stdin(cmd);
    let line = agent.wait_line("{\"listening\"", Duration::from_secs(60));
    let port = serde_json::from_str::<Value>(&line).unwrap()["listening"].as_u64().unwrap();

    let receiver = OtlpReceiver::start();
    let data_dir = tempfile::tempdir().unwrap();
    let mut demo = Command::new(bin("tokentap"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("OTEL_") {
            demo.env_remove(key);
        }
    }
    demo.env("TOKENTAP_WORKER_PRIORITY", "normal")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.grpc_endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .env("OTEL_METRICS_EXPORTER", "none")
        .args(["demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir.path())
        .args(["--webrtc-peer", &format!("http://127.0.0.1:{port}")]);
    let mut demo = Proc::spawn(demo);
    let proxy = url_in(&demo.wait_line("  chat page ", Duration::from_secs(30)), "chat page");
    let webrtc_line = demo.wait_line("  webrtc voice ", Duration::from_secs(30));
    assert!(webrtc_line.contains("mode=webrtc"), "{webrtc_line}");
    let admin = url_in(&demo.wait_line("  admin API ", Duration::from_secs(30)), "admin API");
    writeln!(agent_stdin, "http://{proxy}").unwrap();
    agent_stdin.flush().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let wav = speech_wav(dir.path());
    let run = PageRun {
        origin: format!("http://{proxy}"),
        path: format!("/_tokentap/demo/voice/?{}", peer.query),
        page_file: None,
        probe_fallback: false,
        reports: 1,
        report_mode: Reports::Observe,
        timeout_ms: 90_000,
        result_expr: Some(
            "window.__done.then((r) => Object.assign({}, r, { page_text: document.body.innerText }))".into(),
        ),
        // As a user's Chromium: the page has the microphone, so its host candidates are addresses.
        chromium_args: vec![
            "--use-fake-ui-for-media-stream".into(),
            "--use-fake-device-for-media-stream".into(),
            format!("--use-file-for-fake-audio-capture={}%noloop", wav.display()),
        ],
    };
    let out = run_page(&run);
    assert!(out["error"].is_null(), "browser run failed: {out:#}\nagent: {}", agent.stderr());
    assert_eq!(out["page_errors"], serde_json::json!([]), "{out:#}");
    let result = &out["result"];
    assert!(result["error"].is_null(), "{out:#}\nagent: {}", agent.stderr());
    assert_eq!(result["mode"], "webrtc", "{result:#}");
    assert_eq!(result["answers_done"], peer.answers_done, "{result:#}\nagent: {}", agent.stderr());
    DemoSession { out, admin: admin.parse().unwrap(), receiver, _agent: agent, _demo: demo, _data_dir: data_dir }
}

/// The peer's speech-to-text, chat and text-to-speech calls went through tokentap in the offer's
/// trace (each answered 200), and the exported trace holds the page's voice turn and the server's
/// spans of those calls. The trace id, and what the receiver holds then.
fn voice_turn_with_its_calls(
    session: &DemoSession,
    offer: &Value,
    whose: &str,
) -> (String, tokentap_e2e::otlp_receiver::Received) {
    let trace = offer["trace_id"].as_str().unwrap().to_string();
    let list = session.admin_get(&format!("/_tokentap/api/requests?limit=20&trace_id={trace}"));
    let records = list["records"].as_array().unwrap_or_else(|| panic!("{list:#}"));
    let mut ids = Vec::new();
    for path in ["/v1/audio/transcriptions", "/v1/chat/completions", "/v1/audio/speech"] {
        let call = records
            .iter()
            .find(|r| r["path"] == path)
            .unwrap_or_else(|| panic!("no {path} record in the offer's trace: {list:#}"));
        assert_eq!(call["status"], 200, "{call:#}");
        ids.push(call["request_id"].as_str().unwrap().to_string());
    }
    let has_all = |r: &tokentap_e2e::otlp_receiver::Received| {
        let spans: Vec<_> = r.spans().into_iter().filter(|s| hex(&s.trace_id) == trace).collect();
        spans.iter().any(|s| s.name == "voice turn")
            && ids.iter().all(|id| spans.iter().any(|s| attr_str(&s.attributes, "tokentap.request_id") == Some(id)))
    };
    let what = format!("the voice turn and {whose} calls");
    let received = session.receiver.wait_for(Duration::from_secs(60), &what, has_all);
    (trace, received)
}

#[test]
fn the_demo_answers_a_webrtc_voice_turn_in_one_trace_with_the_agents_calls() {
    let session = demo_session();
    let result = &session.out["result"];

    // The page: the answer's row, every figure shown, the agent's words.
    let text = result["page_text"].as_str().unwrap();
    assert!(text.contains("voice to ear") && text.contains("#1") && text.contains("1 answers"), "{text}");
    for word in ["null", "undefined", "NaN"] {
        assert!(!text.contains(word), "the voice page shows {word:?}:\n{text}");
    }

    // The offer's record, joined: one voice turn from the end of speech to heard.
    let record = &result["record"];
    assert_eq!(record["status"], 201, "{record:#}");
    assert_eq!(record["route"], "webrtc-peer", "{record:#}");
    let turns = record["browser"]["webrtc"]["turns"].as_array().unwrap_or_else(|| panic!("{record:#}"));
    assert_eq!(turns.len(), 1, "{record:#}");
    let turn = &turns[0];
    let names: Vec<&str> = turn["events"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    for event in ["input_audio_buffer.speech_stopped", "response.created", "output_audio_buffer.started"] {
        assert!(names.contains(&event), "no {event}: {turn:#}");
    }
    let (end, packet, heard) = (f(&turn["speech_end_ms"]), f(&turn["first_packet_ms"]), f(&turn["heard_ms"]));
    assert!(end < packet && packet <= heard, "{turn:#}");
    assert!(f(&turn["jitter_buffer_ms"]) > 0.0, "{turn:#}");
    eprintln!(
        "voice to ear {:.0} ms (end of speech → first packet {:.0} ms, jitter buffer {:.0} ms, playout {:.0} ms)",
        f(&turn["voice_to_ear_ms"]),
        packet - end,
        f(&turn["jitter_buffer_ms"]),
        f(&turn["playout_delay_ms"]),
    );

    let (trace, received) = voice_turn_with_its_calls(&session, record, "the agent's");
    let spans: Vec<_> = received.spans().into_iter().filter(|s| hex(&s.trace_id) == trace).collect();
    let voice_turn = spans.iter().find(|s| s.name == "voice turn").unwrap();
    let parts: Vec<&str> =
        spans.iter().filter(|s| s.parent_span_id == voice_turn.span_id).map(|s| s.name.as_str()).collect();
    for part in ["webrtc response", "jitter buffer", "playout"] {
        assert!(parts.contains(&part), "no {part} span: {parts:?}");
    }
    drop(session);
}

/// The dashboard draws the session: the offer's page shows each answer's bar (end of speech →
/// first packet with the data channel's events, jitter buffer, playout), its row and the
/// choppy-audio verdict; the agent's voice turn (same trace) shows how its answer was heard.
#[test]
fn the_dashboard_draws_the_webrtc_session_and_the_voice_turn_it_heard() {
    let session = demo_session();
    let record = &session.out["result"]["record"];
    let offer_id = record["request_id"].as_str().unwrap().to_string();
    let trace = record["trace_id"].as_str().unwrap().to_string();
    let stored = session.admin_get(&format!("/_tokentap/api/requests/{offer_id}"));
    assert!(stored["browser"]["webrtc"].is_object(), "the stored offer has no WebRTC part: {stored:#}");
    // The agent's voice turn: its three calls linked by the offer's trace.
    let turns = session.admin_get("/_tokentap/api/turns?limit=50");
    let turn = turns["turns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["trace_id"] == trace.as_str() && !t["voice"].is_null())
        .unwrap_or_else(|| panic!("no voice turn in the offer's trace: {turns:#}"));
    let turn_id = turn["turn_id"].as_str().unwrap().to_string();

    let out = run_dashboard(&serde_json::json!({
        "admin": format!("http://{}", session.admin),
        "request_ids": [offer_id],
        "turn_ids": [turn_id],
        "viewport_width": 1280,
        "summary_hash": "#/summary?window=all&include_warmup=true",
        "artifacts": repo_root().join("tests/artifacts/dashboard-webrtc").display().to_string(),
    }));
    assert!(out["error"].is_null(), "dashboard run failed: {out:#}");
    assert_eq!(out["page_errors"], serde_json::json!([]), "{out:#}");
    for (view, text) in out["texts"].as_object().unwrap() {
        for word in ["null", "undefined", "NaN"] {
            assert!(!text.as_str().unwrap().contains(word), "the {view} view shows {word:?}:\n{text}");
        }
    }
    for (view, px) in out["overflow"].as_object().unwrap() {
        assert!(px.as_f64().unwrap() <= 0.0, "the {view} view is {px} px wider than 1,280 px");
    }

    let page = &out["requests"][&offer_id];
    let parts: Vec<&str> = page["webrtc_parts"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert_eq!(parts, ["response", "jitter_buffer", "playout"], "{page:#}");
    let events: Vec<&str> = page["webrtc_events"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    for event in ["input_audio_buffer.speech_stopped", "response.created", "output_audio_buffer.started"] {
        assert!(events.contains(&event), "no {event} tick: {page:#}");
    }
    let rows = page["webrtc_rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{page:#}");
    let row: Vec<&str> = rows[0].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    // #, end of speech, events, → first packet, jitter buffer, playout, voice to ear, audio.
    assert_eq!(row[0], "#1", "{row:?}");
    assert!(row[2].contains("response.created +"), "{row:?}");
    for figure in &row[3..7] {
        assert!(figure.parse::<f64>().is_ok() || figure.replace(',', "").parse::<f64>().is_ok(), "{row:?}");
    }
    // The verdict as the record has it (a busy machine can conceal a few late packets even here).
    let choppy = record["browser"]["webrtc"]["choppy"] == true;
    let turn_choppy = record["browser"]["webrtc"]["turns"][0]["choppy"] == true;
    assert!(row[7].starts_with(if turn_choppy { "choppy" } else { "clean" }), "{row:?}: {record:#}");
    let verdict = page["webrtc_verdict"].as_str().unwrap_or_else(|| panic!("no verdict: {page:#}"));
    let expected = if choppy || turn_choppy { "Choppy audio" } else { "Clean audio" };
    assert!(verdict.starts_with(expected), "{verdict}: {record:#}");
    let cards = page["webrtc_cards"].as_array().unwrap();
    assert!(cards.iter().any(|c| c.as_str().unwrap().starts_with("voice to ear (median)")), "{cards:?}");
    let text = out["texts"][format!("request:{offer_id}")].as_str().unwrap();
    assert!(text.contains("WebRTC session") && text.contains("voice to ear"), "{text}");

    // The Summary's WebRTC section: the session's answer in each row.
    let summary = &out["summary"]["webrtc"];
    assert_eq!(
        summary,
        &serde_json::json!([
            "voice_to_ear_ms",
            "speech_end_to_first_packet_ms",
            "jitter_buffer_ms",
            "playout_delay_ms"
        ]),
        "{:#}",
        out["summary"]
    );
    assert_eq!(
        out["summary"]["sections"],
        serde_json::json!(["chat", "speech", "transcription", "webrtc"]),
        "{:#}",
        out["summary"]
    );
    let text = out["texts"]["summary"].as_str().unwrap();
    assert!(text.contains("WebRTC sessions: 1, 1 answers") && !text.contains("Non-streaming"), "{text}");

    let turn_page = &out["turn_pages"][&turn_id];
    assert!(turn_page["webrtc_heading"].as_str().is_some(), "the voice turn shows no WebRTC part: {turn_page:#}");
    let parts: Vec<&str> = turn_page["webrtc_parts"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert_eq!(parts, ["response", "jitter_buffer", "playout"], "{turn_page:#}");
    let text = out["texts"][format!("turn:{turn_id}")].as_str().unwrap();
    assert!(text.contains("this turn is its answer 1 of 1"), "{text}");
    drop(session);
}

/// The Pipecat bot's Python: `TOKENTAP_PIPECAT_PYTHON`, else the virtualenv `scripts/setup.sh test` makes.
fn pipecat_python() -> PathBuf {
    let path = std::env::var_os("TOKENTAP_PIPECAT_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".cache/venv-pipecat/bin/python"));
    assert!(path.exists(), "{} is missing: run scripts/setup.sh test", path.display());
    path
}

/// A real voice framework as the peer: Pipecat's SmallWebRTC transport with Silero VAD and its
/// OpenAI speech-to-text, LLM and text-to-speech services pointed at tokentap (examples/voice-pipecat).
/// One voice turn in one trace: the page's WebRTC measurements and tokentap's spans of the bot's calls.
#[test]
fn a_pipecat_bot_answers_a_webrtc_voice_turn_in_one_trace() {
    let session = demo_session_with(Peer {
        python: pipecat_python(),
        script: "examples/voice-pipecat/bot.py",
        // Pipecat sends no OpenAI Realtime events: the page ends the session after 20 s.
        query: "mode=webrtc&auto=1&talk_ms=20000",
        answers_done: 0,
    });
    let record = &session.out["result"]["record"];
    assert_eq!(record["status"], 201, "{record:#}");
    let turns = record["browser"]["webrtc"]["turns"].as_array().unwrap_or_else(|| panic!("{record:#}"));
    let turn = turns.iter().find(|t| t["voice_to_ear_ms"].is_number()).unwrap_or_else(|| {
        panic!("no answer heard after an end of speech: {record:#}\nbot: {}", session._agent.stderr())
    });
    eprintln!(
        "pipecat: voice to ear {:.0} ms (jitter buffer {:.0} ms, playout {:.0} ms)",
        f(&turn["voice_to_ear_ms"]),
        f(&turn["jitter_buffer_ms"]),
        f(&turn["playout_delay_ms"])
    );
    voice_turn_with_its_calls(&session, record, "the bot's");
}
