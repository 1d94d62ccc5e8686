//! The official openai SDK's audio calls (speech to text, streamed and not, and streamed text to
//! speech) parse the same results through tokentap as from the mock directly, and tokentap keeps a
//! successful record of each.

use tokentap_e2e::{Mock, Tokentap};

fn run_script(script: &str, base_url: &str) -> serde_json::Value {
    tokentap_e2e::process::run_sdk_script(script, &["--base-url", base_url])
}

const TRANSCRIPT: &str = "What is the weather in Paris today?";

#[test]
fn openai_sdk_voice_results_match_direct_and_proxied() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let direct = run_script("voice_openai.py", &format!("{}/v1", mock.url));
    let proxied = run_script("voice_openai.py", &format!("http://{}/v1", tokentap.addr));
    assert_eq!(direct, proxied);

    // Real content, not empty results that would trivially match.
    assert_eq!(direct["transcription"]["text"], TRANSCRIPT, "{direct:#}");
    assert_eq!(direct["transcription"]["usage"]["type"], "tokens", "{direct:#}");
    let stream = &direct["transcription_stream"];
    assert_eq!(stream["deltas"].as_array().map(Vec::len), Some(7), "one delta per word: {stream:#}");
    assert_eq!(stream["joined_deltas"], TRANSCRIPT);
    assert_eq!(stream["done_text"], TRANSCRIPT);
    assert_eq!(stream["last_event"], "transcript.text.done");
    let verbose = &direct["transcription_verbose"];
    assert_eq!(verbose["duration"], 1.0, "from the uploaded WAV's header: {verbose:#}");
    assert_eq!(verbose["segments"][0]["text"], TRANSCRIPT);
    assert_eq!(verbose["usage"], serde_json::json!({"type": "duration", "seconds": 1.0}));
    // 200 ms of silence + 27 characters × 60 ms, at 24 kHz 16-bit mono.
    let pcm_bytes = (200 + 27 * 60) * 48;
    assert_eq!(direct["speech_pcm"]["bytes"], pcm_bytes, "{direct:#}");
    assert_eq!(direct["speech_pcm"]["leading_zero_bytes"], 200 * 48);
    assert_eq!(direct["speech_pcm"]["content_type"], "application/octet-stream");
    assert_eq!(direct["speech_wav"]["bytes"], 44 + pcm_bytes);
    assert_eq!(direct["speech_wav"]["starts_with"], "52494646", "RIFF");
    assert_eq!(direct["speech_wav"]["content_type"], "audio/wav");

    // Every proxied request produced a successful record.
    let mut paths = Vec::new();
    while paths.len() < 5 {
        let record = feed.next_record();
        assert_eq!(record["outcome"], "ok", "{record:#}");
        assert!(!record.to_string().contains("sk-test-SECRET"));
        paths.push(record["path"].as_str().unwrap_or_default().to_owned());
    }
    paths.sort();
    assert_eq!(
        paths,
        [
            "/v1/audio/speech",
            "/v1/audio/speech",
            "/v1/audio/transcriptions",
            "/v1/audio/transcriptions",
            "/v1/audio/transcriptions"
        ]
    );
}
