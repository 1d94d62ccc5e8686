//! `tokentap explain` for the voice requests of HTTP voice apps: a text-to-speech request (when
//! its first audio byte and first audible sample arrived, and whether a player would have run
//! dry) and a speech-to-text request (the upload, the first transcript delta, the transcript).

use std::fmt::Write as _;

use tokentap_analysis::audio::{SpeechAnalysis, TranscriptionAnalysis};
use tokentap_record::Record;

use crate::markdown::number;

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_owned(), number)
}

/// Appends a speech (text-to-speech) request's explanation to `out`.
pub(super) fn explain_speech(out: &mut String, s: &SpeechAnalysis) {
    let w = out;
    let _ = writeln!(w, "speech (text to speech), ms since the request started:");
    let _ = writeln!(
        w,
        "  first audio byte {}, first audible sample arrived {} (leading silence {} ms), earliest heard {}",
        ms(s.time_to_first_audio_ms),
        ms(s.first_audible_arrival_ms),
        ms(s.leading_silence_ms),
        ms(s.time_to_first_audible_ms)
    );
    let _ = writeln!(
        w,
        "  {} ms of audio in {} bytes{}",
        ms(s.audio_ms),
        s.audio_bytes,
        s.real_time_factor
            .map_or(String::new(), |f| format!(", real-time factor {f:.2} (below 1: faster than played)"))
    );
    let look = match (&s.predicted, s.time_to_first_audio_ms, s.leading_silence_ms) {
        (Some(p), _, _) if p.underruns > 0 => format!(
            "a player started at the first audible sample runs dry {} times ({} ms starved): the audio arrives slower than it plays",
            p.underruns,
            number(p.starved_ms)
        ),
        (_, Some(first), Some(silence)) if silence > first => format!(
            "the leading silence ({} ms) is longer than the wait for the first byte ({} ms): the voice starts late in the audio itself",
            number(silence),
            number(first)
        ),
        (_, Some(first), _) => {
            format!("the wait for the first audio byte ({} ms): the speech model's start", number(first))
        }
        _ => "no audio arrived: see the status and the error".to_owned(),
    };
    let _ = writeln!(w, "\nlook at: {look}");
}

/// Appends a transcription (speech to text) request's explanation to `out`.
pub(super) fn explain_transcription(out: &mut String, record: &Record, t: &TranscriptionAnalysis) {
    let w = out;
    let upload_ms = record.timeline.t_upstream_sent_ns.map(|ns| ns as f64 / 1e6);
    let _ = writeln!(w, "transcription (speech to text), ms since the request started:");
    let _ = writeln!(
        w,
        "  upload sent {}, first transcript delta {}, transcript done {}; {} of audio{}",
        ms(upload_ms),
        ms(t.time_to_first_delta_ms),
        ms(t.transcript_done_ms),
        t.audio_duration_ms.map_or("? ms".to_owned(), |a| format!("{} ms", number(a))),
        if t.streamed { ", streamed" } else { ", one answer" }
    );
    if let (Some(up), Some(done)) = (upload_ms, t.transcript_done_ms) {
        let _ = writeln!(w, "\nlook at: the server's transcription after the upload ({} ms)", number(done - up));
    }
}
