//! OpenAI Responses API: typed `response.*` events (streaming) and whole `response` objects.
//!
//! The final `response.completed` repeats the whole output; it only contributes usage, ids and the
//! finish state, never content, or every token would be counted twice.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use super::{parse_failure, text, Out, Parsed, Text};
use crate::event::EventClass;

const MAX_ITEM_SLOTS: usize = 1024;

#[derive(Debug, Default)]
pub(crate) struct OpenaiResponses {
    /// Output item id → tool call entry.
    tool_items: HashMap<String, Option<usize>>,
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Text<'a>>,
    #[serde(borrow, default)]
    delta: Option<Text<'a>>,
    #[serde(borrow, default)]
    item_id: Option<Text<'a>>,
    #[serde(borrow, default)]
    item: Option<Item<'a>>,
    #[serde(borrow, default)]
    response: Option<ResponseObject<'a>>,
    // `error` events carry these at top level.
    #[serde(borrow, default)]
    code: Option<Text<'a>>,
    #[serde(borrow, default)]
    message: Option<Text<'a>>,
    #[serde(default)]
    error: Option<Value>,
    // A whole response body (non-streaming) has the response fields at top level.
    #[serde(borrow, default)]
    object: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Text<'a>>,
    #[serde(borrow, default)]
    id: Option<Text<'a>>,
    #[serde(borrow, default)]
    call_id: Option<Text<'a>>,
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(borrow, default)]
    arguments: Option<Text<'a>>,
    #[serde(borrow, default)]
    input: Option<Text<'a>>,
    #[serde(default)]
    content: Option<Vec<Value>>,
    #[serde(default)]
    summary: Option<Vec<Value>>,
}

#[derive(Deserialize)]
struct ResponseObject<'a> {
    #[serde(borrow, default)]
    id: Option<Text<'a>>,
    #[serde(borrow, default)]
    model: Option<Text<'a>>,
    #[serde(borrow, default)]
    status: Option<Text<'a>>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    incomplete_details: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(borrow, default)]
    output: Option<Vec<Item<'a>>>,
}

fn is_tool_item(kind: &str) -> bool {
    matches!(kind, "function_call" | "custom_tool_call" | "mcp_call")
}

impl OpenaiResponses {
    pub(crate) fn classify(
        &mut self,
        event_type: Option<&str>,
        data: &str,
        whole_body: bool,
        out: &mut Out<'_>,
    ) -> Parsed {
        if whole_body {
            return match serde_json::from_str::<ResponseObject<'_>>(data) {
                Ok(response) => {
                    self.whole_response(&response, out);
                    Parsed::Yes
                }
                Err(_) => parse_failure(data),
            };
        }
        let event: Event<'_> = match serde_json::from_str(data) {
            Ok(e) => e,
            Err(_) => return parse_failure(data),
        };
        let delta = text(&event.delta).unwrap_or("");
        match text(&event.kind).or(event_type).unwrap_or("") {
            "response.output_text.delta" => out.content_or_heartbeat(EventClass::Answer, delta),
            "response.refusal.delta" => {
                out.findings.refusal = true;
                out.content_or_heartbeat(EventClass::Answer, delta);
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                out.content_or_heartbeat(EventClass::Reasoning, delta);
            }
            "response.function_call_arguments.delta"
            | "response.custom_tool_call_input.delta"
            | "response.mcp_call_arguments.delta" => {
                let slot = self.tool_slot(text(&event.item_id).unwrap_or(""), out);
                out.tool_call(slot, None, None, delta);
                out.content_or_heartbeat(EventClass::ToolCall, delta);
            }
            "response.output_item.added" => match &event.item {
                Some(item) if is_tool_item(text(&item.kind).unwrap_or("")) => {
                    let slot = self.tool_slot(text(&item.id).unwrap_or(""), out);
                    let name = text(&item.name).unwrap_or("");
                    let id = text(&item.call_id).or(text(&item.id));
                    out.tool_call(slot, id, Some(name), "");
                    if name.is_empty() {
                        out.piece(EventClass::Control, "");
                    } else {
                        out.piece(EventClass::ToolCall, name);
                    }
                }
                _ => out.piece(EventClass::Control, ""),
            },
            "response.function_call_arguments.done"
            | "response.custom_tool_call_input.done"
            | "response.mcp_call_arguments.done" => {
                if let Some(slot) = self.tool_items.get(text(&event.item_id).unwrap_or("")).copied() {
                    out.tool_call(slot, None, None, "");
                }
                out.piece(EventClass::Control, "");
            }
            "response.output_item.done" => {
                let item_id = event.item.as_ref().and_then(|item| text(&item.id)).unwrap_or("");
                if let Some(slot) = self.tool_items.get(item_id).copied() {
                    out.tool_call(slot, None, None, "");
                }
                out.piece(EventClass::Control, "");
            }
            "response.created" | "response.in_progress" | "response.queued" => {
                if let Some(response) = &event.response {
                    out.findings.note_id(text(&response.id));
                    out.findings.note_model(text(&response.model));
                }
                out.piece(EventClass::Control, "");
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                if let Some(response) = &event.response {
                    self.final_state(response, out);
                }
                out.piece(EventClass::Done, "");
            }
            "error" => {
                let error = match &event.error {
                    Some(error) => error.clone(),
                    None => {
                        let mut map = serde_json::Map::new();
                        if let Some(code) = text(&event.code) {
                            map.insert("code".into(), Value::String(code.to_owned()));
                        }
                        if let Some(message) = text(&event.message) {
                            map.insert("message".into(), Value::String(message.to_owned()));
                        }
                        Value::Object(map)
                    }
                };
                out.error(&error);
            }
            _ if text(&event.object) == Some("response") => {
                if let Ok(response) = serde_json::from_str::<ResponseObject<'_>>(data) {
                    self.whole_response(&response, out);
                }
            }
            // Lifecycle, `*.done` repeats and unknown future events.
            _ => out.piece(EventClass::Control, ""),
        }
        Parsed::Yes
    }

    fn tool_slot(&mut self, item_id: &str, out: &mut Out<'_>) -> Option<usize> {
        if let Some(slot) = self.tool_items.get(item_id) {
            return *slot;
        }
        if self.tool_items.len() >= MAX_ITEM_SLOTS {
            return None;
        }
        let slot = out.findings.new_tool_call();
        self.tool_items.insert(item_id.to_owned(), slot);
        slot
    }

    /// Ids, usage, finish state and errors of a final (or whole) response object.
    fn final_state(&mut self, response: &ResponseObject<'_>, out: &mut Out<'_>) {
        out.findings.note_id(text(&response.id));
        out.findings.note_model(text(&response.model));
        if let Some(usage) = response.usage.as_ref().filter(|u| u.is_object()) {
            out.findings.absorb_usage(usage);
        }
        let reason = response
            .incomplete_details
            .as_ref()
            .and_then(|d| d.get("reason"))
            .and_then(Value::as_str)
            .or(text(&response.status));
        if let Some(reason) = reason {
            out.findings.finish_reason(reason);
        }
        if let Some(error) = response.error.as_ref().filter(|e| e.is_object()) {
            out.error(error);
        }
    }

    /// A non-streaming response: classify the output items all at once.
    fn whole_response(&mut self, response: &ResponseObject<'_>, out: &mut Out<'_>) {
        for item in response.output.iter().flatten() {
            let kind = text(&item.kind).unwrap_or("");
            match kind {
                "message" => {
                    for part in item.content.iter().flatten() {
                        let part_text = part.get("text").and_then(Value::as_str);
                        let refusal = part.get("refusal").and_then(Value::as_str);
                        if let Some(t) = part_text.filter(|t| !t.is_empty()) {
                            out.piece(EventClass::Answer, t);
                        }
                        if let Some(r) = refusal.filter(|t| !t.is_empty()) {
                            out.findings.refusal = true;
                            out.piece(EventClass::Answer, r);
                        }
                    }
                }
                "reasoning" => {
                    for part in item.summary.iter().flatten().chain(item.content.iter().flatten()) {
                        if let Some(t) = part.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                            out.piece(EventClass::Reasoning, t);
                        }
                    }
                }
                kind if is_tool_item(kind) => {
                    let name = text(&item.name).unwrap_or("");
                    let arguments = text(&item.arguments).or(text(&item.input)).unwrap_or("");
                    let slot = out.findings.new_tool_call();
                    out.tool_call(slot, text(&item.call_id).or(text(&item.id)), Some(name), arguments);
                    out.piece(EventClass::ToolCall, &format!("{name}{arguments}"));
                }
                _ => {}
            }
        }
        self.final_state(response, out);
        if response.usage.as_ref().is_some_and(Value::is_object) {
            out.piece(EventClass::Usage, "");
        }
    }
}
