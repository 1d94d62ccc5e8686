//! OpenAI Responses: `event: TYPE` + `data: {"type":TYPE,"sequence_number":N,...}`.
//! `response.created` and `response.in_progress` right after the headers, then output items
//! (reasoning with summary text deltas, a message with output_text deltas, one function_call item
//! per tool call with argument deltas), each opened and closed with their added/done events, then `response.completed`
//! carrying the full response and its usage.

use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};

use super::{openai_error_body, WireFormat};
use crate::completion::Completion;
use crate::wire::{pad_to, sse_named, EventKind, WireEvent};

pub(crate) struct OpenAiResponses;

/// Builds the event list, numbering `sequence_number` in emission order.
struct EventWriter<'a> {
    completion: &'a Completion,
    events: Vec<WireEvent>,
}

impl EventWriter<'_> {
    fn push(&mut self, kind: EventKind, mut body: Value) {
        let name = body["type"].as_str().unwrap_or_default().to_owned();
        body["sequence_number"] = json!(self.events.len());
        if kind == EventKind::Content {
            pad_to(&mut body, "obfuscation", self.completion.event_bytes);
        }
        self.events.push(WireEvent::new(kind, sse_named(&name, &body)));
    }
}

fn response_object(c: &Completion, status: &str, output: Vec<Value>, usage: Value) -> Value {
    json!({
        "id": c.ids.id("resp_", "response"),
        "object": "response",
        "created_at": c.created,
        "status": status,
        "background": false,
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "max_output_tokens": null,
        "model": c.model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "service_tier": "default",
        "store": true,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": null,
        "metadata": {}
    })
}

fn usage(c: &Completion) -> Value {
    json!({
        "input_tokens": c.usage.input_tokens,
        "input_tokens_details": {"cached_tokens": c.usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": c.usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": c.usage.reasoning_tokens},
        "total_tokens": c.usage.total_tokens()
    })
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text})
}

/// The finished output items, as in `response.completed` and the non-streaming body.
fn output_items(c: &Completion) -> Vec<Value> {
    let mut items = Vec::new();
    if !c.reasoning_chunks.is_empty() {
        items.push(json!({"id": c.ids.id("rs_", "reasoning"), "type": "reasoning",
            "summary": [{"type": "summary_text", "text": c.reasoning_text()}]}));
    }
    if !c.answer_chunks.is_empty() {
        items.push(json!({"id": c.ids.id("msg_", "message"), "type": "message", "status": "completed",
            "role": "assistant", "content": [output_text(&c.answer_text())]}));
    }
    for tool in &c.tool_calls {
        items.push(json!({"id": c.call_item_id(tool), "type": "function_call", "status": "completed",
            "arguments": tool.arguments_json, "call_id": c.call_id(tool, "call_"), "name": tool.name}));
    }
    items
}

impl WireFormat for OpenAiResponses {
    fn stream_content_type(&self, _: &Completion) -> &'static str {
        "text/event-stream; charset=utf-8"
    }

    fn stream_events(&self, c: &Completion) -> Vec<WireEvent> {
        use EventKind::{Content, Control, Preamble};
        let mut w = EventWriter { completion: c, events: Vec::new() };
        let in_progress = response_object(c, "in_progress", vec![], Value::Null);
        w.push(Preamble, json!({"type": "response.created", "response": in_progress}));
        w.push(Preamble, json!({"type": "response.in_progress", "response": in_progress}));
        let finished = output_items(c);
        let mut output_index = 0;

        if !c.reasoning_chunks.is_empty() {
            let item_id = c.ids.id("rs_", "reasoning");
            let text = c.reasoning_text();
            w.push(
                Control,
                json!({"type": "response.output_item.added", "output_index": output_index,
                "item": {"id": item_id, "type": "reasoning", "summary": []}}),
            );
            w.push(
                Control,
                json!({"type": "response.reasoning_summary_part.added", "item_id": item_id,
                "output_index": output_index, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
            );
            for delta in &c.reasoning_chunks {
                w.push(
                    Content,
                    json!({"type": "response.reasoning_summary_text.delta", "item_id": item_id,
                    "output_index": output_index, "summary_index": 0, "delta": delta}),
                );
            }
            w.push(
                Control,
                json!({"type": "response.reasoning_summary_text.done", "item_id": item_id,
                "output_index": output_index, "summary_index": 0, "text": text}),
            );
            w.push(
                Control,
                json!({"type": "response.reasoning_summary_part.done", "item_id": item_id,
                "output_index": output_index, "summary_index": 0, "part": {"type": "summary_text", "text": text}}),
            );
            w.push(
                Control,
                json!({"type": "response.output_item.done", "output_index": output_index,
                "item": finished[output_index]}),
            );
            output_index += 1;
        }
        if !c.answer_chunks.is_empty() {
            let item_id = c.ids.id("msg_", "message");
            let text = c.answer_text();
            w.push(Control, json!({"type": "response.output_item.added", "output_index": output_index,
                "item": {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}}));
            w.push(
                Control,
                json!({"type": "response.content_part.added", "item_id": item_id,
                "output_index": output_index, "content_index": 0, "part": output_text("")}),
            );
            for delta in &c.answer_chunks {
                w.push(
                    Content,
                    json!({"type": "response.output_text.delta", "item_id": item_id,
                    "output_index": output_index, "content_index": 0, "delta": delta, "logprobs": []}),
                );
            }
            w.push(
                Control,
                json!({"type": "response.output_text.done", "item_id": item_id,
                "output_index": output_index, "content_index": 0, "text": text, "logprobs": []}),
            );
            w.push(
                Control,
                json!({"type": "response.content_part.done", "item_id": item_id,
                "output_index": output_index, "content_index": 0, "part": output_text(&text)}),
            );
            w.push(
                Control,
                json!({"type": "response.output_item.done", "output_index": output_index,
                "item": finished[output_index]}),
            );
            output_index += 1;
        }
        for tool in &c.tool_calls {
            let item_id = c.call_item_id(tool);
            w.push(
                Control,
                json!({"type": "response.output_item.added", "output_index": output_index,
                "item": {"id": item_id, "type": "function_call", "status": "in_progress", "arguments": "",
                    "call_id": c.call_id(tool, "call_"), "name": tool.name}}),
            );
            for delta in &tool.fragments {
                w.push(
                    Content,
                    json!({"type": "response.function_call_arguments.delta", "item_id": item_id,
                    "output_index": output_index, "delta": delta}),
                );
            }
            w.push(
                Control,
                json!({"type": "response.function_call_arguments.done", "item_id": item_id,
                "output_index": output_index, "name": tool.name, "arguments": tool.arguments_json}),
            );
            w.push(
                Control,
                json!({"type": "response.output_item.done", "output_index": output_index,
                "item": finished[output_index]}),
            );
            output_index += 1;
        }
        w.push(
            Control,
            json!({"type": "response.completed",
            "response": response_object(c, "completed", finished.clone(), usage(c))}),
        );
        w.events
    }

    fn midstream_error(&self, _: &Completion, events_before: usize) -> Option<Bytes> {
        Some(sse_named(
            "error",
            &json!({"type": "error", "code": "server_error", "param": null, "sequence_number": events_before,
                "message": "The server had an error while processing your request."}),
        ))
    }

    fn heartbeat(&self) -> Option<Bytes> {
        Some(Bytes::from_static(b": keep-alive\n\n"))
    }

    fn full_body(&self, c: &Completion) -> Value {
        response_object(c, "completed", output_items(c), usage(c))
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
    fn sequence_numbers_increase_and_names_match() {
        let c = test_completion(2, 3, true);
        let parsed = parse_sse(&concat(&OpenAiResponses.stream_events(&c)));
        for (i, (name, data)) in parsed.iter().enumerate() {
            let v = json(data);
            assert_eq!(v["type"], name.as_str());
            assert_eq!(v["sequence_number"], i);
        }
        let names: Vec<&str> = parsed.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(&names[..2], ["response.created", "response.in_progress"]);
        assert_eq!(*names.last().unwrap(), "response.completed");
        let text: String = parsed
            .iter()
            .filter(|(n, _)| n == "response.output_text.delta")
            .map(|(_, d)| json(d)["delta"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(text, c.answer_text());
        let completed = json(&parsed.last().unwrap().1);
        assert_eq!(completed["response"]["usage"]["output_tokens_details"]["reasoning_tokens"], 2);
        assert_eq!(completed["response"]["output"].as_array().unwrap().len(), 3);
        assert!(names.contains(&"response.reasoning_summary_text.delta"));
        assert!(names.contains(&"response.function_call_arguments.done"));
    }

    #[test]
    fn parallel_calls_are_separate_items() {
        let c = agent_completion(2, 2);
        let parsed = parse_sse(&concat(&OpenAiResponses.stream_events(&c)));
        let added: Vec<Value> = parsed
            .iter()
            .filter(|(n, _)| n == "response.output_item.added")
            .map(|(_, d)| json(d))
            .filter(|v| v["item"]["type"] == "function_call")
            .collect();
        assert_eq!(added.len(), 2);
        for (event, tool) in added.iter().zip(&c.tool_calls) {
            let item_id = event["item"]["id"].as_str().unwrap();
            assert!(item_id.starts_with("fc_") && event["item"]["call_id"].as_str().unwrap().starts_with("call_"));
            assert_eq!(event["item"]["arguments"], "");
            let args: String = parsed
                .iter()
                .map(|(_, d)| json(d))
                .filter(|v| v["type"] == "response.function_call_arguments.delta" && v["item_id"] == item_id)
                .map(|v| v["delta"].as_str().unwrap().to_owned())
                .collect();
            assert_eq!(args, tool.arguments_json);
        }
        assert_ne!(added[0]["item"]["call_id"], added[1]["item"]["call_id"]);
        assert_eq!((added[0]["output_index"].as_u64(), added[1]["output_index"].as_u64()), (Some(1), Some(2)));
        let completed = json(&parsed.last().unwrap().1);
        assert_eq!(completed["response"]["status"], "completed");
        assert_eq!(completed["response"]["output"].as_array().unwrap().len(), 3);
    }
}
