//! Facts about the response that are not timings: identifiers, finish reasons, tool calls, errors,
//! provider usage. Every list here is capped so that a hostile stream cannot grow memory.

use serde_json::Value;

use crate::analysis::{ProviderUsage, StreamError, ToolCallSummary};
use crate::server_timing::ServerTiming;

const MAX_TOOL_CALLS: usize = 256;
const MAX_ERRORS: usize = 64;
const MAX_FINISH_REASONS: usize = 64;
const MAX_ERROR_MESSAGE_CHARS: usize = 300;
const MAX_ID_CHARS: usize = 256;
/// Argument text kept per tool call, and for all of a response's calls, to hash it at the end; a
/// call with more is left without a hash.
const MAX_ARGUMENT_BYTES: usize = 16 << 10;
const MAX_ALL_ARGUMENT_BYTES: usize = 256 << 10;

#[derive(Debug, Default)]
pub(crate) struct Findings {
    pub(crate) response_id: Option<String>,
    pub(crate) response_model: Option<String>,
    pub(crate) finish_reasons: Vec<String>,
    pub(crate) tool_calls: Vec<ToolCallSummary>,
    pub(crate) errors: Vec<StreamError>,
    pub(crate) refusal: bool,
    pub(crate) redacted_reasoning: bool,
    pub(crate) usage: Option<ProviderUsage>,
    /// The server's report of its own time; the last report wins (llama.cpp can repeat `timings`
    /// on every event).
    pub(crate) server_timing: Option<ServerTiming>,
    /// Argument text kept so far, over all tool calls.
    argument_text_bytes: usize,
}

fn capped(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => text[..cut].to_owned(),
        None => text.to_owned(),
    }
}

impl Findings {
    /// Keeps the first non-empty id: providers repeat it on every chunk.
    pub(crate) fn note_id(&mut self, id: Option<&str>) {
        if self.response_id.is_none() {
            if let Some(id) = id.filter(|s| !s.is_empty()) {
                self.response_id = Some(capped(id, MAX_ID_CHARS));
            }
        }
    }

    pub(crate) fn note_model(&mut self, model: Option<&str>) {
        if self.response_model.is_none() {
            if let Some(model) = model.filter(|s| !s.is_empty()) {
                self.response_model = Some(capped(model, MAX_ID_CHARS));
            }
        }
    }

    pub(crate) fn finish_reason(&mut self, reason: &str) {
        if self.finish_reasons.len() < MAX_FINISH_REASONS && !reason.is_empty() {
            self.finish_reasons.push(capped(reason, MAX_ID_CHARS));
        }
    }

    /// Opens a new tool call entry; `None` once the cap is reached (sizes then go unrecorded).
    pub(crate) fn new_tool_call(&mut self) -> Option<usize> {
        if self.tool_calls.len() >= MAX_TOOL_CALLS {
            return None;
        }
        self.tool_calls.push(ToolCallSummary { arguments_text: Some(String::new()), ..ToolCallSummary::default() });
        Some(self.tool_calls.len() - 1)
    }

    pub(crate) fn update_tool_call(
        &mut self,
        slot: Option<usize>,
        id: Option<&str>,
        name: Option<&str>,
        arguments: &str,
        ready: (u64, u64),
    ) {
        let Some(call) = slot.and_then(|i| self.tool_calls.get_mut(i)) else {
            return;
        };
        call.ready_ms = Some(crate::analysis::ms(ready.0));
        call.ready_offset = Some(ready.1);
        if let Some(id) = id.filter(|s| !s.is_empty()) {
            call.id.get_or_insert_with(|| capped(id, MAX_ID_CHARS));
        }
        if let Some(name) = name.filter(|s| !s.is_empty()) {
            match &mut call.name {
                // Some servers stream the name in pieces; the first piece opens the entry.
                Some(existing) if existing.len() < MAX_ID_CHARS => existing.push_str(name),
                Some(_) => {}
                None => call.name = Some(capped(name, MAX_ID_CHARS)),
            }
        }
        call.argument_bytes += arguments.len() as u64;
        if let Some(text) = &mut call.arguments_text {
            let total = self.argument_text_bytes + arguments.len();
            if text.len() + arguments.len() > MAX_ARGUMENT_BYTES || total > MAX_ALL_ARGUMENT_BYTES {
                self.argument_text_bytes -= text.len();
                call.arguments_text = None;
            } else {
                text.push_str(arguments);
                self.argument_text_bytes = total;
            }
        }
    }

    /// The tool calls, each with its arguments hashed (and their text let go).
    pub(crate) fn take_tool_calls(&mut self) -> Vec<ToolCallSummary> {
        let mut calls = std::mem::take(&mut self.tool_calls);
        for call in &mut calls {
            call.arguments_hash = call.arguments_text.take().and_then(|t| crate::conversation::arguments_hash(&t));
        }
        self.argument_text_bytes = 0;
        calls
    }

    pub(crate) fn server_timing(&mut self, timing: Option<ServerTiming>) {
        if let Some(timing) = timing {
            self.server_timing = Some(timing);
        }
    }

    /// Records an error from the provider's error object (or string).
    pub(crate) fn error(&mut self, t_ns: u64, error: &Value) {
        if self.errors.len() >= MAX_ERRORS {
            return;
        }
        let (error_type, message) = match error {
            Value::String(message) => (None, Some(message.as_str())),
            Value::Object(map) => {
                let error_type = ["type", "code", "status"].iter().find_map(|k| match map.get(*k) {
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(Value::Number(n)) => Some(n.to_string()),
                    _ => None,
                });
                (error_type, map.get("message").and_then(Value::as_str))
            }
            _ => (None, None),
        };
        self.push_error(t_ns, error_type, message);
    }

    pub(crate) fn push_error(&mut self, t_ns: u64, error_type: Option<String>, message: Option<&str>) {
        if self.errors.len() >= MAX_ERRORS {
            return;
        }
        self.errors.push(StreamError {
            t_ms: crate::analysis::ms(t_ns),
            error_type: error_type.map(|t| capped(&t, MAX_ID_CHARS)),
            message: message.map(|m| capped(m, MAX_ERROR_MESSAGE_CHARS)),
        });
    }

    /// Merges a provider usage object. Later reports override earlier fields (Gemini repeats its
    /// usage on every chunk; Anthropic sends input in `message_start` and the cumulative output in
    /// `message_delta`), and `raw` keeps the last object verbatim.
    pub(crate) fn absorb_usage(&mut self, usage: &Value) {
        let Value::Object(map) = usage else {
            return;
        };
        let get = |path: &[&str]| -> Option<u64> {
            let mut value = map.get(path[0])?;
            for key in &path[1..] {
                value = value.get(key)?;
            }
            value.as_u64()
        };
        let u = self.usage.get_or_insert_with(ProviderUsage::default);
        let set = |slot: &mut Option<u64>, paths: &[&[&str]]| {
            if let Some(v) = paths.iter().find_map(|p| get(p)) {
                *slot = Some(v);
            }
        };
        set(
            &mut u.input_tokens,
            &[&["prompt_tokens"], &["input_tokens"], &["promptTokenCount"], &["prompt_eval_count"]],
        );
        set(
            &mut u.output_tokens,
            &[&["completion_tokens"], &["output_tokens"], &["candidatesTokenCount"], &["eval_count"]],
        );
        set(
            &mut u.reasoning_tokens,
            &[
                &["completion_tokens_details", "reasoning_tokens"],
                &["output_tokens_details", "reasoning_tokens"],
                &["thoughtsTokenCount"],
            ],
        );
        set(
            &mut u.cached_tokens,
            &[
                &["prompt_tokens_details", "cached_tokens"],
                &["input_tokens_details", "cached_tokens"],
                &["cache_read_input_tokens"],
                &["cachedContentTokenCount"],
            ],
        );
        set(&mut u.cache_creation_tokens, &[&["cache_creation_input_tokens"]]);
        set(&mut u.total_tokens, &[&["total_tokens"], &["totalTokenCount"]]);
        u.raw = Some(usage.clone());
    }
}
