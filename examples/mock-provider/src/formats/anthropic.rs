//! Anthropic Messages: `event: X` + `data: {"type":"X",...}`. `message_start` and a `ping` right
//! after the headers, then content blocks (thinking with `thinking_delta` + `signature_delta`, text
//! with `text_delta`, one tool_use per call with `input_json_delta` fragments), `message_delta` with the stop
//! reason and cumulative `usage.output_tokens`, and `message_stop`.

use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};

use super::WireFormat;
use crate::completion::Completion;
use crate::wire::{pad_to, sse_named, EventKind, WireEvent};

pub(crate) struct Anthropic;

impl Anthropic {
    fn event(kind: EventKind, name: &str, body: Value) -> WireEvent {
        WireEvent::new(kind, sse_named(name, &body))
    }

    fn delta(c: &Completion, index: usize, delta: Value) -> WireEvent {
        let mut body = json!({"type": "content_block_delta", "index": index, "delta": delta});
        pad_to(&mut body, "x_mock_padding", c.event_bytes);
        Self::event(EventKind::Content, "content_block_delta", body)
    }

    fn stop_reason(c: &Completion) -> &'static str {
        if !c.tool_calls.is_empty() {
            "tool_use"
        } else {
            "end_turn"
        }
    }

    fn start_usage(c: &Completion) -> Value {
        json!({
            "input_tokens": c.usage.input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": c.usage.cached_tokens,
            "output_tokens": 1,
            "service_tier": "standard"
        })
    }
}

impl WireFormat for Anthropic {
    fn stream_content_type(&self, _: &Completion) -> &'static str {
        "text/event-stream; charset=utf-8"
    }

    fn stream_events(&self, c: &Completion) -> Vec<WireEvent> {
        let mut events = vec![
            Self::event(
                EventKind::Preamble,
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": c.ids.id("msg_", "message"), "type": "message", "role": "assistant", "model": c.model,
                    "content": [], "stop_reason": null, "stop_sequence": null, "usage": Self::start_usage(c)}}),
            ),
            Self::event(EventKind::Preamble, "ping", json!({"type": "ping"})),
        ];
        let mut index = 0;
        if !c.reasoning_chunks.is_empty() {
            events.push(Self::event(
                EventKind::Control,
                "content_block_start",
                json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            ));
            for text in &c.reasoning_chunks {
                events.push(Self::delta(c, index, json!({"type": "thinking_delta", "thinking": text})));
            }
            events.push(Self::event(
                EventKind::Control,
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "signature_delta", "signature": c.ids.signature()}}),
            ));
            events.push(Self::event(
                EventKind::Control,
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
            index += 1;
        }
        if !c.answer_chunks.is_empty() {
            events.push(Self::event(
                EventKind::Control,
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
            ));
            for text in &c.answer_chunks {
                events.push(Self::delta(c, index, json!({"type": "text_delta", "text": text})));
            }
            events.push(Self::event(
                EventKind::Control,
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
            index += 1;
        }
        for tool in &c.tool_calls {
            events.push(Self::event(
                EventKind::Control,
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": {
                    "type": "tool_use", "id": c.call_id(tool, "toolu_"), "name": tool.name, "input": {}}}),
            ));
            for fragment in &tool.fragments {
                events.push(Self::delta(c, index, json!({"type": "input_json_delta", "partial_json": fragment})));
            }
            events.push(Self::event(
                EventKind::Control,
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
            index += 1;
        }
        events.push(Self::event(
            EventKind::Control,
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": Self::stop_reason(c), "stop_sequence": null},
                "usage": {"output_tokens": c.usage.output_tokens}}),
        ));
        events.push(Self::event(EventKind::Control, "message_stop", json!({"type": "message_stop"})));
        events
    }

    fn midstream_error(&self, _: &Completion, _: usize) -> Option<Bytes> {
        Some(sse_named(
            "error",
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ))
    }

    fn heartbeat(&self) -> Option<Bytes> {
        Some(sse_named("ping", &json!({"type": "ping"})))
    }

    fn full_body(&self, c: &Completion) -> Value {
        let mut content = Vec::new();
        if !c.reasoning_chunks.is_empty() {
            content.push(json!({"type": "thinking", "thinking": c.reasoning_text(), "signature": c.ids.signature()}));
        }
        if !c.answer_chunks.is_empty() {
            content.push(json!({"type": "text", "text": c.answer_text()}));
        }
        for tool in &c.tool_calls {
            content.push(
                json!({"type": "tool_use", "id": c.call_id(tool, "toolu_"), "name": tool.name, "input": tool.arguments}),
            );
        }
        let mut usage = Self::start_usage(c);
        usage["output_tokens"] = json!(c.usage.output_tokens);
        json!({
            "id": c.ids.id("msg_", "message"), "type": "message", "role": "assistant", "model": c.model,
            "content": content, "stop_reason": Self::stop_reason(c), "stop_sequence": null, "usage": usage,
        })
    }

    fn error_body(&self, status: StatusCode, message: &str) -> Value {
        let kind = match status.as_u16() {
            400 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            529 => "overloaded_error",
            _ => "api_error",
        };
        json!({"type": "error", "error": {"type": kind, "message": message}})
    }

    fn request_id_header(&self) -> &'static str {
        "request-id"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::testing::{agent_completion, completion as test_completion, concat, json, parse_sse};

    #[test]
    fn event_order_and_text() {
        let c = test_completion(2, 3, true);
        let parsed = parse_sse(&concat(&Anthropic.stream_events(&c)));
        let names: Vec<&str> = parsed.iter().map(|(n, _)| n.as_str()).collect();
        let fragments = c.tool_calls[0].fragments.len();
        let mut expected = vec!["message_start", "ping", "content_block_start"];
        expected.extend(std::iter::repeat_n("content_block_delta", 2 + 1));
        expected.extend(["content_block_stop", "content_block_start"]);
        expected.extend(std::iter::repeat_n("content_block_delta", 3));
        expected.extend(["content_block_stop", "content_block_start"]);
        expected.extend(std::iter::repeat_n("content_block_delta", fragments));
        expected.extend(["content_block_stop", "message_delta", "message_stop"]);
        assert_eq!(names, expected);
        for (name, data) in &parsed {
            assert_eq!(json(data)["type"], name.as_str(), "data type matches event name");
        }
        let text: String =
            parsed.iter().filter_map(|(_, d)| json(d)["delta"]["text"].as_str().map(str::to_owned)).collect();
        assert_eq!(text, c.answer_text());
        let partial: String =
            parsed.iter().filter_map(|(_, d)| json(d)["delta"]["partial_json"].as_str().map(str::to_owned)).collect();
        assert_eq!(serde_json::from_str::<Value>(&partial).unwrap(), c.tool_calls[0].arguments);
        let message_delta = json(&parsed[parsed.len() - 2].1);
        assert_eq!(message_delta["delta"]["stop_reason"], "tool_use");
        assert_eq!(message_delta["usage"]["output_tokens"], c.usage.output_tokens);
    }

    #[test]
    fn parallel_tool_use_blocks() {
        let c = agent_completion(1, 2);
        let parsed: Vec<Value> =
            parse_sse(&concat(&Anthropic.stream_events(&c))).iter().map(|(_, d)| json(d)).collect();
        let starts: Vec<&Value> = parsed.iter().filter(|v| v["type"] == "content_block_start").collect();
        let kinds: Vec<&str> = starts.iter().map(|v| v["content_block"]["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["thinking", "tool_use", "tool_use"]);
        for (start, tool) in starts[1..].iter().zip(&c.tool_calls) {
            assert_eq!(start["content_block"]["input"], json!({}));
            assert!(start["content_block"]["id"].as_str().unwrap().starts_with("toolu_"));
            let partial: String = parsed
                .iter()
                .filter(|v| v["index"] == start["index"])
                .filter_map(|v| v["delta"]["partial_json"].as_str().map(str::to_owned))
                .collect();
            assert_eq!(partial, tool.arguments_json);
        }
        assert_ne!(starts[1]["content_block"]["id"], starts[2]["content_block"]["id"]);
        assert_eq!(Anthropic.full_body(&c)["stop_reason"], "tool_use");
    }
}
