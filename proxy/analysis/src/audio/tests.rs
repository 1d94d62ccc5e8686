//! Speech analysis on generated audio: leading silence, noise floors, sample widths, stereo, WAV
//! and raw PCM, SSE and raw framing, faster and slower than real time, and every input re-run
//! split at random byte positions.

use base64::Engine;

use super::multipart::tests::form;
use super::wav::tests::header;
use super::*;
use crate::analyze_request;

const MS: u64 = 1_000_000;

/// `silence_ms` of low noise, then a 440 Hz tone at −20 dBFS, `total_ms` in all.
fn pcm(spec: PcmSpec, silence_ms: u64, total_ms: u64) -> Vec<u8> {
    let rate = u64::from(spec.sample_rate_hz);
    let frames = rate * total_ms / 1000;
    let silent = rate * silence_ms / 1000;
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut out = Vec::new();
    for i in 0..frames {
        for ch in 0..spec.channels {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let noise = ((seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * 0.001; // about −63 dBFS
            let tone = if i >= silent {
                0.1 * std::f64::consts::SQRT_2
                    * (2.0 * std::f64::consts::PI * 440.0 * i as f64 / rate as f64 + f64::from(ch)).sin()
            } else {
                0.0
            };
            let x = (tone + noise).clamp(-1.0, 1.0);
            match (spec.bits_per_sample, spec.float) {
                (8, _) => out.push(((x * 127.0) + 128.0).round() as u8),
                (16, _) => out.extend_from_slice(&((x * 32_767.0).round() as i16).to_le_bytes()),
                (24, _) => out.extend_from_slice(&((x * 8_388_607.0).round() as i32).to_le_bytes()[..3]),
                (32, true) => out.extend_from_slice(&(x as f32).to_le_bytes()),
                (32, false) => out.extend_from_slice(&((x * 2_147_483_647.0).round() as i32).to_le_bytes()),
                _ => unreachable!(),
            }
        }
    }
    out
}

/// Cuts `body` into chunks that each carry `chunk_ms` of audio (after `lead` header bytes), one
/// every `every_ms`, starting at `t0_ms`.
fn schedule(
    body: &[u8],
    lead: usize,
    bytes_per_ms: usize,
    chunk_ms: usize,
    every_ms: u64,
    t0_ms: u64,
) -> Vec<(Vec<u8>, u64)> {
    let step = (bytes_per_ms * chunk_ms).max(1);
    let mut out = vec![];
    let mut at = 0;
    let mut t = t0_ms;
    while at < body.len() {
        let end = if at == 0 { (lead + step).min(body.len()) } else { (at + step).min(body.len()) };
        out.push((body[at..end].to_vec(), t * MS));
        at = end;
        t += every_ms;
    }
    out
}

/// Re-splits each chunk at pseudo-random byte positions (the pieces keep their chunk's time).
fn resplit(chunks: &[(Vec<u8>, u64)], seed: u64) -> Vec<(Vec<u8>, u64)> {
    let mut s = seed | 1;
    let mut out = vec![];
    for (bytes, t) in chunks {
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let n = ((s % 97) as usize + 1).min(rest.len());
            out.push((rest[..n].to_vec(), *t));
            rest = &rest[n..];
        }
    }
    out
}

fn analyse(ctx: SpeechContext, chunks: &[(Vec<u8>, u64)]) -> SpeechAnalysis {
    let mut a = SpeechAnalyzer::new(ctx);
    for (bytes, t) in chunks {
        a.push_chunk(bytes, *t);
    }
    a.finish()
}

fn raw(content_type: &str, response_format: &str) -> SpeechContext {
    SpeechContext {
        response_content_type: Some(content_type.to_owned()),
        response_format: Some(response_format.to_owned()),
    }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn raw_pcm_faster_than_real_time() {
    let spec = PcmSpec::OPENAI_PCM;
    let body = pcm(spec, 300, 1_300);
    // 100 ms of audio every 50 ms, from t = 200 ms.
    let chunks = schedule(&body, 0, 48, 100, 50, 200);
    for (i, input) in [chunks.clone(), resplit(&chunks, 7), resplit(&chunks, 99)].iter().enumerate() {
        let a = analyse(raw("application/octet-stream", "pcm"), input);
        assert_eq!(a.format, AudioFormat::Pcm, "{i}");
        assert_eq!(a.format_source, FormatSource::ResponseFormat);
        assert_eq!(a.pcm, Some(spec));
        assert_eq!(a.time_to_first_audio_ms, Some(200.0));
        assert_eq!(a.audio_ms, Some(1_300.0));
        let silence = a.leading_silence_ms.unwrap();
        assert!(close(silence, 300.0, 10.0), "{i}: {silence}");
        // The onset is in the fourth chunk (300–400 ms of audio), which arrives at 350 ms.
        assert_eq!(a.first_audible_arrival_ms, Some(350.0), "{i}");
        // Played from the first byte, the silence takes its own length: heard at 200 + 300 ms.
        assert!(close(a.time_to_first_audible_ms.unwrap(), 200.0 + silence, 0.01), "{i}: {a:?}");
        let p = a.predicted.unwrap();
        assert_eq!(p.underruns, 0, "{i}: {p:?}");
        assert!(close(a.real_time_factor.unwrap(), 0.5, 0.01), "{i}: {:?}", a.real_time_factor);
        assert_eq!(a.onset_unknown, None);
        assert!(a.received.len() >= 13 && a.received.len() <= 256);
        assert_eq!(a.received.last(), Some(&[ms(200 + 12 * 50), 1_300.0]));
    }
}

fn ms(t_ms: u64) -> f64 {
    t_ms as f64
}

#[test]
fn slower_than_real_time_predicts_underruns() {
    let spec = PcmSpec::OPENAI_PCM;
    let body = pcm(spec, 0, 1_000);
    // 100 ms of audio every 150 ms.
    let chunks = schedule(&body, 0, 48, 100, 150, 0);
    let a = analyse(raw("audio/pcm", "pcm"), &chunks);
    assert_eq!(a.leading_silence_ms, Some(0.0));
    let p = a.predicted.unwrap();
    assert_eq!(p.underruns, 9, "{p:?}");
    assert!(close(p.starved_ms, 450.0, 0.5), "{p:?}");
    assert!(close(a.real_time_factor.unwrap(), 1.5, 0.01));
}

#[test]
fn wav_of_every_width_and_stereo() {
    for spec in [
        PcmSpec { sample_rate_hz: 16_000, channels: 1, bits_per_sample: 8, float: false },
        PcmSpec { sample_rate_hz: 16_000, channels: 2, bits_per_sample: 16, float: false },
        PcmSpec { sample_rate_hz: 44_100, channels: 2, bits_per_sample: 24, float: false },
        PcmSpec { sample_rate_hz: 48_000, channels: 1, bits_per_sample: 32, float: true },
        PcmSpec { sample_rate_hz: 8_000, channels: 1, bits_per_sample: 32, float: false },
    ] {
        let samples = pcm(spec, 250, 800);
        for declared in [samples.len() as u32, u32::MAX, 0] {
            let mut body = header(spec, declared);
            body.extend_from_slice(&samples);
            let per_ms = spec.sample_rate_hz as usize * spec.frame_bytes() / 1000;
            let chunks = schedule(&body, 44, per_ms, 40, 20, 100);
            for input in [chunks.clone(), resplit(&chunks, u64::from(spec.sample_rate_hz))] {
                // The content type says nothing useful and the request asked for mp3: the
                // signature wins.
                let a = analyse(raw("application/octet-stream", "mp3"), &input);
                assert_eq!(a.format, AudioFormat::Wav, "{spec:?}");
                assert_eq!(a.format_source, FormatSource::Signature);
                assert_eq!(a.pcm, Some(spec));
                assert!(close(a.audio_ms.unwrap(), 800.0, 0.1), "{spec:?}: {:?}", a.audio_ms);
                let silence = a.leading_silence_ms.unwrap_or_else(|| panic!("{spec:?}: {a:?}"));
                assert!(close(silence, 250.0, 10.0), "{spec:?}: {silence}");
            }
        }
    }
}

#[test]
fn sse_speech_events() {
    let spec = PcmSpec::OPENAI_PCM;
    let audio = pcm(spec, 120, 600);
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut chunks = Vec::new();
    for (i, piece) in audio.chunks(4_800).enumerate() {
        let event = format!("data: {{\"type\":\"speech.audio.delta\",\"audio\":\"{}\"}}\n\n", b64.encode(piece));
        chunks.push((event.into_bytes(), (50 + 25 * i as u64) * MS));
    }
    let t_done = (50 + 25 * chunks.len() as u64) * MS;
    chunks.push((
        b"event: x\ndata: {\"type\":\"speech.audio.done\",\"usage\":{\"input_tokens\":14,\"output_tokens\":101,\"total_tokens\":115}}\n\n"
            .to_vec(),
        t_done,
    ));
    chunks.push((
        b"data: {\"type\":\"something.new\"}\n\ndata: {\"type\":\"speech.audio.delta\",\"audio\":\"@@@\"}\n\n".to_vec(),
        t_done,
    ));
    for input in [chunks.clone(), resplit(&chunks, 3), resplit(&chunks, 1234)] {
        let a = analyse(raw("text/event-stream", "pcm"), &input);
        assert_eq!(a.framing, SpeechFraming::Sse);
        assert_eq!(a.format, AudioFormat::Pcm);
        assert_eq!(a.audio_bytes, audio.len() as u64);
        assert_eq!(a.audio_ms, Some(600.0));
        assert!(close(a.leading_silence_ms.unwrap(), 120.0, 10.0));
        assert_eq!(a.time_to_first_audio_ms, Some(50.0));
        assert_eq!(a.done_ms, Some(t_done as f64 / 1e6));
        let usage = a.usage.clone().unwrap();
        assert_eq!((usage.input_tokens, usage.output_tokens, usage.total_tokens), (Some(14), Some(101), Some(115)));
        assert_eq!(a.unknown_events, 1);
        assert_eq!(a.bad_deltas, 1);
    }
}

#[test]
fn formats_not_decoded_and_bad_input_say_why() {
    let opus = [b"OggS\0\x02".to_vec(), vec![0x55; 4000]].concat();
    let a = analyse(raw("audio/ogg", "opus"), &[(opus.clone(), 80 * MS)]);
    assert_eq!(a.format, AudioFormat::Opus);
    assert_eq!(a.onset_unknown, Some(OnsetUnknown::FormatNotDecoded));
    assert_eq!(a.time_to_first_audio_ms, Some(80.0));
    assert_eq!(a.audio_bytes, opus.len() as u64);
    assert_eq!(a.audio_ms, None);
    // MP3 frame headers over garbage: counted, never a panic, and no onset claimed.
    let mp3 =
        [b"ID3\x04\0\0\0\0\0\0".to_vec(), [vec![0xFF, 0xFB, 0x90, 0x64], vec![0x55; 413]].concat().repeat(10)].concat();
    let a = analyse(raw("audio/mpeg", "mp3"), &resplit(&[(mp3.clone(), 80 * MS)], 4));
    assert_eq!(a.format, AudioFormat::Mp3);
    assert!(a.onset_unknown.is_some(), "{a:?}");
    assert!(close(a.audio_ms.unwrap(), 10.0 * 1152.0 / 44.1, 1.0), "{a:?}");
    // Not MP3 at all.
    let a = analyse(raw("audio/mpeg", "mp3"), &[(vec![0x42; 3000], 0)]);
    assert_eq!(a.onset_unknown, Some(OnsetUnknown::UnreadableHeader));

    let none = analyse(raw("audio/pcm", "pcm"), &[]);
    assert_eq!(none.onset_unknown, Some(OnsetUnknown::NoAudio));

    let silent = analyse(raw("audio/pcm", "pcm"), &[(vec![0; 48_000], 0)]);
    assert_eq!(silent.onset_unknown, Some(OnsetUnknown::SilentThroughout));
    assert_eq!(silent.audio_ms, Some(1_000.0));

    let mut bad = header(PcmSpec::OPENAI_PCM, 100);
    bad[20] = 0x55; // a compressed format tag
    bad.extend_from_slice(&[1; 200]);
    let a = analyse(raw("audio/wav", "wav"), &[(bad, 0)]);
    assert_eq!(a.onset_unknown, Some(OnsetUnknown::UnreadableHeader));

    // A few bytes of PCM only: settled at the end.
    let tiny = analyse(raw("audio/pcm", "pcm"), &[(vec![0x10, 0x27, 0x10, 0x27], 5 * MS)]);
    assert_eq!(tiny.audio_ms, Some(2.0 / 24.0));
    // Garbage with an audio content type never panics.
    for seed in 0..50u64 {
        let junk: Vec<u8> = (0..(seed * 37 % 500)).map(|i| (i * 31 + seed * 7) as u8).collect();
        for ct in ["audio/wav", "audio/pcm", "text/event-stream", "application/octet-stream"] {
            let _ = analyse(raw(ct, "wav"), &resplit(&[(junk.clone(), 0)], seed));
        }
    }
}

fn transcribe(content_type: Option<&str>, chunks: &[(Vec<u8>, u64)]) -> TranscriptionAnalysis {
    let mut a = TranscriptionAnalyzer::new(content_type);
    for (bytes, t) in chunks {
        a.push_chunk(bytes, *t);
    }
    a.finish(Some(200))
}

#[test]
fn transcription_answers() {
    let streamed = vec![
        (b"data: {\"type\":\"transcript.text.delta\",\"delta\":\"What is\"}\n\n".to_vec(), 410 * MS),
        (b"data: {\"type\":\"transcript.text.delta\",\"delta\":\" the weather?\"}\n\n".to_vec(), 450 * MS),
        (b"data: {\"type\":\"transcript.text.segment\",\"text\":\"What is the weather?\"}\n\n".to_vec(), 460 * MS),
        (
            b"data: {\"type\":\"transcript.text.done\",\"text\":\"What is the weather?\",\"usage\":{\"type\":\"tokens\",\"input_tokens\":14,\"output_tokens\":6,\"total_tokens\":20}}\n\n"
                .to_vec(),
            470 * MS,
        ),
    ];
    for input in [streamed.clone(), resplit(&streamed, 5), resplit(&streamed, 77)] {
        let a = transcribe(Some("text/event-stream"), &input);
        assert!(a.streamed);
        assert_eq!(a.time_to_first_delta_ms, Some(410.0));
        assert_eq!(a.transcript_done_ms, Some(470.0));
        assert_eq!((a.deltas, a.segments), (2, 1));
        assert_eq!(a.usage.as_ref().and_then(|u| u.total_tokens), Some(20));
        assert_eq!(a.transcript_hash, Some(crate::conversation::text_hash("what is the weather?")));
        assert!(a.transcript_tokens.unwrap() >= 4);
    }
    let json =
        vec![(b"{\"text\":\"Hello there.\",\"usage\":{\"type\":\"duration\",\"seconds\":3}}".to_vec(), 900 * MS)];
    let a = transcribe(Some("application/json"), &resplit(&json, 9));
    assert!(!a.streamed);
    assert_eq!(a.transcript_done_ms, Some(900.0));
    assert_eq!(a.audio_duration_ms, Some(3_000.0));
    assert_eq!(a.transcript_hash, Some(crate::conversation::text_hash("hello there.")));
    let verbose =
        vec![(br#"{"task":"transcribe","duration":2.5,"text":"Hi.","segments":[{"id":0},{"id":1}]}"#.to_vec(), MS)];
    let a = transcribe(Some("application/json"), &verbose);
    assert_eq!((a.audio_duration_ms, a.segments), (Some(2_500.0), 2));
    let text = transcribe(Some("text/plain"), &[(b"Hi there\n".to_vec(), 3 * MS)]);
    assert_eq!(text.transcript_hash, Some(crate::conversation::text_hash("hi there")));
    let mut error = TranscriptionAnalyzer::new(Some("application/json"));
    error.push_chunk(br#"{"error":{"message":"Invalid file format."}}"#, MS);
    let error = error.finish(Some(400));
    assert_eq!(error.errors, vec!["Invalid file format.".to_owned()]);
    assert_eq!(error.transcript_hash, None);
}

#[test]
fn transcription_uploads() {
    let spec = PcmSpec { sample_rate_hz: 16_000, channels: 1, bits_per_sample: 16, float: false };
    let samples = pcm(spec, 0, 1_500);
    let mut wav = header(spec, samples.len() as u32);
    wav.extend_from_slice(&samples);
    let body = form(
        "----sdk",
        &[
            ("model", None, b"gpt-4o-transcribe"),
            ("stream", None, b"true"),
            ("response_format", None, b"json"),
            ("file", Some(("speech.wav", "audio/wav")), &wav),
        ],
    );
    let ct = "multipart/form-data; boundary=----sdk";
    let info = analyze_request("/v1/audio/transcriptions", Some(ct), &body, false);
    assert_eq!(info.operation.as_deref(), Some("speech_to_text"));
    assert_eq!(info.model.as_deref(), Some("gpt-4o-transcribe"));
    assert_eq!(info.stream, Some(true));
    let t = info.transcription.unwrap();
    assert_eq!(t.response_format.as_deref(), Some("json"));
    let upload = t.upload.unwrap();
    assert_eq!(upload.file_bytes, Some(wav.len() as u64));
    assert_eq!(upload.format, Some(AudioFormat::Wav));
    assert!(close(upload.duration_ms.unwrap(), 1_500.0, 0.01));
    // Captured only in part: the fields before the file and the WAV header still count, and the
    // duration comes from the declared size.
    let cut = body.len() - samples.len() / 2;
    let info = analyze_request("/v1/audio/transcriptions", Some(ct), &body[..cut], true);
    assert_eq!(info.model.as_deref(), Some("gpt-4o-transcribe"));
    let upload = info.transcription.unwrap().upload.unwrap();
    assert_eq!(upload.file_bytes, None);
    assert!(close(upload.duration_ms.unwrap(), 1_500.0, 0.01));
    // An mp3 upload: type and size, no duration.
    let body = form(
        "b",
        &[("file", Some(("a.mp3", "application/octet-stream")), b"\xff\xfb\x90\x64abc"), ("model", None, b"whisper-1")],
    );
    let info = analyze_request("/v1/audio/transcriptions", Some("multipart/form-data; boundary=b"), &body, false);
    let upload = info.transcription.unwrap().upload.unwrap();
    assert_eq!((upload.format, upload.duration_ms, upload.file_bytes), (Some(AudioFormat::Mp3), None, Some(7)));
    assert_eq!(info.stream, Some(false));
    // Not a form: a clear error, nothing else.
    let info = analyze_request("/v1/audio/transcriptions", Some("multipart/form-data"), b"--x\r\n", false);
    assert!(info.parse_error.unwrap().contains("boundary"));
}

#[test]
fn speech_requests_and_the_answers_they_read() {
    let body = br#"{"model":"gpt-4o-mini-tts","input":"It is sunny in Paris.","voice":"alloy","response_format":"pcm","stream_format":"sse"}"#;
    let info = analyze_request("/v1/audio/speech", Some("application/json"), body, false);
    assert_eq!(info.operation.as_deref(), Some("text_to_speech"));
    let s = info.speech.unwrap();
    assert_eq!(
        (s.voice.as_deref(), s.response_format.as_deref(), s.stream_format.as_deref()),
        (Some("alloy"), Some("pcm"), Some("sse"))
    );
    assert_eq!(s.input_chars, 21);
    let answer = crate::conversation::TextHashes::of("Sure. It is sunny in Paris. Highs of 21.");
    assert!(answer.covers(&info.speech_input_hashes.unwrap()));
    // The chat request that carries a transcript.
    let chat = br#"{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is the weather?"}]}"#;
    let info = analyze_request("/v1/chat/completions", Some("application/json"), chat, false);
    assert_eq!(info.last_user_text_hash, Some(crate::conversation::text_hash("What is the weather?")));
    let parts =
        br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"What is the weather?"}]}]}"#;
    let info = analyze_request("/v1/chat/completions", Some("application/json"), parts, false);
    assert_eq!(info.last_user_text_hash, Some(crate::conversation::text_hash("What is the weather?")));
    let tool = br#"{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c","content":"x"}]}"#;
    assert_eq!(
        analyze_request("/v1/chat/completions", Some("application/json"), tool, false).last_user_text_hash,
        None
    );
}

#[test]
fn mp3_onset_and_duration_from_real_encoder_output() {
    // lame 3.100: 300 ms of digital silence, then 700 ms of a 440 Hz tone at −20 dBFS. The
    // 44.1 kHz file has a LAME tag (encoder delay and padding), so the priming samples are left
    // out as a gapless player does; the 24 kHz one has no room for the tag in its 144-byte first
    // frame, so its decoder output, priming included (576 + 529 samples, 46 ms), is what plays.
    let files: [(&[u8], f64, f64); 2] = [
        (include_bytes!("../../tests/fixtures/audio/silence300-tone700-24k-mono.mp3"), 24_000.0, 300.0 + 1105.0 / 24.0),
        (include_bytes!("../../tests/fixtures/audio/silence300-tone700-44k-stereo.mp3"), 44_100.0, 300.0),
    ];
    for (file, rate, expected_silence) in files {
        let chunks = schedule(file, 0, 100, 5, 20, 100);
        let whole = analyse(raw("audio/mpeg", "mp3"), &chunks);
        assert_eq!(whole.format, AudioFormat::Mp3, "{rate}");
        assert_eq!(whole.onset_unknown, None, "{rate}: {whole:?}");
        let silence = whole.leading_silence_ms.unwrap();
        assert!(close(silence, expected_silence, 15.0), "{rate}: leading silence {silence}");
        // Without the tag the priming and the padding to whole frames count as audio.
        let audio = whole.audio_ms.unwrap();
        assert!((995.0..1_100.0).contains(&audio), "{rate}: {audio}");
        assert!(whole.time_to_first_audible_ms.unwrap() >= 100.0 + silence - 1.0);
        assert!(whole.first_audible_arrival_ms.is_some() && whole.predicted.is_some());
        for seed in [3, 17, 255] {
            assert_eq!(analyse(raw("audio/mpeg", "mp3"), &resplit(&chunks, seed)), whole, "{rate} split {seed}");
        }
    }
}
