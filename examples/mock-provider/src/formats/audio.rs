//! OpenAI `/v1/audio/speech`: a binary byte stream (`audio/mpeg`, or `audio/wav` etc. by
//! `response_format`), one chunk per content event. The bytes are seeded noise behind a plausible
//! header: good enough to time "first audio byte", not to play.

use bytes::Bytes;
use http::StatusCode;
use serde_json::Value;

use super::{openai_error_body, WireFormat};
use crate::completion::Completion;
use crate::random::SplitMix64;
use crate::wire::{EventKind, WireEvent};

pub(crate) struct AudioSpeech;

/// Bytes per audio chunk unless `x-mock-event-bytes` says otherwise.
const DEFAULT_CHUNK_BYTES: usize = 1024;

fn content_type(format: Option<&str>) -> &'static str {
    match format {
        Some("wav") => "audio/wav",
        Some("pcm") => "audio/pcm",
        Some("opus") => "audio/opus",
        Some("aac") => "audio/aac",
        Some("flac") => "audio/flac",
        _ => "audio/mpeg",
    }
}

/// A streaming WAV header (sizes unknown → 0xFFFFFFFF), 24 kHz mono 16-bit like OpenAI's output.
fn wav_header() -> Vec<u8> {
    let mut h = Vec::with_capacity(44);
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&u32::MAX.to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&1u16.to_le_bytes()); // PCM
    h.extend_from_slice(&1u16.to_le_bytes()); // mono
    h.extend_from_slice(&24_000u32.to_le_bytes());
    h.extend_from_slice(&48_000u32.to_le_bytes()); // byte rate
    h.extend_from_slice(&2u16.to_le_bytes()); // block align
    h.extend_from_slice(&16u16.to_le_bytes()); // bits per sample
    h.extend_from_slice(b"data");
    h.extend_from_slice(&u32::MAX.to_le_bytes());
    h
}

impl WireFormat for AudioSpeech {
    fn stream_content_type(&self, c: &Completion) -> &'static str {
        content_type(c.audio_format.as_deref())
    }

    fn stream_events(&self, c: &Completion) -> Vec<WireEvent> {
        let size = c.event_bytes.unwrap_or(DEFAULT_CHUNK_BYTES).max(4);
        let mut rng = SplitMix64::new(c.created);
        let wav = c.audio_format.as_deref() == Some("wav");
        (0..c.answer_chunks.len().max(1))
            .map(|i| {
                let mut chunk = Vec::with_capacity(size);
                if i == 0 && wav {
                    chunk.extend(wav_header());
                } else if !wav && c.audio_format.as_deref().is_none_or(|f| f == "mp3") {
                    chunk.extend_from_slice(&[0xFF, 0xF3, 0x84, 0xC4]); // an MPEG-2 layer III frame header
                }
                while chunk.len() < size {
                    chunk.extend_from_slice(&rng.next_u64().to_le_bytes());
                }
                chunk.truncate(size.max(if i == 0 && wav { 44 } else { 0 }));
                WireEvent::new(EventKind::Content, Bytes::from(chunk))
            })
            .collect()
    }

    fn midstream_error(&self, _: &Completion, _: usize) -> Option<Bytes> {
        None
    }

    fn heartbeat(&self) -> Option<Bytes> {
        None
    }

    fn full_body(&self, _: &Completion) -> Value {
        // Speech always streams; the server never asks for a JSON body here.
        Value::Null
    }

    fn error_body(&self, status: StatusCode, message: &str) -> Value {
        openai_error_body(status, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::testing::completion as test_completion;

    #[test]
    fn chunks_have_requested_size_and_wav_header() {
        let mut c = test_completion(0, 5, false);
        c.audio_format = Some("wav".into());
        c.event_bytes = Some(100);
        let events = AudioSpeech.stream_events(&c);
        assert_eq!(events.len(), 5);
        assert!(events.iter().all(|e| e.bytes.len() == 100));
        assert_eq!(&events[0].bytes[..4], b"RIFF");
        assert_eq!(AudioSpeech.stream_content_type(&c), "audio/wav");
    }
}
