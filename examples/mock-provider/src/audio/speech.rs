//! Text to speech (`POST /v1/audio/speech`): the JSON request, how long the answer speaks, and
//! the audio as raw bytes (`pcm`, or `wav` with a streaming header) or as SSE
//! `speech.audio.delta` events with base64 audio, then `speech.audio.done` with usage.
//!
//! The audio is [`SpeechSignal`]: `x-mock-tts-silence-ms` of zeros (default 200), then a tone
//! lasting `x-mock-tts-audio-ms`, or 60 ms per character of `input` (at `speed` 1) within
//! 200 ms..30 s. mp3, opus, aac and flac are refused rather than faked.

use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http::HeaderMap;
use serde_json::{json, Value};

use super::error::AudioRequestError;
use super::pacing::{Delivery, SpeechPacing};
use super::signal::{frames_in, SpeechSignal};
use super::wav::streaming_header;
use crate::scenario::{parse_header, InvalidMockHeader};
use crate::wire::sse_data;

/// OpenAI's limit on `input`.
const MAX_INPUT_CHARS: usize = 4096;
/// Speech per character of input at speed 1.
const SPEECH_PER_CHAR: Duration = Duration::from_millis(60);
const SHORTEST_ESTIMATE: Duration = Duration::from_millis(200);
/// The longest speech and the longest leading silence the mock renders.
const LONGEST: Duration = Duration::from_secs(30);
/// Audio per output token in the SSE usage.
const AUDIO_PER_OUTPUT_TOKEN_MS: u64 = 20;

/// The audio container the request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SpeechAudio {
    /// Headerless PCM.
    Pcm,
    /// A streaming WAV header, then PCM.
    Wav,
}

/// The parts of a speech request the answer depends on.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SpeechRequest {
    pub(crate) model: String,
    pub(crate) input: String,
    pub(crate) audio: SpeechAudio,
    /// `stream_format: "sse"`.
    pub(crate) sse: bool,
    pub(crate) speed: f64,
}

impl SpeechRequest {
    pub(crate) fn parse(body: &[u8]) -> Result<SpeechRequest, AudioRequestError> {
        let json: Value = serde_json::from_slice(body)?;
        let text = |name: &'static str| -> Result<Option<&str>, AudioRequestError> {
            match json.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.as_str())),
                Some(other) => Err(AudioRequestError::invalid(name, format!("expected a string, got {other}"))),
            }
        };
        let model = text("model")?.filter(|m| !m.is_empty()).ok_or(AudioRequestError::Missing { param: "model" })?;
        let input =
            text("input")?.filter(|i| !i.trim().is_empty()).ok_or(AudioRequestError::Missing { param: "input" })?;
        if input.chars().count() > MAX_INPUT_CHARS {
            return Err(AudioRequestError::invalid("input", format!("longer than {MAX_INPUT_CHARS} characters")));
        }
        // A built-in voice by name, or a custom voice as `{"id": "voice_…"}`.
        let voice = match json.get("voice") {
            Some(Value::String(name)) => !name.trim().is_empty(),
            Some(Value::Object(custom)) => custom.get("id").and_then(Value::as_str).is_some_and(|id| !id.is_empty()),
            _ => false,
        };
        if !voice {
            return Err(AudioRequestError::Missing { param: "voice" });
        }
        let audio = match text("response_format")?.unwrap_or("mp3") {
            "pcm" => SpeechAudio::Pcm,
            "wav" => SpeechAudio::Wav,
            "mp3" | "opus" | "aac" | "flac" => return Err(AudioRequestError::EncodedAudio),
            other => {
                return Err(AudioRequestError::invalid(
                    "response_format",
                    format!("{other:?}; supported values are mp3, opus, aac, flac, wav and pcm"),
                ))
            }
        };
        let sse = match text("stream_format")?.unwrap_or("audio") {
            "audio" => false,
            "sse" => true,
            other => {
                return Err(AudioRequestError::invalid("stream_format", format!("{other:?}; expected audio or sse")))
            }
        };
        let speed = match json.get("speed") {
            None | Some(Value::Null) => 1.0,
            Some(value) => value
                .as_f64()
                .filter(|s| (0.25..=4.0).contains(s))
                .ok_or_else(|| AudioRequestError::invalid("speed", format!("{value}; expected 0.25 to 4.0")))?,
        };
        Ok(SpeechRequest { model: model.to_owned(), input: input.to_owned(), audio, sse, speed })
    }

    /// Speech length when `x-mock-tts-audio-ms` does not say: 60 ms a character at speed 1.
    fn estimated_speech(&self) -> Duration {
        let chars = u32::try_from(self.input.chars().count()).unwrap_or(u32::MAX);
        SPEECH_PER_CHAR.saturating_mul(chars).div_f64(self.speed).clamp(SHORTEST_ESTIMATE, LONGEST)
    }
}

/// The signal of one answer, from the request and the `x-mock-tts-*` headers.
pub(crate) fn signal(request: &SpeechRequest, headers: &HeaderMap) -> Result<SpeechSignal, InvalidMockHeader> {
    let silence =
        parse_header(headers, "x-mock-tts-silence-ms")?.map_or(Duration::from_millis(200), Duration::from_millis);
    let speech =
        parse_header(headers, "x-mock-tts-audio-ms")?.map_or_else(|| request.estimated_speech(), Duration::from_millis);
    Ok(SpeechSignal::new(silence.min(LONGEST), speech.min(LONGEST)))
}

/// The answer: chunks of `pacing.chunk` of audio each, raw or as SSE events.
pub(crate) fn delivery(request: &SpeechRequest, signal: &SpeechSignal, pacing: &SpeechPacing) -> Delivery {
    let chunk_frames = frames_in(pacing.chunk).max(1);
    let mut chunks: Vec<Vec<u8>> = (0..signal.frames().div_ceil(chunk_frames))
        .map(|k| signal.pcm(k * chunk_frames..(k + 1) * chunk_frames))
        .collect();
    if request.audio == SpeechAudio::Wav {
        let header = streaming_header(SpeechSignal::LAYOUT);
        match chunks.first_mut() {
            Some(first) => {
                let mut with_header = header.to_vec();
                with_header.extend_from_slice(first);
                *first = with_header;
            }
            None => chunks.push(header.to_vec()),
        }
    }
    if !request.sse {
        let content_type = match request.audio {
            // Deliberately generic, as real servers often send it: the request says what it is.
            SpeechAudio::Pcm => "application/octet-stream",
            SpeechAudio::Wav => "audio/wav",
        };
        return Delivery::Stream { content_type, chunks: chunks.into_iter().map(Bytes::from).collect(), finish: None };
    }
    let engine = base64::engine::general_purpose::STANDARD;
    let chunks = chunks
        .iter()
        .map(|audio| sse_data(&json!({"type": "speech.audio.delta", "audio": engine.encode(audio)})))
        .collect();
    let input_tokens = request.input.split_whitespace().count() as u64;
    let audio_ms = signal.duration().as_millis() as u64;
    let output_tokens = audio_ms.div_ceil(AUDIO_PER_OUTPUT_TOKEN_MS);
    let done = json!({"type": "speech.audio.done", "usage": {"input_tokens": input_tokens,
        "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens}});
    Delivery::Stream { content_type: "text/event-stream", chunks, finish: Some(sse_data(&done)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audio::wav::{WavFile, HEADER_BYTES};
    use crate::formats::testing::{json as parse_json, parse_sse};

    fn request(body: Value) -> Result<SpeechRequest, AudioRequestError> {
        SpeechRequest::parse(body.to_string().as_bytes())
    }

    fn pcm_request() -> SpeechRequest {
        request(json!({"model": "gpt-4o-mini-tts", "input": "It is sunny in Paris today.", "voice": "alloy",
            "response_format": "pcm"}))
        .unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (http::HeaderName::from_static(k), v.parse().unwrap())).collect()
    }

    fn stream(delivery: Delivery) -> (&'static str, Vec<Bytes>, Option<Bytes>) {
        match delivery {
            Delivery::Stream { content_type, chunks, finish } => (content_type, chunks, finish),
            other => panic!("not a stream: {other:?}"),
        }
    }

    #[test]
    fn speech_length_from_the_input_or_the_header() {
        let request = pcm_request();
        assert_eq!(request.input.len(), 27);
        let signal = signal(&request, &HeaderMap::new()).unwrap();
        assert_eq!(signal.duration(), Duration::from_millis(200 + 27 * 60));
        let fast = SpeechRequest { speed: 2.0, ..request.clone() };
        assert_eq!(super::signal(&fast, &HeaderMap::new()).unwrap().duration(), Duration::from_millis(200 + 27 * 30));
        let short = SpeechRequest { input: "Hi".into(), ..request.clone() };
        assert_eq!(super::signal(&short, &HeaderMap::new()).unwrap().duration(), Duration::from_millis(400));
        let long = SpeechRequest { input: "x".repeat(4000), ..request.clone() };
        assert_eq!(super::signal(&long, &HeaderMap::new()).unwrap().duration(), Duration::from_millis(30_200));
        let told = headers(&[("x-mock-tts-silence-ms", "50"), ("x-mock-tts-audio-ms", "0")]);
        assert_eq!(super::signal(&request, &told).unwrap().duration(), Duration::from_millis(50));
        assert!(super::signal(&request, &headers(&[("x-mock-tts-audio-ms", "long")])).is_err());
    }

    #[test]
    fn raw_pcm_in_chunks_of_the_asked_length() {
        let request = pcm_request();
        let signal = SpeechSignal::new(Duration::from_millis(200), Duration::from_millis(1050));
        let pacing = SpeechPacing { first: Duration::ZERO, chunk: Duration::from_millis(100), real_time_factor: 0.5 };
        let (content_type, chunks, finish) = stream(delivery(&request, &signal, &pacing));
        assert_eq!(content_type, "application/octet-stream");
        assert!(finish.is_none());
        assert_eq!(chunks.len(), 13, "1250 ms in 100 ms chunks");
        assert!(chunks[..12].iter().all(|c| c.len() == 4800));
        assert_eq!(chunks[12].len(), 2400);
        assert!(chunks[..2].iter().all(|c| c.iter().all(|b| *b == 0)), "200 ms of silence first");
        assert!(chunks[2][..2] != [0, 0], "then speech");
        let all: Vec<u8> = chunks.concat();
        assert_eq!(all, signal.pcm(0..signal.frames()));
    }

    #[test]
    fn wav_starts_with_a_streaming_header() {
        let request = SpeechRequest { audio: SpeechAudio::Wav, ..pcm_request() };
        let signal = SpeechSignal::new(Duration::from_millis(10), Duration::from_millis(200));
        let pacing = SpeechPacing { first: Duration::ZERO, chunk: Duration::from_millis(50), real_time_factor: 1.0 };
        let (content_type, chunks, _) = stream(delivery(&request, &signal, &pacing));
        assert_eq!(content_type, "audio/wav");
        assert_eq!(chunks.len(), 5);
        assert_eq!(chunks[0].len(), HEADER_BYTES + 2400);
        let file = chunks.concat();
        let wav = WavFile::read(&file).unwrap();
        assert_eq!(wav.layout, SpeechSignal::LAYOUT);
        assert_eq!(wav.duration(), Some(Duration::from_millis(210)));
        // No audio at all still sends the header.
        let empty = SpeechSignal::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(
            stream(delivery(&request, &empty, &pacing)).1,
            vec![Bytes::from(streaming_header(SpeechSignal::LAYOUT).to_vec())]
        );
    }

    #[test]
    fn sse_events_carry_base64_audio_then_usage() {
        let request = SpeechRequest { sse: true, ..pcm_request() };
        let signal = SpeechSignal::new(Duration::from_millis(200), Duration::from_millis(300));
        let pacing = SpeechPacing { first: Duration::ZERO, chunk: Duration::from_millis(100), real_time_factor: 0.5 };
        let (content_type, chunks, finish) = stream(delivery(&request, &signal, &pacing));
        assert_eq!(content_type, "text/event-stream");
        let mut audio = Vec::new();
        for chunk in &chunks {
            let event = parse_json(&parse_sse(chunk)[0].1);
            assert_eq!(event["type"], "speech.audio.delta");
            audio.extend(base64::engine::general_purpose::STANDARD.decode(event["audio"].as_str().unwrap()).unwrap());
        }
        assert_eq!(audio, signal.pcm(0..signal.frames()));
        let done = parse_json(&parse_sse(&finish.unwrap())[0].1);
        assert_eq!(
            done,
            json!({"type": "speech.audio.done", "usage": {"input_tokens": 6, "output_tokens": 25, "total_tokens": 31}})
        );
    }

    #[test]
    fn refuses_what_it_cannot_say() {
        let param = |body: Value| request(body).unwrap_err().param();
        let base = json!({"model": "tts-1", "input": "Hello", "voice": "alloy", "response_format": "wav"});
        let with = |key: &str, value: Value| {
            let mut body = base.clone();
            body[key] = value;
            body
        };
        assert!(request(base.clone()).is_ok());
        assert!(request(with("voice", json!({"id": "voice_123"}))).is_ok());
        assert_eq!(param(with("input", json!(""))), Some("input"));
        assert_eq!(param(with("input", Value::Null)), Some("input"));
        assert_eq!(param(with("input", json!(5))), Some("input"));
        assert_eq!(param(with("input", json!("x".repeat(4097)))), Some("input"));
        assert_eq!(param(with("voice", json!(" "))), Some("voice"));
        assert_eq!(param(with("voice", json!({}))), Some("voice"));
        assert_eq!(param(with("model", json!(""))), Some("model"));
        assert_eq!(param(with("speed", json!(5))), Some("speed"));
        assert_eq!(param(with("stream_format", json!("chunks"))), Some("stream_format"));
        assert_eq!(param(with("response_format", json!("ogg"))), Some("response_format"));
        for encoded in ["mp3", "opus", "aac", "flac"] {
            let error = request(with("response_format", json!(encoded))).unwrap_err();
            assert!(matches!(error, AudioRequestError::EncodedAudio), "{encoded}");
        }
        let mut no_format = base.clone();
        no_format.as_object_mut().unwrap().remove("response_format");
        assert!(matches!(request(no_format).unwrap_err(), AudioRequestError::EncodedAudio), "mp3 is the default");
        assert!(matches!(SpeechRequest::parse(b"{not json").unwrap_err(), AudioRequestError::Json(_)));
    }
}
