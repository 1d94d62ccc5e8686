//! OpenAI Chat Completions: `data: {chat.completion.chunk}` lines, a role-only first chunk, content /
//! reasoning / tool-call deltas (per call an opening delta with `index`, `id`, `type` and the name,
//! then `index` + argument fragments; parallel calls take indexes 0..N-1), a finish chunk, a usage chunk (`choices: []`) only when
//! `stream_options.include_usage`, then `data: [DONE]`.

use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};

use super::{openai_error_body, WireFormat};
use crate::completion::Completion;
use crate::wire::{pad_to, sse_data, EventKind, WireEvent};

pub(crate) struct OpenAiChat;

const SYSTEM_FINGERPRINT: &str = "fp_tokentap_mock";

impl OpenAiChat {
    fn chunk(c: &Completion, delta: Value, finish_reason: Option<&str>) -> Value {
        let mut chunk = json!({
            "id": c.ids.id("chatcmpl-", "chat"),
            "object": "chat.completion.chunk",
            "created": c.created,
            "model": c.model,
            "service_tier": "default",
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        });
        if c.include_usage {
            // With include_usage, OpenAI sends `usage: null` on every chunk but the last.
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    fn content(c: &Completion, delta: Value) -> WireEvent {
        let mut chunk = Self::chunk(c, delta, None);
        pad_to(&mut chunk, "obfuscation", c.event_bytes);
        WireEvent::new(EventKind::Content, sse_data(&chunk))
    }

    fn usage(c: &Completion) -> Value {
        json!({
            "prompt_tokens": c.usage.input_tokens,
            "completion_tokens": c.usage.output_tokens,
            "total_tokens": c.usage.total_tokens(),
            "prompt_tokens_details": {"cached_tokens": c.usage.cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": c.usage.reasoning_tokens,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0
            }
        })
    }

    fn finish_reason(c: &Completion) -> &'static str {
        if !c.tool_calls.is_empty() {
            "tool_calls"
        } else {
            "stop"
        }
    }
}

impl WireFormat for OpenAiChat {
    fn stream_content_type(&self, _: &Completion) -> &'static str {
        "text/event-stream; charset=utf-8"
    }

    fn stream_events(&self, c: &Completion) -> Vec<WireEvent> {
        let mut events = Vec::new();
        let role = Self::chunk(c, json!({"role": "assistant", "content": "", "refusal": null}), None);
        events.push(WireEvent::new(EventKind::Control, sse_data(&role)));
        for text in &c.reasoning_chunks {
            let mut delta = json!({"content": null});
            delta[c.reasoning_field.key()] = json!(text);
            events.push(Self::content(c, delta));
        }
        for text in &c.answer_chunks {
            events.push(Self::content(c, json!({"content": text})));
        }
        for tool in &c.tool_calls {
            events.push(Self::content(
                c,
                json!({"tool_calls": [{"index": tool.index, "id": c.call_id(tool, "call_"), "type": "function",
                    "function": {"name": tool.name, "arguments": ""}}]}),
            ));
            for fragment in &tool.fragments {
                let delta = json!({"tool_calls": [{"index": tool.index, "function": {"arguments": fragment}}]});
                events.push(Self::content(c, delta));
            }
        }
        let finish = Self::chunk(c, json!({}), Some(Self::finish_reason(c)));
        events.push(WireEvent::new(EventKind::Control, sse_data(&finish)));
        if c.include_usage {
            let mut usage = Self::chunk(c, Value::Null, None);
            usage["choices"] = json!([]);
            usage["usage"] = Self::usage(c);
            events.push(WireEvent::new(EventKind::Control, sse_data(&usage)));
        }
        events.push(WireEvent::new(EventKind::Control, Bytes::from_static(b"data: [DONE]\n\n")));
        events
    }

    fn midstream_error(&self, _: &Completion, _: usize) -> Option<Bytes> {
        // OpenAI reports a failure inside a stream as a data payload with a top-level `error`;
        // openai-python raises APIError on it. No [DONE] follows.
        let body = json!({"error": {"message": "The server had an error while processing your request.",
            "type": "server_error", "param": null, "code": null}});
        Some(sse_data(&body))
    }

    fn heartbeat(&self) -> Option<Bytes> {
        Some(Bytes::from_static(b": keep-alive\n\n"))
    }

    fn full_body(&self, c: &Completion) -> Value {
        // A message with only tool calls has `content: null`, as OpenAI sends it.
        let content =
            if c.answer_chunks.is_empty() && !c.tool_calls.is_empty() { Value::Null } else { json!(c.answer_text()) };
        let mut message = json!({"role": "assistant", "content": content, "refusal": null, "annotations": []});
        if !c.reasoning_chunks.is_empty() {
            message[c.reasoning_field.key()] = json!(c.reasoning_text());
        }
        if !c.tool_calls.is_empty() {
            let calls: Vec<Value> = c
                .tool_calls
                .iter()
                .map(|tool| {
                    json!({"id": c.call_id(tool, "call_"), "type": "function",
                        "function": {"name": tool.name, "arguments": tool.arguments_json}})
                })
                .collect();
            message["tool_calls"] = Value::Array(calls);
        }
        json!({
            "id": c.ids.id("chatcmpl-", "chat"),
            "object": "chat.completion",
            "created": c.created,
            "model": c.model,
            "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": Self::finish_reason(c)}],
            "usage": Self::usage(c),
            "service_tier": "default",
            "system_fingerprint": SYSTEM_FINGERPRINT,
        })
    }

    fn error_body(&self, status: StatusCode, message: &str) -> Value {
        openai_error_body(status, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::testing::{agent_completion, completion as test_completion, concat, json, parse_sse};

    #[test]
    fn stream_has_role_chunk_deltas_tool_call_usage_and_done() {
        let c = test_completion(3, 5, true);
        let events = OpenAiChat.stream_events(&c);
        let parsed = parse_sse(&concat(&events));
        assert_eq!(parsed.last().unwrap().1, "[DONE]");
        let chunks: Vec<Value> = parsed[..parsed.len() - 1].iter().map(|(_, d)| json(d)).collect();
        assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role":"assistant","content":"","refusal":null}));
        let delta_text =
            |key: &str| -> String { chunks.iter().filter_map(|c| c["choices"][0]["delta"][key].as_str()).collect() };
        assert_eq!(delta_text("content"), c.answer_text());
        assert_eq!(delta_text("reasoning_content"), c.reasoning_text());
        let args: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
            .collect();
        assert_eq!(args, c.tool_calls[0].arguments_json);
        let finish = &chunks[chunks.len() - 2];
        assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
        let usage = chunks.last().unwrap();
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["completion_tokens_details"]["reasoning_tokens"], 3);
        assert!(chunks.iter().all(|c| c["id"] == chunks[0]["id"]));
        let content_events = events.iter().filter(|e| e.kind == EventKind::Content).count();
        assert_eq!(content_events, 3 + 5 + 1 + c.tool_calls[0].fragments.len());
    }

    #[test]
    fn parallel_calls_have_their_own_index_id_and_fragments() {
        let c = agent_completion(0, 3);
        let parsed = parse_sse(&concat(&OpenAiChat.stream_events(&c)));
        let deltas: Vec<Value> = parsed
            .iter()
            .filter(|(_, d)| d != "[DONE]")
            .filter_map(|(_, d)| json(d)["choices"][0]["delta"]["tool_calls"].get(0).cloned())
            .collect();
        for tool in &c.tool_calls {
            let own: Vec<&Value> = deltas.iter().filter(|d| d["index"] == tool.index).collect();
            assert_eq!(own[0]["id"], c.call_id(tool, "call_"));
            assert_eq!((&own[0]["type"], &own[0]["function"]["name"]), (&json!("function"), &json!(tool.name)));
            assert!(own[1..].iter().all(|d| d.as_object().unwrap().len() == 2 && d.get("id").is_none()));
            let args: String = own.iter().map(|d| d["function"]["arguments"].as_str().unwrap()).collect();
            assert_eq!(args, tool.arguments_json);
        }
        let body = OpenAiChat.full_body(&c);
        let message = &body["choices"][0]["message"];
        assert_eq!(message["content"], Value::Null);
        assert_eq!(message["tool_calls"].as_array().unwrap().len(), 3);
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn no_usage_chunk_without_include_usage() {
        let mut c = test_completion(0, 2, false);
        c.include_usage = false;
        let parsed = parse_sse(&concat(&OpenAiChat.stream_events(&c)));
        assert!(parsed.iter().filter(|(_, d)| d != "[DONE]").all(|(_, d)| json(d).get("usage").is_none()));
        assert!(parsed.iter().all(|(_, d)| !d.contains("\"choices\":[]")));
    }
}
