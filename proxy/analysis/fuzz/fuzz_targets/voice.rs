//! Arbitrary bytes through the voice parsers: speech responses (raw PCM, WAV, MP3 and SSE, with
//! every format hint), transcription responses (JSON, text, SSE) and multipart uploads. Besides
//! "never panics", where the network cut the bytes must not change the result.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokentap_analysis::analyze_request;
use tokentap_analysis::audio::{SpeechAnalyzer, SpeechContext, TranscriptionAnalyzer};

const SPEECH: &[(Option<&str>, Option<&str>)] = &[
    (Some("application/octet-stream"), Some("pcm")),
    (Some("audio/wav"), Some("wav")),
    (Some("audio/mpeg"), Some("mp3")),
    (Some("text/event-stream"), Some("pcm")),
    (Some("audio/L16; rate=8000; channels=2"), None),
    (None, None),
];

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (selector, body) = (data[0], &data[1..]);
    let cut = (usize::from(data[1]) * body.len() / 256).min(body.len());
    // Both pieces at the same time, so only the cut differs.
    let (a, b) = body.split_at(cut);
    let (ct, format) = SPEECH[usize::from(selector) % SPEECH.len()];
    let mut whole = SpeechAnalyzer::new(SpeechContext {
        response_content_type: ct.map(str::to_owned),
        response_format: format.map(str::to_owned),
    });
    whole.push_chunk(body, 0);
    let whole = whole.finish();
    let mut split = SpeechAnalyzer::new(SpeechContext {
        response_content_type: ct.map(str::to_owned),
        response_format: format.map(str::to_owned),
    });
    split.push_chunk(a, 0);
    split.push_chunk(b, 0);
    assert_eq!(split.finish(), whole, "a cut changed the speech analysis");

    for ct in [Some("text/event-stream"), Some("application/json"), Some("text/plain")] {
        let mut t = TranscriptionAnalyzer::new(ct);
        t.push_chunk(a, 0);
        t.push_chunk(b, 0);
        let split = t.finish(Some(200));
        let mut t = TranscriptionAnalyzer::new(ct);
        t.push_chunk(body, 0);
        assert_eq!(t.finish(Some(200)), split, "a cut changed the transcription analysis");
    }
    let boundary = "multipart/form-data; boundary=x";
    for truncated in [false, true] {
        let _ = analyze_request("/v1/audio/transcriptions", Some(boundary), body, truncated);
    }
    let _ = analyze_request("/v1/audio/speech", Some("application/json"), body, false);
});
