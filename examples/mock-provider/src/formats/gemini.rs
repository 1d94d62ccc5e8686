//! Google Gemini `streamGenerateContent?alt=sse`: every `data:` is a whole GenerateContentResponse
//! (CRLF-delimited, as Google sends it), reasoning parts carry `thought: true`, each `functionCall`
//! arrives whole in its own chunk (with an `id` in agent mode), `usageMetadata` repeats on every chunk, the last chunk has `finishReason`, and
//! there is no `[DONE]`.

use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};

use super::WireFormat;
use crate::completion::Completion;
use crate::tool_call::ToolCall;
use crate::wire::{pad_to, EventKind, WireEvent};

pub(crate) struct Gemini;

fn sse_crlf(json: &Value) -> Bytes {
    Bytes::from(format!("data: {json}\r\n\r\n"))
}

fn word_count(text: &str) -> u32 {
    text.split_whitespace().count() as u32
}

/// Running token counts, reported on every chunk.
#[derive(Default, Clone, Copy)]
struct Counts {
    thoughts: u32,
    candidates: u32,
}

fn usage_metadata(c: &Completion, counts: Counts) -> Value {
    let mut usage = json!({
        "promptTokenCount": c.usage.input_tokens,
        "candidatesTokenCount": counts.candidates,
        "totalTokenCount": c.usage.input_tokens + counts.candidates + counts.thoughts,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": c.usage.input_tokens}]
    });
    if counts.thoughts > 0 {
        usage["thoughtsTokenCount"] = json!(counts.thoughts);
    }
    usage
}

fn response(c: &Completion, parts: Value, finish: bool, counts: Counts) -> Value {
    let mut candidate = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
    if finish {
        candidate["finishReason"] = json!("STOP");
    }
    json!({
        "candidates": [candidate],
        "usageMetadata": usage_metadata(c, counts),
        "modelVersion": c.model,
        "responseId": c.ids.id("", "gemini-response"),
    })
}

fn function_call_part(c: &Completion, tool: &ToolCall) -> Value {
    let mut call = json!({"name": tool.name, "args": tool.arguments});
    if c.agent_step {
        call["id"] = json!(c.call_id(tool, "call_"));
    }
    json!({"functionCall": call})
}

impl WireFormat for Gemini {
    fn stream_content_type(&self, _: &Completion) -> &'static str {
        "text/event-stream"
    }

    fn stream_events(&self, c: &Completion) -> Vec<WireEvent> {
        let mut events = Vec::new();
        let mut counts = Counts::default();
        let content = |parts: Value, counts: Counts| {
            let mut body = response(c, parts, false, counts);
            pad_to(&mut body, "x_mock_padding", c.event_bytes);
            WireEvent::new(EventKind::Content, sse_crlf(&body))
        };
        for text in &c.reasoning_chunks {
            counts.thoughts += word_count(text);
            events.push(content(json!([{"text": text, "thought": true}]), counts));
        }
        for text in &c.answer_chunks {
            counts.candidates += word_count(text);
            events.push(content(json!([{"text": text}]), counts));
        }
        for tool in &c.tool_calls {
            counts.candidates += tool.fragments.len() as u32;
            events.push(content(json!([function_call_part(c, tool)]), counts));
        }
        events.push(WireEvent::new(EventKind::Control, sse_crlf(&response(c, json!([{"text": ""}]), true, counts))));
        events
    }

    fn midstream_error(&self, _: &Completion, _: usize) -> Option<Bytes> {
        Some(sse_crlf(&json!({"error": {"code": 500, "message": "Internal error encountered.", "status": "INTERNAL"}})))
    }

    fn heartbeat(&self) -> Option<Bytes> {
        None
    }

    fn full_body(&self, c: &Completion) -> Value {
        let mut parts = Vec::new();
        if !c.reasoning_chunks.is_empty() {
            parts.push(json!({"text": c.reasoning_text(), "thought": true}));
        }
        if !c.answer_chunks.is_empty() {
            parts.push(json!({"text": c.answer_text()}));
        }
        parts.extend(c.tool_calls.iter().map(|tool| function_call_part(c, tool)));
        let counts =
            Counts { thoughts: c.usage.reasoning_tokens, candidates: c.usage.output_tokens - c.usage.reasoning_tokens };
        response(c, Value::Array(parts), true, counts)
    }

    fn error_body(&self, status: StatusCode, message: &str) -> Value {
        let kind = match status.as_u16() {
            400 => "INVALID_ARGUMENT",
            401 => "UNAUTHENTICATED",
            403 => "PERMISSION_DENIED",
            404 => "NOT_FOUND",
            429 => "RESOURCE_EXHAUSTED",
            503 => "UNAVAILABLE",
            504 => "DEADLINE_EXCEEDED",
            _ => "INTERNAL",
        };
        json!({"error": {"code": status.as_u16(), "message": message, "status": kind}})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::testing::{agent_completion, completion as test_completion, concat, json, parse_sse};

    #[test]
    fn every_chunk_is_a_whole_response_with_usage() {
        let c = test_completion(2, 3, true);
        let bytes = concat(&Gemini.stream_events(&c));
        assert!(std::str::from_utf8(&bytes).unwrap().ends_with("}\r\n\r\n"));
        let chunks: Vec<Value> = parse_sse(&bytes).iter().map(|(_, d)| json(d)).collect();
        assert_eq!(chunks.len(), 2 + 3 + 1 + 1);
        assert!(chunks.iter().all(|c| c["usageMetadata"]["promptTokenCount"].is_u64()));
        let thought: String =
            chunks[..2].iter().map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str().unwrap()).collect();
        assert_eq!(thought, c.reasoning_text());
        assert_eq!(chunks[0]["candidates"][0]["content"]["parts"][0]["thought"], true);
        assert_eq!(chunks[5]["candidates"][0]["content"]["parts"][0]["functionCall"]["name"], "get_weather");
        assert_eq!(chunks.last().unwrap()["candidates"][0]["finishReason"], "STOP");
        assert!(!std::str::from_utf8(&bytes).unwrap().contains("[DONE]"));
    }

    #[test]
    fn parallel_function_calls_with_ids_in_agent_mode() {
        let c = agent_completion(0, 3);
        let chunks: Vec<Value> = parse_sse(&concat(&Gemini.stream_events(&c))).iter().map(|(_, d)| json(d)).collect();
        let calls: Vec<&Value> =
            chunks.iter().filter_map(|c| c["candidates"][0]["content"]["parts"][0].get("functionCall")).collect();
        let names: Vec<&str> = calls.iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["get_weather", "get_time", "get_weather"]);
        assert!(calls.iter().all(|call| call["id"].is_string() && call["args"].is_object()));
        assert_ne!(calls[0]["id"], calls[2]["id"]);
        let body = Gemini.full_body(&c);
        assert_eq!(body["candidates"][0]["content"]["parts"].as_array().unwrap().len(), 3);
        assert_eq!(body["candidates"][0]["finishReason"], "STOP");
        let legacy = test_completion(0, 1, true);
        assert!(Gemini.full_body(&legacy)["candidates"][0]["content"]["parts"][1]["functionCall"].get("id").is_none());
    }
}
