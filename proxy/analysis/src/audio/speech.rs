//! Text-to-speech responses (`POST /v1/audio/speech`): raw audio bytes (`stream_format` `audio`)
//! or SSE `speech.audio.delta` events with base64 audio (`stream_format` `sse`). From the bytes and
//! their arrival times: first audio byte, first audible sample, audio received over time, the
//! real-time factor and the underruns a player would have had.

use base64::Engine;
use serde::{Deserialize, Serialize};

use super::format::{AudioFormat, FormatSource, PcmSpec};
use super::mp3::{decode_onset, FrameScanner};
use super::onset::OnsetDetector;
use super::playout::{simulate, time_to_reach, Arrival, PredictedPlayout};
use super::wav::{parse_header, FramePower, WavParse, MAX_HEADER_BYTES};
use crate::analysis::{ms, ProviderUsage};
use crate::sse::{SseFramer, SseItem};

/// What the request and the response head say about the audio.
#[derive(Debug, Clone, Default)]
pub struct SpeechContext {
    pub response_content_type: Option<String>,
    /// The request's `response_format`.
    pub response_format: Option<String>,
}

/// How the audio travelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpeechFraming {
    /// The body is the audio file, streamed.
    Raw,
    /// SSE events carrying base64 audio.
    Sse,
}

/// Why the first audible sample is not known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnsetUnknown {
    /// The format is not decoded by tokentap (only the first byte is known).
    FormatNotDecoded,
    /// The audio never reached the onset level.
    SilentThroughout,
    /// A WAV header tokentap could not read, or a sample layout it does not decode.
    UnreadableHeader,
    /// No audio arrived.
    NoAudio,
    /// MP3 frames arrived but did not decode.
    DecodeFailed,
}

/// The record of one speech response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeechAnalysis {
    pub framing: SpeechFraming,
    pub format: AudioFormat,
    pub format_source: FormatSource,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pcm: Option<PcmSpec>,
    /// Audio payload bytes received (after base64 decoding for SSE; headers included for files).
    pub audio_bytes: u64,
    /// Arrival of the first audio payload byte (ms since t0).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_to_first_audio_ms: Option<f64>,
    /// Audio position of the first audible sample (the leading silence).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub leading_silence_ms: Option<f64>,
    /// Arrival of the bytes that hold the first audible sample.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub first_audible_arrival_ms: Option<f64>,
    /// When a player that starts at the first audio byte (and waits when dry) reaches the first
    /// audible sample: the earliest the listener can hear the answer.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_to_first_audible_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub onset_unknown: Option<OnsetUnknown>,
    /// Duration of the audio received.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub audio_ms: Option<f64>,
    /// Delivery time per second of audio after the first chunk: (last audio arrival − first audio
    /// arrival) / (audio duration − the first chunk's). Below 1: faster than real time.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub real_time_factor: Option<f64>,
    /// A player started at the first audible sample, with no buffer beyond what had arrived.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub predicted: Option<PredictedPlayout>,
    /// Audio received over time: `[ms since t0, audio ms received]`, at most 256 points.
    #[serde(default)]
    pub received: Vec<[f64; 2]>,
    /// `speech.audio.done` arrival (SSE).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub done_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub usage: Option<ProviderUsage>,
    /// SSE events that were not speech events (counted, never fatal).
    #[serde(default)]
    pub unknown_events: u64,
    /// SSE deltas whose base64 did not decode.
    #[serde(default)]
    pub bad_deltas: u64,
    #[serde(default)]
    pub errors: Vec<String>,
}

/// Most arrivals kept; beyond it the newest replace the last, so the end stays exact and the
/// middle coarsens.
const MAX_ARRIVALS: usize = 16_384;
const MAX_RECEIVED_POINTS: usize = 256;
const MAX_ERRORS: usize = 8;
const MAX_SSE_EVENT_BYTES: usize = 4 << 20;
/// MP3 bytes kept for decoding (about 17 minutes at 128 kbps); beyond, arrivals stop counting.
const MAX_MP3_BYTES: usize = 16 << 20;

#[derive(Debug)]
enum Decode {
    /// Waiting for the first bytes (signature, WAV header).
    Prefix(Vec<u8>),
    Pcm {
        spec: PcmSpec,
        power: FramePower,
        onset: OnsetDetector,
    },
    /// MP3 bytes kept (bounded) for decoding at the end; frames counted as they arrive.
    Mp3 {
        bytes: Vec<u8>,
        scanner: FrameScanner,
    },
    /// Counted, not decoded.
    Opaque,
}

/// Analyses one speech response as its chunks are replayed with their arrival times.
#[derive(Debug)]
pub struct SpeechAnalyzer {
    ctx: SpeechContext,
    framing: SpeechFraming,
    sse: Option<SseFramer>,
    format: Option<(AudioFormat, FormatSource)>,
    decode: Decode,
    header_problem: bool,
    audio_bytes: u64,
    frames: u64,
    first_audio_ns: Option<u64>,
    arrivals: Vec<Arrival>,
    done_ns: Option<u64>,
    usage: Option<ProviderUsage>,
    unknown_events: u64,
    bad_deltas: u64,
    errors: Vec<String>,
}

impl SpeechAnalyzer {
    pub fn new(ctx: SpeechContext) -> Self {
        let sse = ctx
            .response_content_type
            .as_deref()
            .and_then(|ct| ct.split(';').next())
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("text/event-stream"));
        Self {
            ctx,
            framing: if sse { SpeechFraming::Sse } else { SpeechFraming::Raw },
            sse: sse.then(|| SseFramer::new(MAX_SSE_EVENT_BYTES)),
            format: None,
            decode: Decode::Prefix(Vec::new()),
            header_problem: false,
            audio_bytes: 0,
            frames: 0,
            first_audio_ns: None,
            arrivals: Vec::new(),
            done_ns: None,
            usage: None,
            unknown_events: 0,
            bad_deltas: 0,
            errors: Vec::new(),
        }
    }

    /// One upstream body chunk and its arrival time (ns since t0).
    pub fn push_chunk(&mut self, bytes: &[u8], t_ns: u64) {
        if bytes.is_empty() {
            return;
        }
        match self.sse.take() {
            Some(mut framer) => {
                let mut payloads = Vec::new();
                framer.push(bytes, &mut |item| {
                    if let SseItem::Event(e) = item {
                        payloads.push(e.data.to_vec());
                    }
                });
                self.sse = Some(framer);
                for data in payloads {
                    self.sse_event(&data, t_ns);
                }
            }
            None => self.audio(bytes, t_ns),
        }
    }

    fn sse_event(&mut self, data: &[u8], t_ns: u64) {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
            self.unknown_events += 1;
            return;
        };
        match value.get("type").and_then(|t| t.as_str()) {
            Some("speech.audio.delta") => {
                let Some(b64) = value.get("audio").and_then(|a| a.as_str()) else {
                    self.bad_deltas += 1;
                    return;
                };
                match base64::engine::general_purpose::STANDARD.decode(b64) {
                    Ok(audio) => self.audio(&audio, t_ns),
                    Err(_) => self.bad_deltas += 1,
                }
            }
            Some("speech.audio.done") => {
                self.done_ns.get_or_insert(t_ns);
                if let Some(u) = value.get("usage") {
                    let n = |k: &str| u.get(k).and_then(|v| v.as_u64());
                    self.usage = Some(ProviderUsage {
                        input_tokens: n("input_tokens"),
                        output_tokens: n("output_tokens"),
                        total_tokens: n("total_tokens"),
                        ..ProviderUsage::default()
                    });
                }
            }
            Some("error") => self.error(&value),
            _ if value.get("error").is_some() => self.error(&value),
            _ => self.unknown_events += 1,
        }
    }

    fn error(&mut self, value: &serde_json::Value) {
        if self.errors.len() >= MAX_ERRORS {
            return;
        }
        let e = value.get("error").unwrap_or(value);
        let message = e.get("message").and_then(|m| m.as_str()).unwrap_or("error event");
        self.errors.push(message.chars().take(300).collect());
    }

    fn audio(&mut self, bytes: &[u8], t_ns: u64) {
        self.audio_bytes += bytes.len() as u64;
        self.first_audio_ns.get_or_insert(t_ns);
        let mut frames = 0;
        match &mut self.decode {
            Decode::Prefix(buf) => {
                buf.extend_from_slice(bytes);
                let buf = std::mem::take(buf);
                frames = self.settle(buf);
            }
            Decode::Pcm { power, onset, .. } => {
                frames = power.push(bytes, &mut |p| onset.push(p));
            }
            Decode::Mp3 { bytes: kept, scanner } => {
                if kept.len() + bytes.len() <= MAX_MP3_BYTES {
                    kept.extend_from_slice(bytes);
                    scanner.scan(kept);
                    frames = scanner.samples.saturating_sub(self.frames);
                }
            }
            Decode::Opaque => {}
        }
        self.frames += frames;
        self.arrive(t_ns);
    }

    /// Decides the format from the first bytes; returns the frames decoded from them.
    fn settle(&mut self, buf: Vec<u8>) -> u64 {
        if buf.len() < 12 {
            // Too few bytes to rule a signature in or out: wait for more (or the end).
            self.decode = Decode::Prefix(buf);
            return 0;
        }
        let (format, source) =
            AudioFormat::resolve(&buf, self.ctx.response_content_type.as_deref(), self.ctx.response_format.as_deref());
        self.format = Some((format, source));
        let (spec, data) = match format {
            AudioFormat::Pcm => (PcmSpec::from_content_type_params(self.ctx.response_content_type.as_deref()), 0),
            AudioFormat::Wav => match parse_header(&buf) {
                WavParse::NeedMore if buf.len() < MAX_HEADER_BYTES => {
                    self.decode = Decode::Prefix(buf);
                    return 0;
                }
                WavParse::Header(h) => (h.spec, h.data_offset),
                WavParse::NeedMore | WavParse::Invalid(_) => {
                    self.header_problem = true;
                    self.decode = Decode::Opaque;
                    return 0;
                }
            },
            AudioFormat::Mp3 => return self.start_mp3(buf),
            _ => {
                self.decode = Decode::Opaque;
                return 0;
            }
        };
        self.start_pcm(spec, &buf[data.min(buf.len())..])
    }

    /// Starts decoding PCM samples of `spec`; returns the frames in `samples`.
    fn start_pcm(&mut self, spec: PcmSpec, samples: &[u8]) -> u64 {
        if !spec.decodable() {
            self.header_problem = true;
            self.decode = Decode::Opaque;
            return 0;
        }
        let mut power = FramePower::new(spec);
        let mut onset = OnsetDetector::new(spec.sample_rate_hz);
        let frames = power.push(samples, &mut |p| onset.push(p));
        self.decode = Decode::Pcm { spec, power, onset };
        frames
    }

    fn arrive(&mut self, t_ns: u64) {
        let a = Arrival { t_ns, frames_total: self.frames };
        let full = self.arrivals.len() >= MAX_ARRIVALS;
        match self.arrivals.last_mut() {
            Some(last) if last.t_ns == t_ns || full => *last = a,
            _ => self.arrivals.push(a),
        }
    }

    pub fn finish(mut self) -> SpeechAnalysis {
        if let Decode::Prefix(buf) = &mut self.decode {
            let buf = std::mem::take(buf);
            if !buf.is_empty() {
                // The body ended before the format was settled: decide with what there is.
                let frames = self.force_settle(buf);
                self.frames += frames;
                if let Some(last) = self.arrivals.last_mut() {
                    last.frames_total = self.frames;
                }
            }
        }
        let (format, format_source) = self.format.unwrap_or_else(|| {
            AudioFormat::resolve(&[], self.ctx.response_content_type.as_deref(), self.ctx.response_format.as_deref())
        });
        let mut out = SpeechAnalysis {
            framing: self.framing,
            format,
            format_source,
            pcm: None,
            audio_bytes: self.audio_bytes,
            time_to_first_audio_ms: self.first_audio_ns.map(ms),
            leading_silence_ms: None,
            first_audible_arrival_ms: None,
            time_to_first_audible_ms: None,
            onset_unknown: None,
            audio_ms: None,
            real_time_factor: None,
            predicted: None,
            received: Vec::new(),
            done_ms: self.done_ns.map(ms),
            usage: self.usage,
            unknown_events: self.unknown_events,
            bad_deltas: self.bad_deltas,
            errors: self.errors,
        };
        let no_onset = |audio_bytes: u64, header_problem: bool| {
            if audio_bytes == 0 {
                OnsetUnknown::NoAudio
            } else if header_problem {
                OnsetUnknown::UnreadableHeader
            } else {
                OnsetUnknown::FormatNotDecoded
            }
        };
        // The sample rate, the onset (in the decoded audio) and the decoder's leading delay: the
        // arrivals count every decoded sample, the onset and durations leave the delay out.
        let (rate, onset, delay) = match std::mem::replace(&mut self.decode, Decode::Opaque) {
            Decode::Pcm { spec, mut onset, .. } => {
                out.pcm = Some(spec);
                (spec.sample_rate_hz, onset.finish(), 0)
            }
            Decode::Mp3 { bytes, scanner } => match (scanner.sample_rate_hz, decode_onset(bytes)) {
                (Some(rate), Some(decoded)) => {
                    let delay = scanner.leading_delay();
                    // The onset in the audio proper (a tone can start inside the delay only in
                    // theory: the delay is the encoder's own priming).
                    self.frames = self.frames.saturating_sub(scanner.trailing_padding());
                    (rate, decoded.onset.map(|o| o.saturating_sub(delay)), delay)
                }
                (Some(rate), None) => {
                    out.onset_unknown = Some(OnsetUnknown::DecodeFailed);
                    (rate, None, 0)
                }
                (None, _) => {
                    out.onset_unknown = Some(no_onset(self.audio_bytes, true));
                    return out;
                }
            },
            _ => {
                out.onset_unknown = Some(no_onset(self.audio_bytes, self.header_problem));
                return out;
            }
        };
        let frames_ms = |f: u64| f.saturating_sub(delay) as f64 * 1000.0 / f64::from(rate);
        out.audio_ms = Some(frames_ms(self.frames));
        out.received = thin(&self.arrivals, MAX_RECEIVED_POINTS)
            .into_iter()
            .map(|a| [ms(a.t_ns), frames_ms(a.frames_total)])
            .collect();
        // Delivery rate after the first chunk that carried audio.
        let first = self.arrivals.iter().find(|a| a.frames_total > 0);
        if let (Some(first), Some(last)) = (first, self.arrivals.last()) {
            let audio_after = frames_ms(last.frames_total) - frames_ms(first.frames_total);
            if audio_after > 0.0 {
                out.real_time_factor = Some(ms(last.t_ns - first.t_ns) / audio_after);
            }
        }
        match onset {
            None if out.onset_unknown.is_some() => {}
            None => {
                out.onset_unknown =
                    Some(if self.frames == 0 { OnsetUnknown::NoAudio } else { OnsetUnknown::SilentThroughout });
            }
            Some(decoded) => {
                out.leading_silence_ms = Some(decoded as f64 * 1000.0 / f64::from(rate));
                // Where the onset is among the samples the arrivals count.
                let frame = decoded + delay;
                let arrival = self.arrivals.iter().find(|a| a.frames_total > frame).copied();
                out.first_audible_arrival_ms = arrival.map(|a| ms(a.t_ns));
                if let Some(start) = self.first_audio_ns {
                    out.time_to_first_audible_ms = time_to_reach(&self.arrivals, rate, start, frame).map(ms);
                }
                if let Some(arrival) = arrival {
                    out.predicted = Some(simulate(&self.arrivals, rate, frame, arrival.t_ns));
                }
            }
        }
        out
    }

    fn start_mp3(&mut self, buf: Vec<u8>) -> u64 {
        let mut scanner = FrameScanner::default();
        scanner.scan(&buf);
        let frames = scanner.samples;
        self.decode = Decode::Mp3 { bytes: buf, scanner };
        frames
    }

    fn force_settle(&mut self, buf: Vec<u8>) -> u64 {
        let (format, source) =
            AudioFormat::resolve(&buf, self.ctx.response_content_type.as_deref(), self.ctx.response_format.as_deref());
        self.format = Some((format, source));
        if format == AudioFormat::Mp3 {
            return self.start_mp3(buf);
        }
        if format != AudioFormat::Pcm {
            if format == AudioFormat::Wav {
                self.header_problem = true;
            }
            self.decode = Decode::Opaque;
            return 0;
        }
        let spec = PcmSpec::from_content_type_params(self.ctx.response_content_type.as_deref());
        self.start_pcm(spec, &buf)
    }
}

/// At most `n` arrivals, evenly spaced, always with the last.
fn thin(arrivals: &[Arrival], n: usize) -> Vec<Arrival> {
    if arrivals.len() <= n {
        return arrivals.to_vec();
    }
    let step = arrivals.len().div_ceil(n - 1);
    let mut out: Vec<Arrival> = arrivals.iter().step_by(step).copied().collect();
    if let Some(&last) = arrivals.last() {
        if out.last() != Some(&last) {
            out.push(last);
        }
    }
    out
}
