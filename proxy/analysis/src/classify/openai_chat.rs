//! OpenAI Chat Completions (and OpenAI-compatible servers: vLLM, DeepSeek, Groq, OpenRouter, ...),
//! streaming chunks and non-streaming bodies, plus the legacy Completions `choices[].text`.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use super::{parse_failure, text, Out, Parsed, Text};
use crate::event::EventClass;
use crate::server_timing::ServerTiming;

mod fast;

/// The Chat Completions chunk parsers side by side, for the instruction counts in BENCHMARKS.md
/// (`examples/chat_chunk_parsers.rs`).
#[cfg(feature = "parser-comparison")]
pub mod parser_comparison {
    use super::{fast, Chunk};

    /// Which parser reads the chunks.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum ChunkParser {
        /// The hand-written one-pass scanner with its resumable prefix (what tokentap runs), and
        /// serde_json for what it declines.
        Fast,
        /// `serde_json::from_str` into the same borrowed types.
        SerdeJson,
        /// `sonic_rs::from_str` into the same borrowed types.
        SonicRs,
    }

    /// Parses every chunk of one stream in order; returns the answer bytes seen (so the work
    /// cannot be optimised away) or `None` when a parser refused a chunk.
    pub fn parse_stream(parser: ChunkParser, chunks: &[&str]) -> Option<usize> {
        let mut resume = fast::Resume::default();
        let mut answer = 0;
        for data in chunks {
            let chunk: Chunk<'_> = match parser {
                ChunkParser::Fast => match fast::parse(&mut resume, data) {
                    Some(chunk) => chunk,
                    None => serde_json::from_str(data).ok()?,
                },
                ChunkParser::SerdeJson => serde_json::from_str(data).ok()?,
                ChunkParser::SonicRs => sonic_rs::from_str(data).ok()?,
            };
            for choice in chunk.choices.iter().flatten() {
                if let Some(content) = choice.delta.as_ref().and_then(|d| d.content.as_ref()) {
                    answer += content.as_str().len();
                }
            }
        }
        Some(answer)
    }
}

const MAX_TOOL_SLOTS: usize = 1024;

#[derive(Debug, Default)]
pub(crate) struct OpenaiChat {
    /// (choice index, tool call index) → entry in the findings' tool call list.
    tool_slots: HashMap<(u64, u64), Option<usize>>,
    /// The fast chunk parser's state: where the previous chunk's parse can be resumed.
    resume: fast::Resume,
}

#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Chunk<'a> {
    #[serde(borrow, default)]
    id: Option<Text<'a>>,
    #[serde(borrow, default)]
    model: Option<Text<'a>>,
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    /// llama.cpp's server: its own prompt and generation times.
    #[serde(default)]
    timings: Option<Value>,
    /// Groq: `x_groq.usage` on the last chunk carries queue, prompt and completion times.
    #[serde(default)]
    x_groq: Option<Value>,
    /// Cerebras: queue, prompt and completion times.
    #[serde(default)]
    time_info: Option<Value>,
}

#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u64>,
    /// Streaming chunks carry `delta`, whole responses `message`; both have the same fields.
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    message: Option<Delta<'a>>,
    /// Legacy Completions API.
    #[serde(borrow, default)]
    text: Option<Text<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Text<'a>>,
}

#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Delta<'a> {
    #[serde(borrow, default)]
    role: Option<Text<'a>>,
    #[serde(borrow, default)]
    content: Option<Text<'a>>,
    /// DeepSeek, older vLLM.
    #[serde(borrow, default)]
    reasoning_content: Option<Text<'a>>,
    /// Newer vLLM, Groq, OpenRouter. Kept loose: some servers send an object here.
    #[serde(default)]
    reasoning: Option<Value>,
    #[serde(borrow, default)]
    refusal: Option<Text<'a>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCallDelta<'a>>>,
    /// Deprecated single function call.
    #[serde(borrow, default)]
    function_call: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct ToolCallDelta<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    id: Option<Text<'a>>,
    #[serde(borrow, default)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct FunctionDelta<'a> {
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(borrow, default)]
    arguments: Option<Text<'a>>,
}

/// The server's own timings, from the OpenAI-compatible servers that add them to the chunk
/// (docs/metrics.md, "Server-reported timings").
fn server_timing(chunk: &Chunk<'_>, out: &mut Out<'_>) {
    if let Some(timings) = &chunk.timings {
        out.findings.server_timing(ServerTiming::from_llama_cpp(timings));
    }
    let groq_usage = chunk.x_groq.as_ref().and_then(|x| x.get("usage")).filter(|u| u.is_object());
    if let (Some(usage), None) = (groq_usage, &chunk.usage) {
        // Groq's streamed usage report (its token counts are the same as `usage`'s would be).
        out.findings.absorb_usage(usage);
    }
    // A whole Groq body reports its times in `usage` itself.
    for usage in [groq_usage, chunk.usage.as_ref()].into_iter().flatten() {
        out.findings.server_timing(ServerTiming::from_groq_usage(usage));
    }
    if let Some(time_info) = &chunk.time_info {
        out.findings.server_timing(ServerTiming::from_cerebras(time_info, chunk.usage.as_ref()));
    }
}

impl OpenaiChat {
    pub(crate) fn classify(&mut self, data: &str, out: &mut Out<'_>) -> Parsed {
        if data == "[DONE]" {
            out.piece(EventClass::Done, "");
            return Parsed::Yes;
        }
        let chunk: Chunk<'_> = match fast::parse(&mut self.resume, data) {
            Some(chunk) => chunk,
            None => match serde_json::from_str(data) {
                Ok(chunk) => chunk,
                Err(_) => return parse_failure(data),
            },
        };
        out.findings.note_id(text(&chunk.id));
        out.findings.note_model(text(&chunk.model));
        if let Some(error) = &chunk.error {
            out.error(error);
        }
        // A frame with nothing but role or finish markers is `control`; one whose deltas are all
        // empty is a keep-alive.
        let mut saw_marker = false;
        let mut saw_empty_delta = false;
        for (position, choice) in chunk.choices.iter().flatten().enumerate() {
            let choice_index = choice.index.unwrap_or(position as u64);
            for delta in [&choice.delta, &choice.message].into_iter().flatten() {
                let before = out.timeline.pieces_in_frame();
                self.delta(choice_index, delta, out);
                if out.timeline.pieces_in_frame() == before {
                    if delta.role.is_some() {
                        saw_marker = true;
                    } else {
                        saw_empty_delta = true;
                    }
                }
            }
            if let Some(t) = text(&choice.text).filter(|t| !t.is_empty()) {
                out.piece(EventClass::Answer, t);
            }
            if let Some(reason) = text(&choice.finish_reason) {
                out.findings.finish_reason(reason);
                saw_marker = true;
            }
        }
        if let Some(usage) = chunk.usage.as_ref().filter(|u| u.is_object()) {
            out.findings.absorb_usage(usage);
            out.piece(EventClass::Usage, "");
        }
        server_timing(&chunk, out);
        if out.timeline.pieces_in_frame() == 0 && saw_empty_delta && !saw_marker {
            out.piece(EventClass::Heartbeat, "");
        }
        Parsed::Yes
    }

    fn delta(&mut self, choice_index: u64, delta: &Delta<'_>, out: &mut Out<'_>) {
        if let Some(r) = text(&delta.reasoning_content).filter(|t| !t.is_empty()) {
            out.piece(EventClass::Reasoning, r);
        }
        if let Some(Value::String(r)) = &delta.reasoning {
            if !r.is_empty() {
                out.piece(EventClass::Reasoning, r);
            }
        }
        if let Some(c) = text(&delta.content).filter(|t| !t.is_empty()) {
            out.piece(EventClass::Answer, c);
        }
        if let Some(r) = text(&delta.refusal).filter(|t| !t.is_empty()) {
            out.findings.refusal = true;
            out.piece(EventClass::Answer, r);
        }
        for (position, call) in delta.tool_calls.iter().flatten().enumerate() {
            let key = (choice_index, call.index.unwrap_or(position as u64));
            self.tool_fragment(key, text(&call.id), call.function.as_ref(), out);
        }
        if let Some(function) = &delta.function_call {
            self.tool_fragment((choice_index, u64::MAX), None, Some(function), out);
        }
    }

    /// A tool call fragment: the name (usually in the first fragment) and a piece of the arguments.
    fn tool_fragment(
        &mut self,
        key: (u64, u64),
        id: Option<&str>,
        function: Option<&FunctionDelta<'_>>,
        out: &mut Out<'_>,
    ) {
        let slot = match self.tool_slots.get(&key) {
            Some(slot) => *slot,
            // Bounded: a hostile stream inventing indices cannot grow the map without limit.
            None if self.tool_slots.len() >= MAX_TOOL_SLOTS => None,
            None => {
                let slot = out.findings.new_tool_call();
                self.tool_slots.insert(key, slot);
                slot
            }
        };
        let name = function.and_then(|f| text(&f.name)).unwrap_or("");
        let arguments = function.and_then(|f| text(&f.arguments)).unwrap_or("");
        out.tool_call(slot, id, Some(name), arguments);
        if name.is_empty() {
            out.content_or_heartbeat(EventClass::ToolCall, arguments);
        } else {
            let mut fragment = String::with_capacity(name.len() + arguments.len());
            fragment.push_str(name);
            fragment.push_str(arguments);
            out.piece(EventClass::ToolCall, &fragment);
        }
    }
}
