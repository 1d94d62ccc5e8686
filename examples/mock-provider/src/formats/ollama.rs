//! Ollama `/api/chat`: NDJSON (`application/x-ndjson`), one object per line with `message.content`
//! or `message.thinking`, tool calls whole, and a last line with `done: true`, `done_reason` and the
//! eval counters.

use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};

use super::WireFormat;
use crate::completion::Completion;
use crate::wire::{ndjson_line, pad_to, EventKind, WireEvent};

pub(crate) struct Ollama;

/// Fixed so identical requests give identical bodies (this is 1_700_000_000 in RFC 3339).
const CREATED_AT: &str = "2023-11-14T22:13:20.000000Z";

fn line(c: &Completion, message: Value) -> Value {
    json!({"model": c.model, "created_at": CREATED_AT, "message": message, "done": false})
}

fn tool_calls(c: &Completion) -> Option<Value> {
    let calls: Vec<Value> =
        c.tool_calls.iter().map(|tool| json!({"function": {"name": tool.name, "arguments": tool.arguments}})).collect();
    (!calls.is_empty()).then_some(Value::Array(calls))
}

fn finish(c: &Completion, message: Value) -> Value {
    // Durations in nanoseconds, derived from the counts so they are deterministic.
    let prompt_eval_duration = u64::from(c.usage.input_tokens) * 1_000_000;
    let eval_duration = u64::from(c.usage.output_tokens) * 20_000_000;
    json!({
        "model": c.model, "created_at": CREATED_AT, "message": message, "done": true,
        "done_reason": "stop",
        "total_duration": prompt_eval_duration + eval_duration,
        "load_duration": 0,
        "prompt_eval_count": c.usage.input_tokens,
        "prompt_eval_duration": prompt_eval_duration,
        "eval_count": c.usage.output_tokens,
        "eval_duration": eval_duration,
    })
}

impl WireFormat for Ollama {
    fn stream_content_type(&self, _: &Completion) -> &'static str {
        "application/x-ndjson"
    }

    fn stream_events(&self, c: &Completion) -> Vec<WireEvent> {
        let mut events = Vec::new();
        let mut content = |message: Value| {
            let mut body = line(c, message);
            pad_to(&mut body, "x_mock_padding", c.event_bytes);
            events.push(WireEvent::new(EventKind::Content, ndjson_line(&body)));
        };
        for text in &c.reasoning_chunks {
            content(json!({"role": "assistant", "content": "", "thinking": text}));
        }
        for text in &c.answer_chunks {
            content(json!({"role": "assistant", "content": text}));
        }
        if let Some(calls) = tool_calls(c) {
            content(json!({"role": "assistant", "content": "", "tool_calls": calls}));
        }
        let last = finish(c, json!({"role": "assistant", "content": ""}));
        events.push(WireEvent::new(EventKind::Control, ndjson_line(&last)));
        events
    }

    fn midstream_error(&self, _: &Completion, _: usize) -> Option<Bytes> {
        Some(ndjson_line(&json!({"error": "an error was encountered while running the model"})))
    }

    fn heartbeat(&self) -> Option<Bytes> {
        None
    }

    fn full_body(&self, c: &Completion) -> Value {
        let mut message = json!({"role": "assistant", "content": c.answer_text()});
        if !c.reasoning_chunks.is_empty() {
            message["thinking"] = json!(c.reasoning_text());
        }
        if let Some(calls) = tool_calls(c) {
            message["tool_calls"] = calls;
        }
        finish(c, message)
    }

    fn error_body(&self, _: StatusCode, message: &str) -> Value {
        json!({"error": message})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::testing::{completion as test_completion, concat, json};

    #[test]
    fn ndjson_lines_end_with_done() {
        let c = test_completion(2, 3, false);
        let bytes = concat(&Ollama.stream_events(&c));
        let lines: Vec<Value> = std::str::from_utf8(&bytes).unwrap().lines().map(json).collect();
        assert_eq!(lines.len(), 6);
        let thinking: String = lines.iter().filter_map(|l| l["message"]["thinking"].as_str()).collect();
        let content: String = lines.iter().filter_map(|l| l["message"]["content"].as_str()).collect();
        assert_eq!(thinking, c.reasoning_text());
        assert_eq!(content, c.answer_text());
        assert_eq!(lines.last().unwrap()["done"], true);
        assert_eq!(lines.last().unwrap()["eval_count"], 5);
    }
}
