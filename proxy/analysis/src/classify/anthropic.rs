//! Anthropic Messages: `event: X` + `data: {"type":"X",...}` streams and non-streaming message bodies.
//!
//! Decisions: `content_block_start` of a tool-use block is a `tool_call` event whose text is the tool
//! name (the name is the first thing an app can act on, and OpenAI's first tool fragment carries the
//! name too); a `redacted_thinking` block is a `reasoning` event with no text (so it never counts as
//! content) and sets the `redacted_reasoning` flag.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use super::{json_text, parse_failure, text, Out, Parsed, Text};
use crate::event::EventClass;

const MAX_BLOCK_SLOTS: usize = 1024;

#[derive(Debug, Default)]
pub(crate) struct Anthropic {
    /// Content block index → tool call entry.
    tool_blocks: HashMap<u64, Option<usize>>,
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Text<'a>>,
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    content_block: Option<Block<'a>>,
    #[serde(borrow, default)]
    message: Option<Message<'a>>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    // Fields of a whole (non-streaming) message body.
    #[serde(borrow, default)]
    id: Option<Text<'a>>,
    #[serde(borrow, default)]
    model: Option<Text<'a>>,
    #[serde(borrow, default)]
    content: Option<Vec<Block<'a>>>,
    #[serde(borrow, default)]
    stop_reason: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Text<'a>>,
    #[serde(borrow, default)]
    text: Option<Text<'a>>,
    #[serde(borrow, default)]
    thinking: Option<Text<'a>>,
    #[serde(borrow, default)]
    partial_json: Option<Text<'a>>,
    #[serde(borrow, default)]
    stop_reason: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Text<'a>>,
    #[serde(borrow, default)]
    id: Option<Text<'a>>,
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(borrow, default)]
    text: Option<Text<'a>>,
    #[serde(borrow, default)]
    thinking: Option<Text<'a>>,
    #[serde(default)]
    input: Option<Value>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    id: Option<Text<'a>>,
    #[serde(borrow, default)]
    model: Option<Text<'a>>,
    #[serde(default)]
    usage: Option<Value>,
}

fn is_tool_block(kind: &str) -> bool {
    kind.ends_with("tool_use")
}

impl Anthropic {
    pub(crate) fn classify(&mut self, event_type: Option<&str>, data: &str, out: &mut Out<'_>) -> Parsed {
        let event: Event<'_> = match serde_json::from_str(data) {
            Ok(e) => e,
            Err(_) => return parse_failure(data),
        };
        // The JSON `type` is authoritative; the SSE `event:` line is the fallback.
        let kind = text(&event.kind).or(event_type).unwrap_or("");
        match kind {
            "message_start" => {
                if let Some(message) = &event.message {
                    out.findings.note_id(text(&message.id));
                    out.findings.note_model(text(&message.model));
                    if let Some(usage) = message.usage.as_ref().filter(|u| u.is_object()) {
                        out.findings.absorb_usage(usage);
                    }
                }
                out.piece(EventClass::Control, "");
            }
            "content_block_start" => self.block_start(event.index, event.content_block.as_ref(), out),
            "content_block_delta" => self.block_delta(event.index, event.delta.as_ref(), out),
            "content_block_stop" => {
                // The end of a tool-use block is the moment its call is complete.
                if let Some(slot) = self.tool_blocks.get(&event.index.unwrap_or(u64::MAX)).copied() {
                    out.tool_call(slot, None, None, "");
                }
                out.piece(EventClass::Control, "");
            }
            "message_delta" => {
                if let Some(reason) = event.delta.as_ref().and_then(|d| text(&d.stop_reason)) {
                    out.findings.finish_reason(reason);
                }
                match event.usage.as_ref().filter(|u| u.is_object()) {
                    Some(usage) => {
                        out.findings.absorb_usage(usage);
                        out.piece(EventClass::Usage, "");
                    }
                    None => out.piece(EventClass::Control, ""),
                }
            }
            "message_stop" => out.piece(EventClass::Done, ""),
            "ping" => out.piece(EventClass::Heartbeat, ""),
            "error" => out.error(event.error.as_ref().unwrap_or(&Value::Null)),
            "message" => self.whole_message(&event, out),
            _ => out.piece(EventClass::Control, ""),
        }
        Parsed::Yes
    }

    fn block_start(&mut self, index: Option<u64>, block: Option<&Block<'_>>, out: &mut Out<'_>) {
        let Some(block) = block else {
            out.piece(EventClass::Control, "");
            return;
        };
        match text(&block.kind).unwrap_or("") {
            kind if is_tool_block(kind) => {
                let slot = self.tool_slot(index, out);
                let name = text(&block.name).unwrap_or("");
                out.tool_call(slot, text(&block.id), Some(name), "");
                if name.is_empty() {
                    out.piece(EventClass::Control, "");
                } else {
                    out.piece(EventClass::ToolCall, name);
                }
            }
            "redacted_thinking" => {
                out.findings.redacted_reasoning = true;
                out.piece(EventClass::Reasoning, "");
            }
            "text" if text(&block.text).is_some_and(|t| !t.is_empty()) => {
                out.piece(EventClass::Answer, text(&block.text).unwrap_or(""));
            }
            "thinking" if text(&block.thinking).is_some_and(|t| !t.is_empty()) => {
                out.piece(EventClass::Reasoning, text(&block.thinking).unwrap_or(""));
            }
            _ => out.piece(EventClass::Control, ""),
        }
    }

    fn block_delta(&mut self, index: Option<u64>, delta: Option<&Delta<'_>>, out: &mut Out<'_>) {
        let Some(delta) = delta else {
            out.piece(EventClass::Control, "");
            return;
        };
        match text(&delta.kind).unwrap_or("") {
            "text_delta" => out.content_or_heartbeat(EventClass::Answer, text(&delta.text).unwrap_or("")),
            "thinking_delta" => {
                out.content_or_heartbeat(EventClass::Reasoning, text(&delta.thinking).unwrap_or(""));
            }
            "input_json_delta" => {
                let fragment = text(&delta.partial_json).unwrap_or("");
                let slot = self.tool_slot(index, out);
                out.tool_call(slot, None, None, fragment);
                out.content_or_heartbeat(EventClass::ToolCall, fragment);
            }
            // signature_delta, citations_delta and future delta types carry no user-visible text.
            _ => out.piece(EventClass::Control, ""),
        }
    }

    fn tool_slot(&mut self, index: Option<u64>, out: &mut Out<'_>) -> Option<usize> {
        let index = index.unwrap_or(u64::MAX);
        if let Some(slot) = self.tool_blocks.get(&index) {
            return *slot;
        }
        if self.tool_blocks.len() >= MAX_BLOCK_SLOTS {
            return None;
        }
        let slot = out.findings.new_tool_call();
        self.tool_blocks.insert(index, slot);
        slot
    }

    /// A non-streaming response body: every block at once.
    fn whole_message(&mut self, message: &Event<'_>, out: &mut Out<'_>) {
        out.findings.note_id(text(&message.id));
        out.findings.note_model(text(&message.model));
        for block in message.content.iter().flatten() {
            match text(&block.kind).unwrap_or("") {
                "text" => out.content_or_heartbeat(EventClass::Answer, text(&block.text).unwrap_or("")),
                "thinking" => {
                    out.content_or_heartbeat(EventClass::Reasoning, text(&block.thinking).unwrap_or(""));
                }
                "redacted_thinking" => {
                    out.findings.redacted_reasoning = true;
                    out.piece(EventClass::Reasoning, "");
                }
                kind if is_tool_block(kind) => {
                    let arguments = json_text(block.input.as_ref());
                    let slot = out.findings.new_tool_call();
                    let name = text(&block.name).unwrap_or("");
                    out.tool_call(slot, text(&block.id), Some(name), &arguments);
                    out.piece(EventClass::ToolCall, &format!("{name}{arguments}"));
                }
                _ => {}
            }
        }
        if let Some(reason) = text(&message.stop_reason) {
            out.findings.finish_reason(reason);
        }
        if let Some(usage) = message.usage.as_ref().filter(|u| u.is_object()) {
            out.findings.absorb_usage(usage);
            out.piece(EventClass::Usage, "");
        }
    }
}
