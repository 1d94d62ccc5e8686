//! A voice session over WebRTC, with real peers: headless Chromium (a WAV file as its microphone,
//! the probe watching) offers a peer connection to aiortc (tests/webrtc/peer.py) by POSTing its SDP
//! offer to `/v1/realtime/calls` through tokentap, as OpenAI's Realtime API is called from a
//! browser. aiortc runs in a network namespace of its own joined to the test's by a veth pair (it
//! offers no loopback candidates); media and the data channel go peer to peer over that pair,
//! never through tokentap. aiortc answers each end of the caller's speech after a fixed delay with
//! a known leading silence, and logs when it sent the answer's first audible frame.
//!
//! The checks: the page's first audible sample of each answer matches aiortc's send time plus the
//! jitter buffer delay the page reported (within 40 ms), tokentap joins the page's report to the
//! offer's record (one voice turn per answer) and exports each turn's spans in the offer's trace;
//! with packets lost on the media path, concealment is reported and the audio called choppy; with
//! jitter the peer adds, the jitter buffer grows; the user talking over an answer is counted, with
//! the time until the answer's audio stopped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokentap_e2e::browser::{repo_root, run_page, PageRun};
use tokentap_e2e::netns::NetnsPair;
use tokentap_e2e::otlp_receiver::{attr_str, hex};
use tokentap_e2e::process::Proc;
use tokentap_e2e::{OtlpReceiver, RecordFeed, Tokentap};

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// How far the tap's end of speech may be from the file's (the measured spread, 9–30 ms early,
/// with room for a loaded machine).
const SPEECH_END_TOLERANCE_MS: f64 = 60.0;

/// The fake microphone's file: stretches of "speech" (two tones, −14 dBFS) at `speech` (start and
/// length, seconds from the file's start), silence around them, `total_s` long. The file starts
/// playing when the page opens the microphone, before the connection is up: the first stretch
/// starts after 2 s of silence. (Loss is therefore on the media alone: a handshake slowed by lost
/// packets could come up after the first stretch was spoken, and the peer never hear it.)
fn speech_wav(dir: &Path, speech: &[(f64, f64)], total_s: f64) -> PathBuf {
    const RATE: usize = 48_000;
    let at = |s: f64| (s * RATE as f64) as usize;
    let mut samples: Vec<i16> = vec![0; at(total_s)];
    for &(start, length) in speech {
        for (i, sample) in samples[at(start)..at(start + length)].iter_mut().enumerate() {
            let t = i as f64 / RATE as f64;
            *sample = (6000.0 * (2.0 * std::f64::consts::PI * 220.0 * t).sin()
                + 2000.0 * (2.0 * std::f64::consts::PI * 330.0 * t).sin()) as i16;
        }
    }
    let data: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
    let mut wav = Vec::new();
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&(RATE as u32).to_le_bytes());
    wav.extend_from_slice(&(RATE as u32 * 2).to_le_bytes());
    wav.extend_from_slice(&2u16.to_le_bytes());
    wav.extend_from_slice(&16u16.to_le_bytes());
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&(data.len() as u32).to_le_bytes());
    wav.extend_from_slice(&data);
    let path = dir.join("speech.wav");
    std::fs::write(&path, wav).unwrap();
    path
}

/// Two stretches of speech of 700 ms, each followed by 2.8 s of silence: the peer answers each
/// within the silence after it.
const TWO_QUESTIONS: Setup =
    Setup { media_loss: None, speech: &[(2.0, 0.7), (5.5, 0.7)], peer_args: &["--tone-ms", "800"] };

/// The peer's answer to the first question (300 + 200 ms after it detected its end, 700 ms after
/// the file's, for 3 s) is still playing when the second starts (2.5 s after the first ended):
/// the peer stops it.
const BARGE_IN: Setup =
    Setup { media_loss: None, speech: &[(2.0, 0.7), (4.5, 0.7)], peer_args: &["--tone-ms", "3000", "--barge-in"] };

/// What a session runs with: loss on the media path (`drop` of every `n` RTP packets the peer
/// sends), the microphone's speech, the peer's options.
#[derive(Clone, Copy)]
struct Setup {
    media_loss: Option<(u32, u32)>,
    speech: &'static [(f64, f64)],
    peer_args: &'static [&'static str],
}

/// The file's true ends of speech, seconds after the microphone opened.
fn speech_ends(setup: &Setup) -> Vec<f64> {
    setup.speech.iter().map(|(start, length)| start + length).collect()
}

/// One session: what the page and the peer saw, and tokentap with its feed and trace receiver.
struct Session {
    out: Value,
    /// The peer's log: one line per answer (`speech_end_detected_ms`, `first_audible_sent_ms`).
    answers: Vec<Value>,
    /// One line per answer the caller interrupted (`last_audible_sent_ms`).
    barge_ins: Vec<Value>,
    feed: RecordFeed,
    receiver: OtlpReceiver,
    _tokentap: Tokentap,
}

/// The test page (`tests/browser/pages/webrtc.html`), waiting for two answers.
fn test_page(tokentap: &Tokentap) -> PageRun {
    PageRun::test_page(&format!("http://{}", tokentap.addr), "webrtc.html", "?answers=2")
}

/// Runs a page (`page`) against aiortc in its own namespace, as `setup` says.
fn session(setup: Setup, page: fn(&Tokentap) -> PageRun) -> Session {
    // Declared first, dropped last: the peer ends before its namespace goes.
    let netns = NetnsPair::create();
    if let Some((drop, of_every)) = setup.media_loss {
        netns.drop_media_out(drop, of_every);
    }
    let mut cmd = netns.command(tokentap_e2e::speech::webrtc_python().to_str().unwrap());
    cmd.arg(repo_root().join("tests/webrtc/peer.py")).args([
        "--host",
        &netns.ns_ip,
        "--delay-ms",
        "300",
        "--silence-ms",
        "200",
    ]);
    cmd.args(setup.peer_args);
    let mut peer = Proc::spawn(cmd);
    let line = peer.wait_line("{\"listening\"", Duration::from_secs(60));
    let port = serde_json::from_str::<Value>(&line).unwrap()["listening"].as_u64().unwrap();

    let receiver = OtlpReceiver::start();
    let endpoint = receiver.grpc_endpoint();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("OTEL_METRICS_EXPORTER", "none"),
    ];
    // The peer is the only upstream: the SDP offer goes to it through tokentap.
    let upstream = format!("http://{}:{port}", netns.ns_ip);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tokentap.toml");
    std::fs::write(&config, "demo_page = true\n").unwrap();
    let tokentap = Tokentap::start_with_env(&["--upstream", &upstream, "--config", config.to_str().unwrap()], &env);
    let feed = tokentap.feed();
    let total_s = setup.speech.iter().map(|(start, length)| start + length).fold(0.0, f64::max) + 6.0;
    let wav = speech_wav(dir.path(), setup.speech, total_s);
    let mut run = page(&tokentap);
    run.timeout_ms = 90_000;
    run.chromium_args = vec![
        "--use-fake-ui-for-media-stream".into(),
        "--use-fake-device-for-media-stream".into(),
        format!("--use-file-for-fake-audio-capture={}%noloop", wav.display()),
        // Host candidates as addresses, not mDNS names aiortc cannot resolve.
        "--disable-features=WebRtcHideLocalIpsWithMdns".into(),
    ];
    let out = run_page(&run);
    assert!(out["error"].is_null(), "browser run failed: {out:#}\npeer: {}", peer.stderr());
    assert_eq!(out["page_errors"], serde_json::json!([]), "{out:#}");
    assert!(out["result"]["error"].is_null(), "{out:#}\npeer: {}", peer.stderr());
    assert!(out["report_answers"].as_array().unwrap().iter().all(|a| a["status"] == 202), "{out:#}");
    let log = |kind: &str| -> Vec<Value> {
        let prefix = format!("{{\"{kind}\"");
        peer.stdout().lines().filter(|l| l.starts_with(&prefix)).map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let (answers, barge_ins) = (log("answer"), log("barge_in"));
    drop(peer);
    drop(netns);
    Session { out, answers, barge_ins, feed, receiver, _tokentap: tokentap }
}

/// The offer's record once the page's report joined it.
fn offer_record(feed: &mut RecordFeed) -> Value {
    loop {
        let r = feed.next_record();
        if r["path"].as_str().is_some_and(|p| p.starts_with("/v1/realtime/calls")) && !r["browser"].is_null() {
            return r;
        }
    }
}

#[test]
fn each_answer_is_heard_on_the_peers_schedule_and_joins_the_offers_trace() {
    let mut s = session(TWO_QUESTIONS, test_page);
    assert_eq!(s.out["result"]["outcome"], "answered", "{:#}", s.out);
    let report = &s.out["reports"][0];
    let webrtc = &report["webrtc"];
    assert_eq!(report["request"]["path"], "/v1/realtime/calls", "{report:#}");
    let answers = webrtc["answers"].as_array().unwrap_or_else(|| panic!("no answers: {report:#}"));
    assert_eq!(answers.len(), 2, "{webrtc:#}");
    assert_eq!(s.answers.len(), 2, "the peer's log: {:?}", s.answers);
    // The page sets no end-of-speech mark and lets the probe tap both tracks.
    assert_eq!((&webrtc["mic_tap"], &webrtc["remote_tap"]), (&"running".into(), &"running".into()), "{webrtc:#}");
    for (page, peer) in answers.iter().zip(&s.answers) {
        // The tap heard the onset in the samples; aiortc reports audio levels (RFC 6464), so the
        // cross-check comes from the delivered frames' levels.
        assert_eq!(page["method"], "worklet", "{page:#}");
        let jitter_buffer = f(&page["jitter_buffer_ms"]);
        assert!(jitter_buffer > 0.0, "{page:#}");
        // Same machine, same clock: sent + the network (a veth) + the jitter buffer = delivered.
        let schedule = f(&peer["first_audible_sent_ms"]) + jitter_buffer;
        let (delivered, estimate) = (f(&page["delivered_ms"]), f(&page["estimate_ms"]));
        eprintln!(
            "answer: sent {:.1}, delivered {delivered:.1} (jitter buffer {jitter_buffer:.1} ms): off by {:.1} ms; \
             the levels' estimate {:.1} ms after the tap's",
            f(&peer["first_audible_sent_ms"]),
            delivered - schedule,
            estimate - delivered
        );
        assert!((delivered - schedule).abs() <= 40.0, "delivered {delivered}, schedule {schedule}: {page:#}");
        assert!((estimate - schedule).abs() <= 40.0, "estimate {estimate}, schedule {schedule}: {page:#}");
        assert!(f(&page["end_ms"]) > delivered, "{page:#}");
    }
    // The tap's end of speech against the file's, give or take when the capture started (the
    // file starts before `getUserMedia` resolves): measured 9–30 ms early over four runs
    // (docs/metrics.md), checked within 60 ms.
    let mic_start = f(&s.out["result"]["mic_start_ms"]);
    let speech = webrtc["speech"].as_array().unwrap();
    assert_eq!(speech.len(), 2, "{webrtc:#}");
    for (speech, file_end_s) in speech.iter().zip(speech_ends(&TWO_QUESTIONS)) {
        assert_eq!(speech["source"], "worklet", "{speech:#}");
        let lag = f(&speech["end_ms"]) - (mic_start + file_end_s * 1000.0);
        eprintln!("end of speech: the tap's detector is {lag:.1} ms after the file's");
        assert!(lag.abs() <= SPEECH_END_TOLERANCE_MS, "{lag} ms: {speech:#}");
    }
    assert!(f(&webrtc["jitter_buffer_ms"]) > 0.0, "{webrtc:#}");
    assert!(f(&webrtc["first_packet_ms"]) <= f(&answers[0]["delivered_ms"]), "{webrtc:#}");

    // tokentap: the offer's record, joined, with one voice turn per answer.
    let record = offer_record(&mut s.feed);
    assert_eq!(record["status"], 201, "{record:#}");
    let joined = &record["browser"]["webrtc"];
    let turns = joined["turns"].as_array().unwrap_or_else(|| panic!("{joined:#}"));
    assert_eq!(turns.len(), 2, "{joined:#}");
    for turn in turns {
        let names: Vec<&str> = turn["events"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"input_audio_buffer.speech_stopped"), "{turn:#}");
        assert!(names.contains(&"response.created"), "{turn:#}");
        assert_eq!(turn["speech_end_source"], "worklet", "{turn:#}");
        // end of speech < first packet < delivered ≤ heard, on tokentap's timeline.
        let (end, packet, delivered, heard) =
            (f(&turn["speech_end_ms"]), f(&turn["first_packet_ms"]), f(&turn["delivered_ms"]), f(&turn["heard_ms"]));
        assert!(end < packet && packet < delivered && delivered <= heard, "{turn:#}");
        assert!((f(&turn["voice_to_ear_ms"]) - (heard - end)).abs() < 1e-6, "{turn:#}");
    }

    // OTLP: each turn's spans are in the offer's trace, under the page's span of the offer.
    let trace = record["trace_id"].as_str().unwrap().to_string();
    let voice_turns = |r: &tokentap_e2e::otlp_receiver::Received| {
        r.spans().iter().filter(|s| hex(&s.trace_id) == trace && s.name == "voice turn").count() == 2
    };
    let received = s.receiver.wait_for(Duration::from_secs(60), "two voice turn spans", voice_turns);
    let spans: Vec<_> = received.spans().into_iter().filter(|s| hex(&s.trace_id) == trace).collect();
    let offer = spans
        .iter()
        .find(|s| attr_str(&s.attributes, "tokentap.request_id") == record["request_id"].as_str())
        .unwrap_or_else(|| panic!("the offer's span is not in the trace: {spans:#?}"));
    let page_span = hex(&offer.parent_span_id);
    for turn in spans.iter().filter(|s| s.name == "voice turn") {
        assert_eq!(hex(&turn.parent_span_id), page_span, "a voice turn under the page's span of the offer");
        let parts: Vec<&str> =
            spans.iter().filter(|s| s.parent_span_id == turn.span_id).map(|s| s.name.as_str()).collect();
        for part in ["webrtc response", "jitter buffer", "playout"] {
            assert!(parts.contains(&part), "no {part} span: {parts:?}");
        }
    }
}

#[test]
fn loss_on_the_media_path_is_concealed_and_called_choppy() {
    // 15 % of the answer's packets, three in a row of every twenty (60 ms gaps).
    let mut s = session(Setup { media_loss: Some((3, 20)), ..TWO_QUESTIONS }, test_page);
    assert_eq!(s.out["result"]["outcome"], "answered", "{:#}", s.out);
    let webrtc = &s.out["reports"][0]["webrtc"];
    assert!(f(&webrtc["packets_lost"]) > 0.0, "{webrtc:#}");
    assert!(f(&webrtc["concealment_events"]) > 0.0, "{webrtc:#}");
    let record = offer_record(&mut s.feed);
    let joined = &record["browser"]["webrtc"];
    eprintln!("loss {} concealed {} choppy {}", joined["loss_ratio"], joined["concealed_ratio"], joined["choppy"]);
    assert!(f(&joined["loss_ratio"]) > 0.05, "{joined:#}");
    assert!(f(&joined["concealed_ratio"]) > 0.02, "{joined:#}");
    assert_eq!(joined["choppy"], true, "{joined:#}");
    assert!(joined["turns"].as_array().unwrap().iter().any(|t| t["choppy"] == true), "{joined:#}");
}

#[test]
fn talking_over_an_answer_is_counted_with_the_time_until_its_audio_stopped() {
    let mut s = session(BARGE_IN, test_page);
    assert_eq!(s.out["result"]["outcome"], "answered", "{:#}", s.out);
    assert_eq!(s.barge_ins.len(), 1, "the peer's log: {:?}", s.barge_ins);
    let peer = &s.barge_ins[0];
    let webrtc = &s.out["reports"][0]["webrtc"];
    let answers = webrtc["answers"].as_array().unwrap_or_else(|| panic!("{webrtc:#}"));
    assert_eq!(answers.len(), 2, "the interrupted answer and the next: {webrtc:#}");
    let first = &answers[0];
    assert!(!first["barge_in_ms"].is_null() && !first["end_ms"].is_null(), "{webrtc:#}");
    let (barge_in, end) = (f(&first["barge_in_ms"]), f(&first["end_ms"]));
    let (delivered, jitter_buffer) = (f(&first["delivered_ms"]), f(&first["jitter_buffer_ms"]));
    // Uninterrupted, the answer's tone would have played 3 s from its first audible sample; the
    // peer stopped it with its last tone frame, sent once it heard the user.
    let stopped_sent = f(&peer["last_audible_sent_ms"]);
    let mic_start = f(&s.out["result"]["mic_start_ms"]);
    eprintln!(
        "barge-in: the user started {:.1} ms after the file's second stretch; the answer stopped {:.1} ms \
         later, {:.1} ms after the peer's last tone frame + the jitter buffer ({jitter_buffer:.1} ms)",
        barge_in - (mic_start + BARGE_IN.speech[1].0 * 1000.0),
        end - barge_in,
        end - (stopped_sent + jitter_buffer)
    );
    assert!(delivered < barge_in && barge_in < end, "{first:#}");
    assert!(end > stopped_sent && end < delivered + 3000.0 - 1000.0, "stopped at least 1 s early: {first:#}");
    assert!(answers[1]["barge_in_ms"].is_null(), "{webrtc:#}");

    let record = offer_record(&mut s.feed);
    let joined = &record["browser"]["webrtc"];
    assert_eq!(joined["barge_ins"], 1, "{joined:#}");
    let turn = &joined["turns"][0];
    assert!((f(&turn["stopped_after_barge_in_ms"]) - (end - barge_in)).abs() < 1e-6, "{turn:#}");
    let names: Vec<&str> =
        joined["event_counts"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"output_audio_buffer.cleared"), "{joined:#}");
}

#[test]
fn jitter_from_the_peer_grows_the_jitter_buffer() {
    let steady = session(TWO_QUESTIONS, test_page);
    let jittery = session(Setup { peer_args: &["--tone-ms", "800", "--jitter-ms", "160"], ..TWO_QUESTIONS }, test_page);
    let mut seen = Vec::new();
    for (name, mut s) in [("steady", steady), ("jittery", jittery)] {
        assert_eq!(s.out["result"]["outcome"], "answered", "{:#}", s.out);
        let joined = offer_record(&mut s.feed)["browser"]["webrtc"].clone();
        let turns = joined["turns"].as_array().unwrap_or_else(|| panic!("{joined:#}"));
        assert_eq!(turns.len(), 2, "{joined:#}");
        assert!(turns.iter().all(|t| f(&t["jitter_buffer_ms"]) > 0.0), "{joined:#}");
        let figures = [&joined["jitter_ms"], &joined["jitter_buffer_ms"], &joined["jitter_buffer_target_ms"]].map(f);
        let per_turn: Vec<f64> = turns.iter().map(|t| f(&t["jitter_buffer_ms"])).collect();
        eprintln!(
            "{name}: jitter {:.1} ms, jitter buffer {:.1} ms (target {:.1} ms), per turn {per_turn:?}",
            figures[0], figures[1], figures[2]
        );
        seen.push(figures);
    }
    // The jitter the browser measured and the delay its jitter buffer aims for grow with the
    // peer's jitter (each frame held a random 0–160 ms). The delay the buffer actually held over
    // these two short answers is reported (above: every turn's is positive) but not compared: the
    // browser fills the buffer toward its target over seconds, and with both cores busy a steady
    // session's held delay came out above a jittery one's (72.9 against 68.4 ms, targets 76.6
    // against 124.2 ms). Quiet runs: held 41–45 against 74–92 ms, targets 38–48 against 150–162 ms.
    let (steady, jittery) = (seen[0], seen[1]);
    for (i, what) in [(0, "jitter"), (2, "jitter buffer target")] {
        assert!(jittery[i] > steady[i], "{what}: {} with jitter, {} without", jittery[i], steady[i]);
    }
}

#[test]
fn the_voice_page_shows_each_answer_of_a_webrtc_session() {
    let voice_page = |tokentap: &Tokentap| PageRun {
        origin: format!("http://{}", tokentap.addr),
        path: "/_tokentap/demo/voice/?mode=webrtc&auto=1&answers=2&talk_ms=60000".into(),
        page_file: None,
        probe_fallback: false,
        reports: 1,
        report_mode: tokentap_e2e::browser::Reports::Observe,
        timeout_ms: 90_000,
        result_expr: Some(
            "window.__done.then((r) => Object.assign({}, r, { page_text: document.body.innerText }))".into(),
        ),
        chromium_args: Vec::new(),
    };
    let s = session(TWO_QUESTIONS, voice_page);
    let result = &s.out["result"];
    assert_eq!(result["mode"], "webrtc", "{result:#}");
    assert_eq!(result["answers_done"], 2, "{result:#}");
    let turns = result["record"]["browser"]["webrtc"]["turns"].as_array().unwrap_or_else(|| panic!("{result:#}"));
    assert_eq!(turns.len(), 2, "{result:#}");
    // The page's table: one row per answer, every figure shown.
    let text = result["page_text"].as_str().unwrap();
    assert!(text.contains("voice to ear") && text.contains("#2") && text.contains("2 answers"), "{text}");
    for word in ["null", "undefined", "NaN"] {
        assert!(!text.contains(word), "the voice page shows {word:?}:\n{text}");
    }
}
