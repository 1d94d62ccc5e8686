//! The streaming analyzer: fed every upstream body chunk with its arrival time, it frames,
//! classifies and times events as they complete, and produces a [`StreamAnalysis`] at the end.
//!
//! Work per chunk is framing plus one JSON parse per completed event; tokenization and percentiles
//! happen once, in [`StreamAnalyzer::finish`], so the per-chunk cost stays small and predictable.

use std::borrow::Cow;

use crate::analysis::{AnalysisFlags, StreamAnalysis};
use crate::classify::{Classifier, Frame, Out};
use crate::event::EventClass;
use crate::findings::Findings;
use crate::format::{
    dialect_from_route, framing_from_content_type, sniff_framing, Dialect, Framing, Sniff, StreamFormat,
};
use crate::metrics::{stall_summary, stream_metrics, MetricInputs};
use crate::ndjson::NdjsonFramer;
use crate::sse::{SseFramer, SseItem};
use crate::timeline::Timeline;

/// What the proxy knows about the exchange before the body flows.
#[derive(Debug, Clone, Default)]
pub struct StreamContext {
    pub request_path: String,
    /// "openai", "anthropic", "gemini", "ollama" or "generic", from the route configuration.
    pub provider_hint: Option<String>,
    pub response_content_type: Option<String>,
    pub response_status: Option<u16>,
}

/// Bounds that keep one analysis small whatever the upstream sends.
#[derive(Clone, Debug)]
pub struct AnalysisLimits {
    /// Largest SSE event / NDJSON line / JSON body buffered whole (default 1 MiB). Bigger ones are
    /// skipped and counted in `flags.oversized_events`; framing resumes at the next event.
    pub max_event_bytes: usize,
    /// Detail entries kept in `events` (default 20 000); the rest are counted in `events_truncated`.
    pub max_events_kept: usize,
    /// Content text kept for tokenization (default 8 MiB); beyond it `token_text_truncated` is set.
    pub max_token_text_bytes: usize,
    /// Minimum gap between content events that counts as a stall (default 1 s).
    pub stall_threshold_ns: u64,
}

impl Default for AnalysisLimits {
    fn default() -> Self {
        AnalysisLimits {
            max_event_bytes: 1 << 20,
            max_events_kept: 20_000,
            max_token_text_bytes: 8 << 20,
            stall_threshold_ns: 1_000_000_000,
        }
    }
}

/// Stamps known only when the exchange ends (nanoseconds since t0).
#[derive(Debug, Clone, Default)]
pub struct RequestTiming {
    pub t_upstream_headers_ns: Option<u64>,
    pub t_end_ns: Option<u64>,
    /// False when the body was cut short (upstream reset, client gone).
    pub body_complete: bool,
}

const SNIFF_PREFIX_BYTES: usize = 64 * 1024 + 16;

/// Bodies whose framing the headers did not settle are held back (a few bytes, bounded) until the
/// first bytes tell.
#[derive(Debug)]
enum Stage {
    Sniffing { pending: Vec<(Vec<u8>, u64)>, prefix: Vec<u8> },
    Sse(SseFramer),
    Ndjson(NdjsonFramer),
    Json { body: Vec<u8>, overflow: bool },
    Opaque,
}

/// Everything that consumes frames, kept apart from the framer so both can be borrowed at once.
#[derive(Debug)]
struct Interpreter {
    classifier: Classifier,
    timeline: Timeline,
    findings: Findings,
    invalid_utf8: bool,
}

impl Interpreter {
    fn decode<'a>(&mut self, bytes: &'a [u8]) -> Cow<'a, str> {
        // `from_utf8` validates valid text several times faster than `from_utf8_lossy`'s chunk
        // iterator; the lossy copy is only for the rare invalid frame.
        if let Ok(text) = std::str::from_utf8(bytes) {
            return Cow::Borrowed(text);
        }
        self.invalid_utf8 = true;
        String::from_utf8_lossy(bytes)
    }

    fn frame(&mut self, event_type: Option<&[u8]>, data: &[u8], t_ns: u64, end_offset: u64, whole_body: bool) {
        let event_type = event_type.map(|e| self.decode(e).into_owned());
        let data = self.decode(data);
        self.timeline.begin_frame(t_ns, end_offset);
        let frame = Frame { event_type: event_type.as_deref(), data: &data, whole_body };
        let mut out = Out { timeline: &mut self.timeline, findings: &mut self.findings };
        self.classifier.classify(&frame, &mut out);
    }

    fn comment(&mut self, t_ns: u64, end_offset: u64) {
        self.timeline.begin_frame(t_ns, end_offset);
        self.timeline.piece(EventClass::Heartbeat, "");
    }
}

/// Analyses one upstream response body as it streams. Never panics, whatever the bytes.
#[derive(Debug)]
pub struct StreamAnalyzer {
    limits: AnalysisLimits,
    route_dialect: Option<Dialect>,
    framing: Option<Framing>,
    stage: Stage,
    interpreter: Interpreter,
    body_bytes: u64,
    chunk_count: u64,
    first_chunk_ns: Option<u64>,
    last_chunk_ns: Option<u64>,
}

impl StreamAnalyzer {
    pub fn new(ctx: StreamContext, limits: AnalysisLimits) -> Self {
        let route_dialect = dialect_from_route(ctx.provider_hint.as_deref(), &ctx.request_path);
        let framing = framing_from_content_type(ctx.response_content_type.as_deref());
        let stage = match framing {
            Some(f) => Self::stage_for(f, &limits),
            None => Stage::Sniffing { pending: Vec::new(), prefix: Vec::new() },
        };
        let timeline = Timeline::new(limits.stall_threshold_ns, limits.max_events_kept, limits.max_token_text_bytes);
        StreamAnalyzer {
            route_dialect,
            framing,
            stage,
            interpreter: Interpreter {
                classifier: Classifier::new(route_dialect),
                timeline,
                findings: Findings::default(),
                invalid_utf8: false,
            },
            limits,
            body_bytes: 0,
            chunk_count: 0,
            first_chunk_ns: None,
            last_chunk_ns: None,
        }
    }

    fn stage_for(framing: Framing, limits: &AnalysisLimits) -> Stage {
        match framing {
            Framing::Sse => Stage::Sse(SseFramer::new(limits.max_event_bytes)),
            Framing::Ndjson => Stage::Ndjson(NdjsonFramer::new(limits.max_event_bytes)),
            Framing::Json => Stage::Json { body: Vec::new(), overflow: false },
            Framing::Audio | Framing::Binary => Stage::Opaque,
        }
    }

    /// Room for the events and gaps of `pieces` pieces, taken at once (as capped when kept): a
    /// caller that knows a stream's piece count before it feeds them spares the growth by
    /// doubling (an allocation and a copy per doubling). Only capacity; nothing is counted.
    pub fn expect_pieces(&mut self, pieces: usize) {
        self.interpreter.timeline.reserve(pieces);
    }

    /// Spans (`[start, end]` ns since t0, in order) in which the proxy held the provider (its
    /// receive window closed by back-pressure from the client): left out of the gaps between
    /// content events (ITL, stalls) and of the output rate's span. Set before the first chunk.
    pub fn upstream_held(&mut self, spans: &[(u64, u64)]) {
        self.interpreter.timeline.held = spans.to_vec();
    }

    /// Feeds the bytes of one upstream body chunk, in order. `t_up_ns` is its arrival time relative
    /// to the request start t0 (monotonic nanoseconds).
    pub fn push_chunk(&mut self, bytes: &[u8], t_up_ns: u64) {
        if bytes.is_empty() {
            return;
        }
        self.body_bytes += bytes.len() as u64;
        self.chunk_count += 1;
        self.first_chunk_ns.get_or_insert(t_up_ns);
        self.last_chunk_ns = Some(t_up_ns);
        if let Stage::Sniffing { pending, prefix } = &mut self.stage {
            pending.push((bytes.to_vec(), t_up_ns));
            // Sniffing needs only the first non-whitespace bytes; the prefix copy is bounded.
            let room = SNIFF_PREFIX_BYTES.saturating_sub(prefix.len());
            prefix.extend_from_slice(&bytes[..bytes.len().min(room)]);
            if let Sniff::Decided(framing) = sniff_framing(prefix, self.route_dialect, false) {
                self.settle_framing(framing);
            }
            return;
        }
        self.feed(bytes, t_up_ns);
    }

    /// Leaves the sniffing stage and replays the held-back chunks with their own arrival times.
    fn settle_framing(&mut self, framing: Framing) {
        let stage = std::mem::replace(&mut self.stage, Self::stage_for(framing, &self.limits));
        self.framing = Some(framing);
        if let Stage::Sniffing { pending, .. } = stage {
            for (bytes, t) in pending {
                self.feed(&bytes, t);
            }
        }
    }

    fn feed(&mut self, bytes: &[u8], t_ns: u64) {
        let interpreter = &mut self.interpreter;
        match &mut self.stage {
            Stage::Sse(framer) => framer.push(bytes, &mut |item| match item {
                SseItem::Event(event) => {
                    interpreter.frame(event.event_type, event.data, t_ns, event.end_offset, false);
                }
                SseItem::Comment { end_offset } => interpreter.comment(t_ns, end_offset),
                SseItem::Oversized { .. } => {}
            }),
            Stage::Ndjson(framer) => framer.push(bytes, &mut |line| {
                interpreter.frame(None, line.data, t_ns, line.end_offset, false);
            }),
            Stage::Json { body, overflow } => {
                if *overflow || body.len() + bytes.len() > self.limits.max_event_bytes {
                    *overflow = true;
                    *body = Vec::new();
                } else {
                    body.extend_from_slice(bytes);
                }
            }
            Stage::Opaque | Stage::Sniffing { .. } => {}
        }
    }

    /// Ends the analysis. Everything not yet complete (an unterminated SSE block) is dropped; a final
    /// NDJSON line without newline and a whole JSON body are classified now, at the arrival time of
    /// the last chunk.
    pub fn finish(mut self, timing: RequestTiming) -> StreamAnalysis {
        if let Stage::Sniffing { prefix, .. } = &self.stage {
            let framing = match sniff_framing(prefix, self.route_dialect, true) {
                Sniff::Decided(f) => f,
                Sniff::NeedMoreBytes => Framing::Binary,
            };
            self.settle_framing(framing);
        }
        let t_last = self.last_chunk_ns.unwrap_or(0);
        let mut oversized = 0;
        match &mut self.stage {
            Stage::Sse(framer) => oversized = framer.oversized_events(),
            Stage::Ndjson(framer) => {
                let interpreter = &mut self.interpreter;
                framer.finish(&mut |line| interpreter.frame(None, line.data, t_last, line.end_offset, false));
                oversized = framer.oversized_lines();
            }
            Stage::Json { body, overflow } => {
                if *overflow {
                    oversized = 1;
                } else if !body.is_empty() {
                    let body = std::mem::take(body);
                    self.whole_body(&body, t_last);
                }
            }
            Stage::Opaque | Stage::Sniffing { .. } => {}
        }
        self.into_analysis(timing, oversized)
    }

    /// A non-streaming body: one frame, all at the time the body completed. A body that is not one
    /// JSON document but has several lines is read as NDJSON (servers that mislabel their streams).
    fn whole_body(&mut self, body: &[u8], t_ns: u64) {
        let single_document = serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok();
        if single_document || !body.contains(&b'\n') {
            self.interpreter.frame(None, body, t_ns, self.body_bytes, true);
            return;
        }
        let mut framer = NdjsonFramer::new(self.limits.max_event_bytes);
        let interpreter = &mut self.interpreter;
        let mut emit = |line: crate::ndjson::NdjsonLine<'_>| {
            interpreter.frame(None, line.data, t_ns, line.end_offset, false);
        };
        framer.push(body, &mut emit);
        framer.finish(&mut emit);
    }

    fn into_analysis(self, timing: RequestTiming, oversized_events: u64) -> StreamAnalysis {
        let Interpreter { classifier, timeline, mut findings, invalid_utf8 } = self.interpreter;
        let framing = self.framing.unwrap_or(Framing::Binary);
        let dialect = match framing {
            _ if self.body_bytes == 0 => None,
            Framing::Audio | Framing::Binary => None,
            _ => Some(classifier.dialect().unwrap_or(Dialect::Generic)),
        };
        let format = match (framing, dialect) {
            _ if self.body_bytes == 0 => StreamFormat::Empty,
            (Framing::Sse, Some(Dialect::OpenaiChat)) => StreamFormat::OpenaiChat,
            (Framing::Sse, Some(Dialect::OpenaiResponses)) => StreamFormat::OpenaiResponses,
            (Framing::Sse, Some(Dialect::AnthropicMessages)) => StreamFormat::AnthropicMessages,
            (Framing::Sse, Some(Dialect::Gemini)) => StreamFormat::Gemini,
            (Framing::Sse, _) => StreamFormat::GenericSse,
            (Framing::Ndjson, _) => StreamFormat::Ndjson,
            (Framing::Json, _) => StreamFormat::Json,
            (Framing::Audio, _) => StreamFormat::Audio,
            (Framing::Binary, _) => StreamFormat::Binary,
        };
        let content_aware = !matches!(dialect, None | Some(Dialect::Generic));
        let metrics = stream_metrics(
            &timeline,
            &MetricInputs {
                t_upstream_headers_ns: timing.t_upstream_headers_ns,
                t_first_chunk_ns: self.first_chunk_ns,
                t_end_ns: timing.t_end_ns,
                body_bytes: self.body_bytes,
                chunk_count: self.chunk_count,
                content_aware,
            },
        );
        let stalls = stall_summary(&timeline, self.limits.stall_threshold_ns);
        let answer = &timeline.texts[0];
        let answer_hashes = (!answer.trim().is_empty()).then(|| crate::conversation::TextHashes::of(answer));
        // The answer's whole-text hash is its reply key's (no second normalisation of the text).
        let reply_key =
            crate::conversation::reply_key_or(findings.tool_calls.iter().filter_map(|c| c.id.as_deref()), || {
                answer_hashes.as_ref().map(|h| h.whole)
            });
        let tool_calls = findings.take_tool_calls();
        StreamAnalysis {
            answer_hashes,
            reply_key,
            server_timing: findings.server_timing,
            format,
            dialect,
            event_counts: timeline.counts.clone(),
            metrics,
            stalls,
            usage: findings.usage,
            response_id: findings.response_id,
            response_model: findings.response_model,
            finish_reasons: findings.finish_reasons,
            tool_calls,
            errors: findings.errors,
            refusal: findings.refusal,
            flags: AnalysisFlags {
                oversized_events,
                invalid_utf8,
                body_incomplete: !timing.body_complete,
                token_text_truncated: timeline.token_text_truncated,
                redacted_reasoning: findings.redacted_reasoning,
                encoded_body: None,
                client_closed_after_end: false,
            },
            events_truncated: timeline.events_truncated,
            events: timeline.events,
        }
    }
}
