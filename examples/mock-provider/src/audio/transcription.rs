//! Speech to text (`POST /v1/audio/transcriptions`, `/v1/audio/translations`): the form fields,
//! how long the uploaded audio plays, and the answer in each `response_format` or as the SSE
//! stream `transcript.text.delta` × words, then `transcript.text.done`.
//!
//! The transcript is the `x-mock-transcript` header, or [`DEFAULT_TRANSCRIPT`]. `whisper-1` bills
//! by duration and ignores `stream`; the other models (`gpt-4o-transcribe`, …) bill tokens and
//! stream when asked.

use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::{json, Value};

use super::error::AudioRequestError;
use super::multipart::FormPart;
use super::pacing::Delivery;
use super::wav::WavFile;
use crate::endpoint::AudioTask;
use crate::scenario::InvalidMockHeader;
use crate::wire::sse_data;

/// What the mock hears when `x-mock-transcript` does not say.
pub(crate) const DEFAULT_TRANSCRIPT: &str = "What is the weather in Paris today?";

/// Bytes per second assumed for an upload that is not a readable WAV file (about 128 kbit/s).
const ESTIMATED_BYTES_PER_SECOND: u64 = 16_000;

/// Audio tokens per second of input, for the token-billed models (one per 100 ms).
const AUDIO_TOKENS_PER_SECOND: u64 = 10;

/// The model that bills by duration, answers `verbose_json` with segments, and never streams.
const WHISPER: &str = "whisper-1";

/// `response_format` of a transcription.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TranscriptFormat {
    Json,
    Text,
    VerboseJson,
    Srt,
    Vtt,
}

impl TranscriptFormat {
    fn parse(value: &str) -> Option<TranscriptFormat> {
        Some(match value {
            "json" => TranscriptFormat::Json,
            "text" => TranscriptFormat::Text,
            "verbose_json" => TranscriptFormat::VerboseJson,
            "srt" => TranscriptFormat::Srt,
            "vtt" => TranscriptFormat::Vtt,
            _ => return None,
        })
    }
}

/// The parts of a transcription form the answer depends on.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TranscriptionRequest {
    pub(crate) task: AudioTask,
    pub(crate) model: String,
    /// Asked for and honoured (never for `whisper-1`).
    pub(crate) stream: bool,
    pub(crate) format: TranscriptFormat,
    pub(crate) language: Option<String>,
    pub(crate) prompt: Option<String>,
    /// How long the uploaded audio plays.
    pub(crate) audio: Duration,
}

impl TranscriptionRequest {
    pub(crate) fn from_form(task: AudioTask, parts: &[FormPart]) -> Result<TranscriptionRequest, AudioRequestError> {
        let field = |name: &'static str| -> Result<Option<&str>, AudioRequestError> {
            match parts.iter().find(|part| part.name == name) {
                None => Ok(None),
                Some(part) => part
                    .text()
                    .map(|text| Some(text.trim()))
                    .ok_or_else(|| AudioRequestError::invalid(name, "the value is not UTF-8 text")),
            }
        };
        let file = parts
            .iter()
            .find(|part| part.name == "file")
            .filter(|part| !part.body.is_empty())
            .ok_or(AudioRequestError::Missing { param: "file" })?;
        let model = field("model")?.filter(|m| !m.is_empty()).ok_or(AudioRequestError::Missing { param: "model" })?;
        let stream = match field("stream")? {
            None | Some("" | "false" | "False" | "0") => false,
            Some("true" | "True" | "1") => true,
            Some(other) => {
                return Err(AudioRequestError::invalid("stream", format!("expected true or false, got {other:?}")))
            }
        };
        let format = match field("response_format")? {
            None | Some("") => TranscriptFormat::Json,
            Some(value) => TranscriptFormat::parse(value).ok_or_else(|| {
                AudioRequestError::invalid(
                    "response_format",
                    format!("{value:?}; supported values are json, text, srt, verbose_json and vtt"),
                )
            })?,
        };
        let owned = |value: Option<&str>| value.filter(|v| !v.is_empty()).map(str::to_owned);
        Ok(TranscriptionRequest {
            task,
            stream: stream && model != WHISPER,
            model: model.to_owned(),
            format,
            language: owned(field("language")?),
            prompt: owned(field("prompt")?),
            audio: upload_duration(&file.body),
        })
    }

    fn billed_by_duration(&self) -> bool {
        self.model == WHISPER || self.format == TranscriptFormat::VerboseJson
    }
}

/// Play time of an uploaded file: from its header when it is WAV, else from its size.
pub(crate) fn upload_duration(file: &[u8]) -> Duration {
    WavFile::read(file).and_then(|wav| wav.duration()).unwrap_or_else(|| {
        Duration::from_micros(u64::try_from(file.len()).unwrap_or(u64::MAX) * 1_000_000 / ESTIMATED_BYTES_PER_SECOND)
    })
}

/// The text the mock "hears": `x-mock-transcript` (UTF-8), or [`DEFAULT_TRANSCRIPT`].
pub(crate) fn transcript_text(headers: &HeaderMap) -> Result<String, InvalidMockHeader> {
    match headers.get("x-mock-transcript") {
        None => Ok(DEFAULT_TRANSCRIPT.to_owned()),
        Some(value) => String::from_utf8(value.as_bytes().to_vec()).map(|text| text.trim().to_owned()).map_err(|_| {
            InvalidMockHeader {
                name: "x-mock-transcript",
                value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
            }
        }),
    }
}

/// The text cut into words, each with the spaces before it, so that the pieces join to the text.
pub(crate) fn words(text: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut start = 0;
    let mut in_word = false;
    for (i, c) in text.char_indices() {
        let space = c.is_whitespace();
        if space && in_word {
            words.push(&text[start..i]);
            start = i;
        }
        in_word = !space;
    }
    if start < text.len() {
        words.push(&text[start..]);
    }
    words
}

/// A transcript of one request.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Transcription<'a> {
    pub(crate) request: &'a TranscriptionRequest,
    pub(crate) text: &'a str,
}

impl Transcription<'_> {
    /// The answer, streamed or whole; a whole answer is sent when the stream would have finished.
    pub(crate) fn delivery(&self) -> Delivery {
        let words = words(self.text);
        if self.request.stream {
            let chunks = words
                .iter()
                .map(|word| sse_data(&json!({"type": "transcript.text.delta", "delta": word, "logprobs": []})))
                .collect();
            let done = json!({"type": "transcript.text.done", "text": self.text, "logprobs": [],
                "usage": self.token_usage(words.len())});
            return Delivery::Stream { content_type: "text/event-stream", chunks, finish: Some(sse_data(&done)) };
        }
        let (content_type, body) = match self.request.format {
            TranscriptFormat::Json => {
                let usage = if self.request.billed_by_duration() {
                    self.duration_usage()
                } else {
                    self.token_usage(words.len())
                };
                ("application/json", json!({"text": self.text, "usage": usage}).to_string())
            }
            TranscriptFormat::VerboseJson => ("application/json", self.verbose().to_string()),
            TranscriptFormat::Text => ("text/plain; charset=utf-8", format!("{}\n", self.text)),
            TranscriptFormat::Srt => ("text/plain; charset=utf-8", self.subtitles(false)),
            TranscriptFormat::Vtt => ("text/plain; charset=utf-8", self.subtitles(true)),
        };
        Delivery::Whole { content_type, body: Bytes::from(body), slots: words.len() }
    }

    fn seconds(&self) -> f64 {
        self.request.audio.as_secs_f64()
    }

    fn duration_usage(&self) -> Value {
        json!({"type": "duration", "seconds": self.request.audio.as_micros().div_ceil(1_000_000) as u64})
    }

    fn token_usage(&self, words: usize) -> Value {
        let audio_tokens = (self.request.audio.as_millis() as u64 * AUDIO_TOKENS_PER_SECOND).div_ceil(1000).max(1);
        let text_tokens = self.request.prompt.as_deref().map_or(0, words_in) as u64;
        let input_tokens = audio_tokens + text_tokens;
        let output_tokens = words as u64;
        json!({"type": "tokens", "input_tokens": input_tokens,
            "input_token_details": {"text_tokens": text_tokens, "audio_tokens": audio_tokens},
            "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens})
    }

    fn language(&self) -> &str {
        match self.request.task {
            AudioTask::Translate => "english",
            AudioTask::Transcribe => self.request.language.as_deref().map_or("english", language_name),
        }
    }

    fn verbose(&self) -> Value {
        let task = match self.request.task {
            AudioTask::Transcribe => "transcribe",
            AudioTask::Translate => "translate",
        };
        let seconds = self.seconds();
        json!({
            "task": task,
            "language": self.language(),
            "duration": seconds,
            "text": self.text,
            "segments": [{"id": 0, "seek": 0, "start": 0.0, "end": seconds, "text": self.text, "tokens": [],
                "temperature": 0.0, "avg_logprob": -0.2, "compression_ratio": 1.0, "no_speech_prob": 0.01}],
            "usage": self.duration_usage(),
        })
    }

    /// One cue over the whole audio, in SubRip or WebVTT.
    fn subtitles(&self, vtt: bool) -> String {
        let stamp = |at: Duration| {
            let ms = at.as_millis();
            let (h, m, s, f) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
            if vtt {
                format!("{h:02}:{m:02}:{s:02}.{f:03}")
            } else {
                format!("{h:02}:{m:02}:{s:02},{f:03}")
            }
        };
        let cue = format!("{} --> {}\n{}\n", stamp(Duration::ZERO), stamp(self.request.audio), self.text);
        if vtt {
            format!("WEBVTT\n\n{cue}\n")
        } else {
            format!("1\n{cue}\n")
        }
    }
}

fn words_in(text: &str) -> usize {
    text.split_whitespace().count()
}

/// Whisper's answer names the language; the request gives an ISO-639-1 code.
fn language_name(code: &str) -> &str {
    match code.to_ascii_lowercase().as_str() {
        "en" => "english",
        "fr" => "french",
        "de" => "german",
        "es" => "spanish",
        "it" => "italian",
        "pt" => "portuguese",
        "nl" => "dutch",
        "ja" => "japanese",
        "zh" => "chinese",
        "ru" => "russian",
        _ => code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audio::wav::tests::wav_file;
    use crate::audio::wav::PcmLayout;
    use crate::formats::testing::{json as parse_json, parse_sse};

    const MONO_16K: PcmLayout = PcmLayout { sample_rate_hz: 16_000, channels: 1, bits_per_sample: 16 };

    fn part(name: &str, value: &[u8]) -> FormPart {
        FormPart { name: name.into(), filename: None, content_type: None, body: Bytes::copy_from_slice(value) }
    }

    fn request(fields: &[(&str, &str)]) -> Result<TranscriptionRequest, AudioRequestError> {
        let mut parts = vec![part("file", &wav_file(MONO_16K, 0, 48_000))]; // 1.5 s
        parts.extend(fields.iter().map(|(name, value)| part(name, value.as_bytes())));
        TranscriptionRequest::from_form(AudioTask::Transcribe, &parts)
    }

    fn whole(request: &TranscriptionRequest) -> (&'static str, String, usize) {
        match (Transcription { request, text: DEFAULT_TRANSCRIPT }).delivery() {
            Delivery::Whole { content_type, body, slots } => {
                (content_type, String::from_utf8(body.to_vec()).unwrap(), slots)
            }
            other => panic!("not whole: {other:?}"),
        }
    }

    #[test]
    fn words_keep_their_leading_spaces() {
        assert_eq!(words("What is  the weather?"), vec!["What", " is", "  the", " weather?"]);
        assert_eq!(words(" lead"), vec![" lead"]);
        assert!(words("").is_empty());
        assert_eq!(words(DEFAULT_TRANSCRIPT).concat(), DEFAULT_TRANSCRIPT);
    }

    #[test]
    fn durations_from_wav_headers_or_sizes() {
        assert_eq!(upload_duration(&wav_file(MONO_16K, 32_000, 32_000)), Duration::from_secs(1));
        assert_eq!(upload_duration(&wav_file(MONO_16K, u32::MAX, 16_000)), Duration::from_millis(500));
        assert_eq!(upload_duration(&[0xFF; 8_000]), Duration::from_millis(500), "16 kB/s for other formats");
    }

    #[test]
    fn token_models_answer_text_and_token_usage() {
        let plain = request(&[("model", "gpt-4o-transcribe")]).unwrap();
        assert_eq!(plain.format, TranscriptFormat::Json);
        let (content_type, body, slots) = whole(&plain);
        assert_eq!((content_type, slots), ("application/json", 7));
        assert_eq!(
            parse_json(&body),
            json!({"text": DEFAULT_TRANSCRIPT, "usage": {"type": "tokens", "input_tokens": 15,
                "input_token_details": {"text_tokens": 0, "audio_tokens": 15}, "output_tokens": 7, "total_tokens": 22}})
        );
        let prompted = request(&[("model", "gpt-4o-mini-transcribe"), ("prompt", "Weather talk.")]).unwrap();
        assert_eq!(parse_json(&whole(&prompted).1)["usage"]["input_tokens"], 17);
    }

    #[test]
    fn whisper_bills_seconds_and_ignores_stream() {
        let whisper = request(&[("model", "whisper-1"), ("stream", "true")]).unwrap();
        assert!(!whisper.stream);
        assert_eq!(
            parse_json(&whole(&whisper).1),
            json!({"text": DEFAULT_TRANSCRIPT, "usage": {"type": "duration", "seconds": 2}})
        );
        let verbose =
            request(&[("model", "whisper-1"), ("response_format", "verbose_json"), ("language", "fr")]).unwrap();
        let body = parse_json(&whole(&verbose).1);
        assert_eq!((body["task"].as_str(), body["language"].as_str()), (Some("transcribe"), Some("french")));
        assert_eq!(body["duration"], 1.5);
        assert_eq!(body["segments"][0]["end"], 1.5);
        assert_eq!(body["segments"][0]["text"], DEFAULT_TRANSCRIPT);
        assert_eq!(body["usage"], json!({"type": "duration", "seconds": 2}));
        let translation = TranscriptionRequest { task: AudioTask::Translate, ..verbose };
        let body = parse_json(&whole(&translation).1);
        assert_eq!((body["task"].as_str(), body["language"].as_str()), (Some("translate"), Some("english")));
    }

    #[test]
    fn plain_text_and_subtitles() {
        let text = request(&[("model", "whisper-1"), ("response_format", "text")]).unwrap();
        assert_eq!(whole(&text), ("text/plain; charset=utf-8", format!("{DEFAULT_TRANSCRIPT}\n"), 7));
        let srt = request(&[("model", "whisper-1"), ("response_format", "srt")]).unwrap();
        assert_eq!(whole(&srt).1, format!("1\n00:00:00,000 --> 00:00:01,500\n{DEFAULT_TRANSCRIPT}\n\n"));
        let vtt = request(&[("model", "whisper-1"), ("response_format", "vtt")]).unwrap();
        assert_eq!(whole(&vtt).1, format!("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\n{DEFAULT_TRANSCRIPT}\n\n"));
    }

    #[test]
    fn streams_a_delta_per_word_then_done() {
        let streamed = request(&[("model", "gpt-4o-transcribe"), ("stream", "true")]).unwrap();
        let Delivery::Stream { content_type, chunks, finish } =
            (Transcription { request: &streamed, text: "It is sunny." }).delivery()
        else {
            panic!("not a stream");
        };
        assert_eq!(content_type, "text/event-stream");
        let deltas: Vec<Value> = chunks.iter().map(|c| parse_json(&parse_sse(c)[0].1)).collect();
        assert_eq!(deltas[1], json!({"type": "transcript.text.delta", "delta": " is", "logprobs": []}));
        assert_eq!(deltas.iter().map(|d| d["delta"].as_str().unwrap()).collect::<String>(), "It is sunny.");
        let done = parse_json(&parse_sse(&finish.unwrap())[0].1);
        assert_eq!(done["type"], "transcript.text.done");
        assert_eq!(done["text"], "It is sunny.");
        assert_eq!(done["usage"]["output_tokens"], 3);
        assert_eq!(done["usage"]["total_tokens"], 18);
    }

    #[test]
    fn refuses_what_openai_refuses() {
        let param = |result: Result<TranscriptionRequest, AudioRequestError>| result.unwrap_err().param();
        let no_file = TranscriptionRequest::from_form(AudioTask::Transcribe, &[part("model", b"whisper-1")]);
        assert_eq!(param(no_file), Some("file"));
        let empty_file =
            TranscriptionRequest::from_form(AudioTask::Transcribe, &[part("file", b""), part("model", b"m")]);
        assert_eq!(param(empty_file), Some("file"));
        assert_eq!(param(request(&[])), Some("model"));
        assert_eq!(param(request(&[("model", "m"), ("stream", "maybe")])), Some("stream"));
        assert_eq!(param(request(&[("model", "m"), ("response_format", "mp3")])), Some("response_format"));
        let not_text = TranscriptionRequest::from_form(
            AudioTask::Transcribe,
            &[part("file", b"abc"), part("model", b"m"), part("language", b"\xff")],
        );
        assert_eq!(param(not_text), Some("language"));
    }

    #[test]
    fn transcript_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(transcript_text(&headers).unwrap(), DEFAULT_TRANSCRIPT);
        headers.insert("x-mock-transcript", http::HeaderValue::from_bytes("Grüß dich".as_bytes()).unwrap());
        assert_eq!(transcript_text(&headers).unwrap(), "Grüß dich");
        headers.insert("x-mock-transcript", http::HeaderValue::from_bytes(b"\xff\xfe").unwrap());
        assert!(transcript_text(&headers).is_err());
    }
}
