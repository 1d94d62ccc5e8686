//! What the turn tracker needs of one request record: its times, its linking facts and the tool
//! calls its response made, all in Unix nanoseconds so that steps compare across requests.

use tokentap_analysis::LastInput;

use crate::{Outcome, Record};

/// The request headers that name a turn or a conversation explicitly (`[turns]`), lower case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnHeaders {
    pub turn: String,
    pub conversation: String,
}

impl Default for TurnHeaders {
    fn default() -> Self {
        Self { turn: "x-tokentap-turn".into(), conversation: "x-tokentap-conversation".into() }
    }
}

/// Longest explicit header value used (longer values are ignored, as if absent).
pub const MAX_HEADER_VALUE_BYTES: usize = 256;

/// A linking header's value in a record (trimmed), when present, usable (not empty, at most
/// [`MAX_HEADER_VALUE_BYTES`]) and not redacted.
pub fn header_value<'a>(record: &'a Record, name: &str) -> Option<&'a str> {
    record
        .request_headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
        .filter(|v| !v.is_empty() && v.len() <= MAX_HEADER_VALUE_BYTES && *v != "[redacted]")
}

/// A tool call the step's response made.
#[derive(Debug, Clone, PartialEq)]
pub struct StepToolCall {
    pub id: Option<String>,
    pub name: Option<String>,
    /// Handed to the client (else received from upstream), Unix ns.
    pub ready_unix_ns: u64,
    /// Its arguments as parsed values, hashed (`conversation::arguments_hash`).
    pub arguments_hash: Option<u64>,
}

/// What names a step's turn and conversation without any state shared between instances: keyed
/// hashes of the prefix up to the turn's (the conversation's) user message and of the assistant
/// reply after it (`tokentap_analysis::conversation`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnKeys {
    pub turn_anchor: Option<u64>,
    /// The reply after the turn's user message, from the request's history (later steps).
    pub turn_reply: Option<u64>,
    pub conversation_anchor: Option<u64>,
    pub conversation_reply: Option<u64>,
    /// This step's own response.
    pub reply: Option<u64>,
}

impl TurnKeys {
    /// The request's keys, with the key of the step's own response.
    pub fn of_request(request: &tokentap_analysis::RequestInfo, reply: Option<u64>) -> TurnKeys {
        TurnKeys {
            turn_anchor: request.turn_anchor,
            turn_reply: request.turn_reply,
            conversation_anchor: request.conversation_anchor,
            conversation_reply: request.conversation_reply,
            reply,
        }
    }

    /// The key of the turn: its anchor and its first reply (this step's response when the step
    /// starts the turn, else the reply its history holds).
    pub fn turn(&self, starts_turn: bool) -> Option<(u64, u64)> {
        Some((self.turn_anchor?, if starts_turn { self.reply } else { self.turn_reply }?))
    }

    /// The key of the conversation: the key of its first turn.
    pub fn conversation(&self, starts_turn: bool) -> Option<(u64, u64)> {
        let anchor = self.conversation_anchor?;
        let first_turn_is_this_one = self.turn_anchor == Some(anchor);
        let reply = if first_turn_is_this_one { self.turn(starts_turn)?.1 } else { self.conversation_reply? };
        Some((anchor, reply))
    }
}

/// An id derived from a key pair, the same on every instance (the pair is already keyed).
pub fn derived_id(domain: &str, (a, b): (u64, u64), bytes: usize) -> String {
    let mut input = Vec::with_capacity(domain.len() + 16);
    input.extend_from_slice(domain.as_bytes());
    input.extend_from_slice(&a.to_be_bytes());
    input.extend_from_slice(&b.to_be_bytes());
    crate::trace::stable_hex(&input, bytes)
}

/// One model call, as the tracker sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepInput {
    pub request_id: String,
    pub span_id: String,
    /// The request's own trace id and, when the client sent a `traceparent`, its parent span.
    pub trace_id: String,
    pub parent_span_id: Option<String>,
    pub started_at: String,
    pub route: String,
    pub t0_unix_ns: u64,
    pub end_unix_ns: u64,
    pub last_content_unix_ns: Option<u64>,
    pub outcome: Outcome,
    pub model: Option<String>,
    pub ttft_answer_ms: Option<f64>,
    pub ttft_tool_ms: Option<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub turn_header: Option<String>,
    pub conversation_header: Option<String>,
    pub last_input: Option<LastInput>,
    pub tool_result_ids: Vec<String>,
    pub tool_result_names: Vec<String>,
    pub previous_response_id: Option<String>,
    pub prefix_hashes: Vec<u64>,
    pub response_id: Option<String>,
    pub tool_calls: Vec<StepToolCall>,
    pub keys: TurnKeys,
}

impl StepInput {
    /// The step a record describes, or `None` for requests that are not model calls of a
    /// conversation (embeddings, unknown paths, bodies that could not be read, no route).
    pub fn from_record(record: &Record, headers: &TurnHeaders) -> Option<StepInput> {
        // A record written without its analysis (overload) does not say whether the model asked
        // for tools; placing it would close its turn wrongly.
        if matches!(record.outcome, Outcome::NoRoute) || record.analysis_shed {
            return None;
        }
        let request = &record.request;
        if !matches!(request.operation.as_deref(), Some("chat" | "generate_content")) {
            return None;
        }
        let last_input = request.last_input?;
        let t0 = record.timeline.t0_unix_ns;
        let end_rel = record
            .timeline
            .t_end_ns
            .or_else(|| record.timeline.chunks.last().map(|c| c.t_handoff_ns.unwrap_or(c.t_up_ns)))
            .or(record.timeline.t_upstream_headers_ns)
            .unwrap_or(0);
        let analysis = record.analysis.as_ref();
        let metrics = analysis.map(|a| &a.metrics);
        let header = |name: &str| header_value(record, name).map(str::to_owned);
        let tool_calls = analysis
            .map(|a| {
                a.tool_calls
                    .iter()
                    .map(|call| StepToolCall {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        ready_unix_ns: t0.saturating_add(ready_rel_ns(record, call.ready_offset, call.ready_ms)),
                        arguments_hash: call.arguments_hash,
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(StepInput {
            request_id: record.request_id.clone(),
            span_id: record.span_id.clone(),
            trace_id: record.trace_id.clone(),
            parent_span_id: record.parent_span_id.clone(),
            started_at: record.started_at.clone(),
            route: record.route.clone(),
            t0_unix_ns: t0,
            end_unix_ns: t0.saturating_add(end_rel),
            last_content_unix_ns: metrics.and_then(|m| m.to_last_content_ms).map(|ms| t0.saturating_add(ns(ms))),
            outcome: record.outcome,
            model: record.conditions.model.clone().or_else(|| request.model.clone()),
            ttft_answer_ms: metrics.and_then(|m| m.ttft_answer_ms),
            ttft_tool_ms: metrics.and_then(|m| m.ttft_tool_ms),
            input_tokens: analysis
                .and_then(|a| a.usage.as_ref())
                .and_then(|u| u.input_tokens)
                .or(request.prompt_tokens),
            output_tokens: analysis
                .and_then(|a| a.usage.as_ref())
                .and_then(|u| u.output_tokens)
                .or_else(|| metrics.and_then(|m| m.output_tokens.as_ref()).map(|t| t.total)),
            turn_header: header(&headers.turn),
            conversation_header: header(&headers.conversation),
            last_input: Some(last_input),
            tool_result_ids: request.tool_result_ids.clone(),
            tool_result_names: request.tool_result_names.clone(),
            previous_response_id: request.previous_response_id.clone(),
            prefix_hashes: request.prefix_hashes.clone(),
            response_id: analysis.and_then(|a| a.response_id.clone()),
            tool_calls,
            keys: TurnKeys::of_request(request, analysis.and_then(|a| a.reply_key)),
        })
    }
}

fn ns(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms * 1e6).round() as u64
    } else {
        0
    }
}

/// When a tool call was handed to the client: the handoff of the chunk that held the end of its
/// last frame; the upstream arrival when that chunk is not listed (or was never handed off).
fn ready_rel_ns(record: &Record, ready_offset: Option<u64>, ready_ms: Option<f64>) -> u64 {
    let arrival = ready_ms.map(ns).unwrap_or(0);
    let Some(end) = ready_offset.filter(|o| *o > 0) else { return arrival };
    let last_byte = end - 1;
    let chunks = &record.timeline.chunks;
    let i = chunks.partition_point(|c| c.offset + u64::from(c.len) <= last_byte);
    match chunks.get(i) {
        Some(c) if c.offset <= last_byte => c.t_handoff_ns.unwrap_or(arrival).max(arrival),
        _ => arrival,
    }
}
