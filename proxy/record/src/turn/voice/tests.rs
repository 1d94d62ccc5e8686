use tokentap_analysis::conversation::{text_hash, TextHashes};
use tokentap_analysis::LastInput;

use super::*;

const MS: u64 = 1_000_000;
const T: u64 = 1_700_000_000_000_000_000;

fn transcription(id: &str, t0_ms: u64, transcript: &str) -> VoiceRequest {
    VoiceRequest {
        request_id: id.into(),
        trace_id: format!("trace-{id}"),
        traced: false,
        turn_header: None,
        model: Some("gpt-4o-transcribe".into()),
        t0_unix_ns: T + t0_ms * MS,
        kind: VoiceKind::Transcription {
            upload_end_unix_ns: Some(T + (t0_ms + 40) * MS),
            first_delta_unix_ns: Some(T + (t0_ms + 200) * MS),
            done_unix_ns: Some(T + (t0_ms + 300) * MS),
            upload_audio_ms: Some(1_500.0),
            transcript_hash: Some(text_hash(transcript)),
        },
    }
}

fn speech(id: &str, t0_ms: u64, input: &str) -> VoiceRequest {
    VoiceRequest {
        request_id: id.into(),
        trace_id: format!("trace-{id}"),
        traced: false,
        turn_header: None,
        model: Some("gpt-4o-mini-tts".into()),
        t0_unix_ns: T + t0_ms * MS,
        kind: VoiceKind::Speech {
            first_audio_unix_ns: Some(T + (t0_ms + 120) * MS),
            first_audible_unix_ns: Some(T + (t0_ms + 320) * MS),
            leading_silence_ms: Some(200.0),
            audio_ms: Some(1_800.0),
            real_time_factor: Some(0.5),
            underruns: Some(0),
            starved_ms: Some(0.0),
            input_hashes: Some(TextHashes::of(input)),
        },
    }
}

fn call<'a>(turn: &'a str, t0_ms: u64, user_text: &str, answer: &'a TextHashes) -> ModelCall<'a> {
    ModelCall {
        turn_id: turn,
        trace_id: "trace-chat",
        traced: false,
        turn_header: None,
        t0_unix_ns: T + t0_ms * MS,
        last_input: Some(LastInput::User),
        last_user_text_hash: Some(text_hash(user_text)),
        first_answer_unix_ns: Some(T + (t0_ms + 250) * MS),
        answer_hashes: Some(answer),
    }
}

#[test]
fn transcript_then_answer_then_speech_in_one_turn() {
    let mut v = VoiceLinker::default();
    assert_eq!(v.observe(transcription("stt", 0, "What is the weather in Paris?")), None);
    let answer = TextHashes::of("It is sunny in Paris. Highs of 21 degrees.");
    let joined = v.on_model_call(&call("turn-1", 350, "what is the weather in  paris?", &answer));
    assert_eq!(joined, vec!["stt".to_owned()]);
    // The first sentence is spoken (it arrives after the answer), then the second.
    assert_eq!(v.observe(speech("tts-1", 700, "It is sunny in Paris.")), Some("turn-1".into()));
    assert_eq!(v.observe(speech("tts-2", 900, "Highs of 21 degrees.")), Some("turn-1".into()));
    let voice = v.voice_of("turn-1", T + 350 * MS).unwrap();
    assert_eq!(voice.t0_unix_ns, T);
    let t = voice.transcription.as_ref().unwrap();
    assert_eq!((t.link, t.upload_end_ms, t.transcript_done_ms), (VoiceLink::Transcript, Some(40.0), Some(300.0)));
    assert_eq!(voice.model_start_ms, Some(350.0));
    assert_eq!(voice.first_answer_token_ms, Some(600.0));
    assert_eq!(voice.speech.len(), 2);
    assert_eq!(voice.speech[0].link, VoiceLink::AnswerText);
    assert_eq!(voice.first_audible_ms, Some(1_020.0));
    let kinds: Vec<_> = voice.segments.iter().map(|s| s.kind).collect();
    use VoiceSegmentKind::*;
    assert_eq!(kinds, vec![Upload, Transcription, ToModel, FirstToken, ToSpeech, SpeechFirstByte, LeadingSilence]);
    // Contiguous from 0 to the first audible sample.
    assert_eq!(voice.segments[0].start_ms, 0.0);
    for w in voice.segments.windows(2) {
        assert_eq!(w[0].end_ms, w[1].start_ms);
    }
    assert_eq!(voice.segments.last().unwrap().end_ms, 1_020.0);
    assert_eq!(v.counters().transcriptions_linked, 1);
    assert_eq!(v.counters().speech_linked, 2);
}

fn browser(marks: &[(&str, f64)], audio: &[(f64, Option<f64>, u64, f64, bool)]) -> crate::browser::BrowserTimeline {
    use crate::browser::timeline::{BrowserAudio, BrowserClock, BrowserMark};
    let mut b: crate::browser::BrowserTimeline = serde_json::from_value(serde_json::json!({
        "probe_span_id": "b7ad6b7169203331", "marks": [], "chunks": [], "long_frames": [], "audio": [],
        "browser_bytes": 0, "bytes_match": true, "painted_chars": 0, "answer_chars": 0,
        "chunks_dropped": 0, "paints_dropped": 0
    }))
    .unwrap();
    b.clock = Some(BrowserClock { offset_ms: 0.5, uncertainty_ms: 0.25, samples: 5 });
    b.marks = marks.iter().map(|(n, t)| BrowserMark { name: (*n).into(), t_ms: *t }).collect();
    b.audio = audio
        .iter()
        .map(|&(audible_ms, end_ms, underruns, starved_ms, interrupted)| BrowserAudio {
            kind: "audio_context".into(),
            audible_ms,
            output_latency_ms: None,
            end_ms,
            underruns,
            starved_ms,
            interrupted,
            scheduled_audio_ms: None,
        })
        .collect();
    b
}

#[test]
fn the_browser_adds_end_of_speech_and_playout_to_the_chain() {
    let mut v = VoiceLinker::default();
    v.observe(transcription("stt", 0, "What is the weather in Paris?"));
    let answer = TextHashes::of("It is sunny in Paris. Highs of 21 degrees.");
    v.on_model_call(&call("turn-1", 350, "What is the weather in Paris?", &answer));
    v.observe(speech("tts-1", 700, "It is sunny in Paris."));
    v.observe(speech("tts-2", 900, "Highs of 21 degrees."));
    let mut voice = v.voice_of("turn-1", T + 350 * MS).unwrap();
    let without = voice.clone();
    assert!(!voice.apply_browser(|_| None), "nothing joined, nothing changes");
    // The user stopped speaking 180 ms before the upload started (the mark is before the
    // transcription's t0). The first answer's request started at 700 ms; on the wire its first
    // audible sample is at 320 ms of it; the page started playing it at 410 ms of it, so its
    // first audible sample (200 ms of leading silence) was heard at 610 ms of it. It ran dry
    // twice and was cut off; the second played out.
    let lookup = |id: &str| match id {
        "stt" => Some((T, browser(&[("user_send", -500.0), (USER_SPEECH_END, -180.0)], &[]))),
        "tts-1" => Some((T + 700 * MS, browser(&[], &[(410.0, Some(2_000.0), 2, 130.0, true)]))),
        "tts-2" => Some((T + 900 * MS, browser(&[], &[(900.0, Some(2_800.0), 0, 0.0, false)]))),
        _ => None,
    };
    assert!(voice.apply_browser(lookup));
    assert_eq!(voice.user_speech_end_ms, Some(-180.0));
    assert_eq!(voice.heard_ms, Some(1_310.0));
    assert_eq!(voice.voice_to_voice_ms, Some(1_490.0));
    let first = voice.speech[0].playout.as_ref().unwrap();
    assert_eq!(first.started_ms, 1_110.0);
    assert_eq!((first.underruns, first.starved_ms, first.interrupted), (2, 130.0, true));
    assert_eq!((first.end_ms, first.clock_uncertainty_ms), (Some(2_700.0), Some(0.25)));
    assert!(!voice.speech[1].playout.as_ref().unwrap().interrupted);
    use VoiceSegmentKind::*;
    let kinds: Vec<_> = voice.segments.iter().map(|s| s.kind).collect();
    assert_eq!(
        kinds,
        vec![
            AfterSpeech,
            Upload,
            Transcription,
            ToModel,
            FirstToken,
            ToSpeech,
            SpeechFirstByte,
            LeadingSilence,
            Playout
        ]
    );
    assert_eq!((voice.segments[0].start_ms, voice.segments[0].end_ms), (-180.0, 0.0));
    for w in voice.segments.windows(2) {
        assert_eq!(w[0].end_ms, w[1].start_ms);
    }
    let last = voice.segments.last().unwrap();
    assert_eq!((last.start_ms, last.end_ms), (1_020.0, 1_310.0));
    // The same join again changes nothing; and the wire part is as before.
    assert!(!voice.apply_browser(lookup));
    assert_eq!(voice.segments[1..8], without.segments[..]);
}

#[test]
fn speech_that_ends_before_the_answer_waits_for_it() {
    let mut v = VoiceLinker::default();
    assert_eq!(v.observe(speech("tts-1", 400, "It is sunny in Paris.")), None);
    let answer = TextHashes::of("It is sunny in Paris. Highs of 21 degrees.");
    let joined = v.on_model_call(&call("turn-1", 100, "weather?", &answer));
    assert_eq!(joined, vec!["tts-1".to_owned()]);
    let voice = v.voice_of("turn-1", T + 100 * MS).unwrap();
    assert!(voice.transcription.is_none());
    assert_eq!(voice.t0_unix_ns, T + 100 * MS);
    let kinds: Vec<_> = voice.segments.iter().map(|s| s.kind).collect();
    use VoiceSegmentKind::*;
    assert_eq!(kinds, vec![FirstToken, ToSpeech, SpeechFirstByte, LeadingSilence]);
}

#[test]
fn trace_and_header_links_win_over_text() {
    let mut v = VoiceLinker::default();
    let mut stt = transcription("stt", 0, "something else entirely");
    stt.traced = true;
    stt.trace_id = "app-trace".into();
    v.observe(stt);
    let answer = TextHashes::of("Fine.");
    let mut c = call("turn-1", 350, "What is the weather?", &answer);
    c.traced = true;
    c.trace_id = "app-trace";
    assert_eq!(v.on_model_call(&c), vec!["stt".to_owned()]);
    let mut tts = speech("tts", 900, "Words the answer never had.");
    tts.turn_header = Some("t-42".into());
    assert_eq!(v.observe(tts.clone()), None, "no turn has that header yet");
    let mut c2 = call("turn-2", 1_000, "next question", &answer);
    c2.turn_header = Some("t-42");
    assert_eq!(v.on_model_call(&c2), vec!["tts".to_owned()]);
    assert_eq!(v.voice_of("turn-1", T).unwrap().transcription.unwrap().link, VoiceLink::TraceId);
    assert_eq!(v.voice_of("turn-2", T).unwrap().speech[0].link, VoiceLink::Header);
}

#[test]
fn unrelated_requests_never_link_and_waiting_is_bounded() {
    let mut v = VoiceLinker::default();
    for i in 0..1_000 {
        v.observe(transcription(&format!("stt-{i}"), i, &format!("question number {i}")));
        v.observe(speech(&format!("tts-{i}"), i, &format!("answer number {i}")));
    }
    assert!(v.pending_transcriptions.len() <= MAX_PENDING && v.pending_speech.len() <= MAX_PENDING);
    assert_eq!(v.counters().transcriptions_unlinked, 1_000 - MAX_PENDING as u64);
    let answer = TextHashes::of("Nothing anyone asked for.");
    assert!(v.on_model_call(&call("turn", 2_000, "a question nobody transcribed", &answer)).is_empty());
    assert_eq!(v.voice_of("turn", T), None);
    // Two minutes later the waiting ones are gone, and counted.
    v.on_model_call(&call("late", 200_000, "x", &answer));
    assert!(v.pending_transcriptions.is_empty() && v.pending_speech.is_empty());
    assert_eq!(v.counters().transcriptions_unlinked, 1_000);
    // Turns are bounded too, and so are the lookups that name them.
    for i in 0..(MAX_TURNS + 10) {
        let (id, trace) = (format!("t{i}"), format!("trace-{i}"));
        let mut c = call(&id, 300_000 + i as u64, "x", &answer);
        c.traced = true;
        c.trace_id = &trace;
        c.turn_header = Some(&trace);
        v.on_model_call(&c);
    }
    assert!(v.turns.len() <= MAX_TURNS);
    assert!(v.by_trace.len() <= MAX_TURNS && v.by_header.len() <= MAX_TURNS, "{}", v.by_trace.len());
}
