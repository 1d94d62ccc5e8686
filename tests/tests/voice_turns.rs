//! A voice turn over HTTP, as an app chains it on the official openai SDK (speech to text, the
//! transcript sent on as the user's message, the answer read out sentence by sentence), with no
//! tokentap header and no trace context: tokentap joins the three kinds of request into one turn
//! by their text, and lays out the wait from the upload to the first audible sample.

use tokentap_e2e::{Mock, Tokentap};

fn run_voice_turn(base_url: &str) -> serde_json::Value {
    tokentap_e2e::process::run_sdk_script("voice_turn.py", &["--base-url", base_url])
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn stt_chat_and_tts_are_one_turn_with_the_wait_laid_out() {
    let mock = Mock::start(&["--ttft-ms", "40", "--itl-ms", "5", "--tokens", "24"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let out = run_voice_turn(&format!("http://{}/v1", tokentap.addr));
    let ids = &out["request_ids"];
    let spoken = out["spoken"].as_array().unwrap();
    assert!(!spoken.is_empty(), "{out}");
    assert!(spoken.iter().all(|s| s["audio_bytes"].as_u64().unwrap() > 0), "{out}");

    // The turn closes with the answer, and is written again as each speech request joins it.
    let turn = loop {
        let turn = feed.next_turn();
        if turn["voice"]["speech"].as_array().is_some_and(|s| s.len() == spoken.len()) {
            break turn;
        }
    };
    let voice = &turn["voice"];
    let t = &voice["transcription"];
    assert_eq!(t["request_id"], ids["transcription"], "{turn}");
    assert_eq!(t["link"], "transcript");
    assert!(f(&t["upload_audio_ms"]) > 990.0 && f(&t["upload_audio_ms"]) < 1_010.0, "{t}");
    assert_eq!(turn["steps"][0]["request_id"], ids["chat"]);
    for (i, stage) in voice["speech"].as_array().unwrap().iter().enumerate() {
        assert_eq!(stage["request_id"], ids[format!("speech_{i}")], "{voice}");
        assert_eq!(stage["link"], "answer_text");
        // The mock opens each answer with 200 ms of exact silence.
        let silence = f(&stage["leading_silence_ms"]);
        assert!((190.0..=210.0).contains(&silence), "leading silence {silence}");
        assert!(f(&stage["first_audible_ms"]) >= f(&stage["first_audio_ms"]) + silence - 1.0, "{stage}");
        assert_eq!(stage["predicted_underruns"], 0, "the mock speaks twice as fast as real time: {stage}");
    }
    // The chain of waits is contiguous, in order, and ends at the first audible sample.
    let segments = voice["segments"].as_array().unwrap();
    let kinds: Vec<&str> = segments.iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["upload", "transcription", "to_model", "first_token", "to_speech", "speech_first_byte", "leading_silence"],
        "{voice}"
    );
    assert_eq!(f(&segments[0]["start_ms"]), 0.0);
    for w in segments.windows(2) {
        assert_eq!(f(&w[0]["end_ms"]), f(&w[1]["start_ms"]), "{voice}");
        assert!(f(&w[1]["end_ms"]) >= f(&w[1]["start_ms"]));
    }
    assert_eq!(f(&segments[6]["end_ms"]), f(&voice["first_audible_ms"]));
    assert!(f(&voice["first_audible_ms"]) > f(&voice["first_answer_token_ms"]));

    // Every voice request's record names the turn; the health counters agree.
    for key in ["transcription", "speech_0"] {
        let id = ids[key].as_str().unwrap();
        let (status, record) = tokentap.admin_get(&format!("/_tokentap/api/requests/{id}"));
        assert_eq!(status, 200);
        assert_eq!(record["turn"]["turn_id"], turn["turn_id"], "{key}: {record}");
        assert_eq!(record["turn"]["link"], "voice");
    }
    let (_, record) = tokentap.admin_get(&format!("/_tokentap/api/requests/{}", ids["speech_0"].as_str().unwrap()));
    let speech = &record["speech"];
    assert_eq!(speech["format"], "pcm", "{speech}");
    assert_eq!(speech["format_source"], "response_format", "the mock answers application/octet-stream");
    let (_, health) = tokentap.admin_get("/_tokentap/api/health");
    let v = &health["turns"]["voice"];
    assert_eq!(v["transcriptions_linked"], 1, "{health}");
    assert_eq!(v["speech_linked"], spoken.len() as u64, "{health}");

    // `tokentap explain <turn id>` lays out the same wait.
    let turn_id = turn["turn_id"].as_str().unwrap();
    let (status, text, err) =
        tokentap_e2e::process::run_tokentap(&["explain", turn_id, "--admin", &format!("http://{}", tokentap.admin)]);
    assert!(status.success(), "{err}");
    for needle in [
        "voice (ms since",
        "transcription ",
        "to the first answer token",
        "to the first audible sample",
        "voice to first audible sample (wire)",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
}

#[test]
fn unrelated_voice_requests_stay_apart() {
    // After a proper voice turn, a speech request of text no answer had joins no turn: its record
    // names none and the linked count does not move (it waits, bounded, for an answer that never
    // comes).
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "6"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let base = format!("http://{}/v1", tokentap.addr);
    // A run whose transcript is set by the mock's header (the script still sends it on).
    tokentap_e2e::process::run_sdk_script(
        "voice_turn.py",
        &["--base-url", &base, "--header", "x-mock-transcript:Something nobody asked.", "--sentences", "1"],
    );
    // This run is a proper voice turn (the transcript is sent on); now a stray transcription and a
    // stray speech request with nothing to join.
    let turn = loop {
        let t = feed.next_turn();
        if t["voice"]["speech"].as_array().is_some_and(|s| !s.is_empty()) {
            break t;
        }
    };
    assert_eq!(turn["voice"]["transcription"]["link"], "transcript");
    let stray = tokentap_e2e::http1::post(
        tokentap.addr,
        "/v1/audio/speech",
        &[("content-type", "application/json")],
        br#"{"model":"gpt-4o-mini-tts","voice":"alloy","input":"Words no answer contained.","response_format":"pcm"}"#,
    );
    assert_eq!(stray.status, 200);
    let record = feed.next_record_for("/v1/audio/speech");
    assert!(record.get("turn").is_none(), "{record}");
    let (_, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(health["turns"]["voice"]["speech_linked"], 1, "{health}");
}
