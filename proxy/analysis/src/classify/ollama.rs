//! Ollama `/api/chat` and `/api/generate`: one JSON object per NDJSON line, the last with
//! `done: true` and the token counts.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{json_text, parse_failure, text, Out, Parsed, Text};
use crate::event::EventClass;
use crate::server_timing::{OllamaFields, ServerTiming};

#[derive(Debug, Default)]
pub(crate) struct Ollama;

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow, default)]
    model: Option<Text<'a>>,
    #[serde(borrow, default)]
    message: Option<Message<'a>>,
    /// `/api/generate` puts the text here.
    #[serde(borrow, default)]
    response: Option<Text<'a>>,
    #[serde(borrow, default)]
    thinking: Option<Text<'a>>,
    #[serde(default)]
    done: Option<bool>,
    #[serde(borrow, default)]
    done_reason: Option<Text<'a>>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    prompt_eval_count: Option<Value>,
    #[serde(default)]
    eval_count: Option<Value>,
    #[serde(default)]
    total_duration: Option<Value>,
    #[serde(default)]
    load_duration: Option<Value>,
    #[serde(default)]
    prompt_eval_duration: Option<Value>,
    #[serde(default)]
    eval_duration: Option<Value>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    content: Option<Text<'a>>,
    #[serde(borrow, default)]
    thinking: Option<Text<'a>>,
    #[serde(default)]
    tool_calls: Option<Vec<Value>>,
}

impl Ollama {
    pub(crate) fn classify(&mut self, data: &str, out: &mut Out<'_>) -> Parsed {
        let line: Line<'_> = match serde_json::from_str(data) {
            Ok(line) => line,
            Err(_) => return parse_failure(data),
        };
        out.findings.note_model(text(&line.model));
        if let Some(error) = &line.error {
            out.error(error);
        }
        let message = line.message.as_ref();
        let thinking = message.and_then(|m| text(&m.thinking)).or(text(&line.thinking));
        if let Some(t) = thinking.filter(|t| !t.is_empty()) {
            out.piece(EventClass::Reasoning, t);
        }
        let content = message.and_then(|m| text(&m.content)).or(text(&line.response));
        if let Some(t) = content.filter(|t| !t.is_empty()) {
            out.piece(EventClass::Answer, t);
        }
        for call in message.and_then(|m| m.tool_calls.as_ref()).into_iter().flatten() {
            let function = call.get("function");
            let name = function.and_then(|f| f.get("name")).and_then(Value::as_str).unwrap_or("");
            let arguments = json_text(function.and_then(|f| f.get("arguments")));
            let slot = out.findings.new_tool_call();
            let id = call.get("id").and_then(Value::as_str);
            out.tool_call(slot, id, Some(name), &arguments);
            out.piece(EventClass::ToolCall, &format!("{name}{arguments}"));
        }
        if line.done == Some(true) {
            if let Some(reason) = text(&line.done_reason) {
                out.findings.finish_reason(reason);
            }
            let mut usage = Map::new();
            for (key, value) in [
                ("prompt_eval_count", &line.prompt_eval_count),
                ("eval_count", &line.eval_count),
                ("total_duration", &line.total_duration),
                ("load_duration", &line.load_duration),
                ("prompt_eval_duration", &line.prompt_eval_duration),
                ("eval_duration", &line.eval_duration),
            ] {
                if let Some(v) = value {
                    usage.insert(key.to_owned(), v.clone());
                }
            }
            if !usage.is_empty() {
                out.findings.absorb_usage(&Value::Object(usage));
            }
            out.findings.server_timing(ServerTiming::from_ollama(OllamaFields {
                total_duration: line.total_duration.as_ref(),
                load_duration: line.load_duration.as_ref(),
                prompt_eval_duration: line.prompt_eval_duration.as_ref(),
                eval_duration: line.eval_duration.as_ref(),
                prompt_eval_count: line.prompt_eval_count.as_ref(),
                eval_count: line.eval_count.as_ref(),
            }));
            out.piece(EventClass::Done, "");
        } else if out.timeline.pieces_in_frame() == 0 && content.is_some() {
            out.piece(EventClass::Heartbeat, "");
        }
        Parsed::Yes
    }
}
