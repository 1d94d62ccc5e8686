//! What one voice request contributes to its turn, read from its record.

use serde::{Deserialize, Serialize};
use tokentap_analysis::conversation::TextHashes;
use tokentap_analysis::{SPEECH_TO_TEXT, TEXT_TO_SPEECH};

use super::super::step::TurnHeaders;
use crate::Record;

/// How a voice request was joined to its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VoiceLink {
    TraceId,
    Header,
    /// The transcript is the model call's last user message.
    Transcript,
    /// The speech input is the answer, or made of its sentences.
    AnswerText,
}

/// What a voice request contributes, in Unix nanoseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct VoiceRequest {
    pub request_id: String,
    pub trace_id: String,
    /// The client sent a `traceparent` (the trace id is then the app's, shared by its requests).
    pub traced: bool,
    pub turn_header: Option<String>,
    pub model: Option<String>,
    pub t0_unix_ns: u64,
    pub kind: VoiceKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum VoiceKind {
    Transcription {
        upload_end_unix_ns: Option<u64>,
        first_delta_unix_ns: Option<u64>,
        done_unix_ns: Option<u64>,
        upload_audio_ms: Option<f64>,
        transcript_hash: Option<u64>,
    },
    Speech {
        first_audio_unix_ns: Option<u64>,
        first_audible_unix_ns: Option<u64>,
        leading_silence_ms: Option<f64>,
        audio_ms: Option<f64>,
        real_time_factor: Option<f64>,
        underruns: Option<u32>,
        starved_ms: Option<f64>,
        input_hashes: Option<TextHashes>,
    },
}

fn at(t0: u64, ms: Option<f64>) -> Option<u64> {
    ms.filter(|v| v.is_finite() && *v >= 0.0).map(|v| t0.saturating_add((v * 1e6) as u64))
}

impl VoiceRequest {
    /// The voice facts of a record: speech-to-text and text-to-speech requests that succeeded.
    pub fn from_record(record: &Record, headers: &TurnHeaders) -> Option<VoiceRequest> {
        if record.outcome != crate::Outcome::Ok || record.analysis_shed {
            return None;
        }
        let t0 = record.timeline.t0_unix_ns;
        let kind = match record.request.operation.as_deref() {
            Some(SPEECH_TO_TEXT) => {
                let t = record.transcription.as_ref()?;
                VoiceKind::Transcription {
                    upload_end_unix_ns: record.timeline.t_upstream_sent_ns.map(|ns| t0.saturating_add(ns)),
                    first_delta_unix_ns: at(t0, t.time_to_first_delta_ms),
                    done_unix_ns: at(t0, t.transcript_done_ms),
                    upload_audio_ms: record
                        .request
                        .transcription
                        .as_ref()
                        .and_then(|r| r.upload.as_ref())
                        .and_then(|u| u.duration_ms),
                    transcript_hash: t.transcript_hash,
                }
            }
            Some(TEXT_TO_SPEECH) => {
                let s = record.speech.as_ref()?;
                VoiceKind::Speech {
                    first_audio_unix_ns: at(t0, s.time_to_first_audio_ms),
                    first_audible_unix_ns: at(t0, s.time_to_first_audible_ms),
                    leading_silence_ms: s.leading_silence_ms,
                    audio_ms: s.audio_ms,
                    real_time_factor: s.real_time_factor,
                    underruns: s.predicted.map(|p| p.underruns),
                    starved_ms: s.predicted.map(|p| p.starved_ms),
                    input_hashes: record.request.speech_input_hashes.clone(),
                }
            }
            _ => return None,
        };
        let turn_header = super::super::step::header_value(record, &headers.turn).map(str::to_owned);
        Some(VoiceRequest {
            request_id: record.request_id.clone(),
            trace_id: record.trace_id.clone(),
            traced: record.parent_span_id.is_some(),
            turn_header,
            model: record.conditions.model.clone().or_else(|| record.request.model.clone()),
            t0_unix_ns: t0,
            kind,
        })
    }
}
