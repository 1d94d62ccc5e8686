//! Agent mode end to end, for OpenAI chat, OpenAI Responses, Anthropic Messages and Gemini, streaming
//! and not: each test plays the client of a tool loop, reassembles the tool calls from the wire,
//! sends the tool results back and checks what the mock does next.

use std::collections::HashSet;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokentap_mock::{vocabulary, MockConfig, MockServer};
use tokio::net::TcpStream;

const ANSWER_TOKENS: u32 = 8;

async fn start() -> SocketAddr {
    let config = MockConfig { ttft_ms: 1, itl_ms: 0, tokens: ANSWER_TOKENS, ..MockConfig::default() };
    let server = MockServer::bind("127.0.0.1:0".parse().unwrap(), config).await.unwrap();
    let addr = server.local_addr();
    tokio::spawn(server.run());
    addr
}

/// Sends one request on a fresh HTTP/1.1 connection and reads the whole body.
async fn send(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &Value) -> Bytes {
    let mut builder = Request::post(path).header("host", "mock").header("content-type", "application/json");
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let request = builder.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    response.into_body().collect().await.unwrap().to_bytes()
}

/// SSE `data:` payloads as JSON (OpenAI's `[DONE]` left out).
fn sse_json(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|block| block.lines().find_map(|l| l.strip_prefix("data: ")).map(str::to_owned))
        .filter(|data| data != "[DONE]")
        .map(|data| serde_json::from_str(&data).unwrap())
        .collect()
}

/// What the answer contained, in the order it arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Reasoning,
    Text,
    Call,
}

/// One reassembled tool call.
#[derive(Clone, Debug)]
struct Call {
    id: String,
    /// Responses `fc_…` item id.
    item_id: Option<String>,
    name: String,
    arguments: Value,
    /// Argument fragments received (streaming, fragmenting formats only).
    fragments: usize,
}

#[derive(Debug, Default)]
struct Reply {
    calls: Vec<Call>,
    text: String,
    finish: String,
    order: Vec<Part>,
}

impl Reply {
    fn saw(&mut self, part: Part) {
        if self.order.last() != Some(&part) {
            self.order.push(part);
        }
    }

    fn ids(&self) -> HashSet<String> {
        self.calls.iter().map(|c| c.id.clone()).collect()
    }
}

/// Parses argument JSON that arrived in fragments: it must be one valid JSON object.
fn arguments(text: &str) -> Value {
    let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("arguments {text:?}: {e}"));
    assert!(value.is_object(), "{text}");
    value
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Chat,
    Responses,
    Anthropic,
    Gemini,
}

const FORMATS: [Format; 4] = [Format::Chat, Format::Responses, Format::Anthropic, Format::Gemini];

/// Every (format, streaming) pair.
fn cases() -> impl Iterator<Item = (Format, bool)> {
    FORMATS.into_iter().flat_map(|f| [(f, true), (f, false)])
}

fn weather_schema() -> Value {
    json!({"type": "object", "additionalProperties": false, "required": ["city", "unit"], "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}})
}

fn time_schema() -> Value {
    json!({"type": "object", "required": ["zone"], "properties": {"zone": {"type": "string"}}})
}

impl Format {
    fn path(self, stream: bool) -> &'static str {
        match (self, stream) {
            (Format::Chat, _) => "/v1/chat/completions",
            (Format::Responses, _) => "/v1/responses",
            (Format::Anthropic, _) => "/v1/messages",
            (Format::Gemini, true) => "/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
            (Format::Gemini, false) => "/v1beta/models/gemini-x:generateContent",
        }
    }

    /// Whether tool arguments stream in fragments (Gemini sends them whole).
    fn fragments_arguments(self) -> bool {
        self != Format::Gemini
    }

    fn tool_finish(self) -> &'static str {
        match self {
            Format::Chat => "tool_calls",
            Format::Responses => "completed",
            Format::Anthropic => "tool_use",
            Format::Gemini => "STOP",
        }
    }

    fn answer_finish(self) -> &'static str {
        match self {
            Format::Chat => "stop",
            Format::Responses => "completed",
            Format::Anthropic => "end_turn",
            Format::Gemini => "STOP",
        }
    }

    fn call_prefix(self) -> &'static str {
        match self {
            Format::Anthropic => "toolu_",
            _ => "call_",
        }
    }

    /// A request whose last input is a user message, offering `get_weather` and `get_time` if `tools`.
    fn request(self, stream: bool, tools: bool) -> Value {
        let declared = [("get_weather", weather_schema()), ("get_time", time_schema())];
        let mut body = match self {
            Format::Chat => json!({"model": "m", "stream": stream, "messages": [
                {"role": "system", "content": "be brief"}, {"role": "user", "content": "weather?"}]}),
            Format::Responses => json!({"model": "m", "stream": stream, "input": "weather?"}),
            Format::Anthropic => json!({"model": "m", "max_tokens": 100, "stream": stream,
                "messages": [{"role": "user", "content": "weather?"}]}),
            Format::Gemini => json!({"contents": [{"role": "user", "parts": [{"text": "weather?"}]}]}),
        };
        if tools {
            body["tools"] = match self {
                Format::Chat => declared
                    .iter()
                    .map(|(n, s)| json!({"type": "function", "function": {"name": n, "parameters": s}}))
                    .collect(),
                Format::Responses => {
                    let mut tools: Vec<Value> = vec![json!({"type": "web_search"})];
                    tools.extend(declared.iter().map(|(n, s)| json!({"type": "function", "name": n, "parameters": s})));
                    Value::Array(tools)
                }
                Format::Anthropic => declared.iter().map(|(n, s)| json!({"name": n, "input_schema": s})).collect(),
                Format::Gemini => json!([{"functionDeclarations":
                    declared.iter().map(|(n, s)| json!({"name": n, "parameters": s})).collect::<Vec<_>>()}]),
            };
        }
        body
    }

    fn parse(self, stream: bool, bytes: &[u8]) -> Reply {
        match (self, stream) {
            (Format::Chat, true) => parse_chat_stream(&sse_json(bytes)),
            (Format::Chat, false) => parse_chat_body(&serde_json::from_slice(bytes).unwrap()),
            (Format::Responses, true) => parse_responses_stream(&sse_json(bytes)),
            (Format::Responses, false) => parse_responses_body(&serde_json::from_slice(bytes).unwrap()),
            (Format::Anthropic, true) => parse_anthropic_stream(&sse_json(bytes)),
            (Format::Anthropic, false) => parse_anthropic_body(&serde_json::from_slice(bytes).unwrap()),
            (Format::Gemini, true) => {
                let mut reply = Reply::default();
                for chunk in sse_json(bytes) {
                    gemini_chunk(&mut reply, &chunk);
                }
                reply
            }
            (Format::Gemini, false) => {
                let mut reply = Reply::default();
                gemini_chunk(&mut reply, &serde_json::from_slice(bytes).unwrap());
                reply
            }
        }
    }

    /// `request` with the model's tool calls of `reply` and their results appended, as a client's
    /// tool loop sends it next.
    fn follow_up(self, mut request: Value, reply: &Reply) -> Value {
        match self {
            Format::Chat => {
                let messages = request["messages"].as_array_mut().unwrap();
                let calls: Vec<Value> = reply
                    .calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments.to_string()}})
                    })
                    .collect();
                messages.push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
                for call in &reply.calls {
                    messages.push(json!({"role": "tool", "tool_call_id": call.id, "content": "sunny"}));
                }
            }
            Format::Responses => {
                if let Some(text) = request["input"].as_str() {
                    request["input"] = json!([{"role": "user", "content": text}]);
                }
                let input = request["input"].as_array_mut().unwrap();
                for call in &reply.calls {
                    input.push(json!({"type": "function_call", "id": call.item_id, "call_id": call.id,
                        "name": call.name, "arguments": call.arguments.to_string()}));
                }
                for call in &reply.calls {
                    input.push(json!({"type": "function_call_output", "call_id": call.id, "output": "sunny"}));
                }
            }
            Format::Anthropic => {
                let messages = request["messages"].as_array_mut().unwrap();
                let uses: Vec<Value> = reply
                    .calls
                    .iter()
                    .map(|c| json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}))
                    .collect();
                let results: Vec<Value> = reply
                    .calls
                    .iter()
                    .map(|c| json!({"type": "tool_result", "tool_use_id": c.id, "content": "sunny"}))
                    .collect();
                messages.push(json!({"role": "assistant", "content": uses}));
                messages.push(json!({"role": "user", "content": results}));
            }
            Format::Gemini => {
                let contents = request["contents"].as_array_mut().unwrap();
                let calls: Vec<Value> = reply
                    .calls
                    .iter()
                    .map(|c| json!({"functionCall": {"name": c.name, "id": c.id, "args": c.arguments}}))
                    .collect();
                let responses: Vec<Value> = reply
                    .calls
                    .iter()
                    .map(|c| json!({"functionResponse": {"name": c.name, "id": c.id, "response": {"sky": "sunny"}}}))
                    .collect();
                contents.push(json!({"role": "model", "parts": calls}));
                contents.push(json!({"role": "user", "parts": responses}));
            }
        }
        request
    }

    /// `request` after a finished turn: the final answer, then a new user message.
    fn next_user_message(self, mut request: Value, answer: &str) -> Value {
        match self {
            Format::Chat | Format::Anthropic => {
                let messages = request["messages"].as_array_mut().unwrap();
                messages.push(json!({"role": "assistant", "content": answer}));
                messages.push(json!({"role": "user", "content": "and tomorrow?"}));
            }
            Format::Responses => {
                let input = request["input"].as_array_mut().unwrap();
                input.push(json!({"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": answer}]}));
                input.push(json!({"type": "message", "role": "user", "content": "and tomorrow?"}));
            }
            Format::Gemini => {
                let contents = request["contents"].as_array_mut().unwrap();
                contents.push(json!({"role": "model", "parts": [{"text": answer}]}));
                contents.push(json!({"role": "user", "parts": [{"text": "and tomorrow?"}]}));
            }
        }
        request
    }
}

fn parse_chat_stream(chunks: &[Value]) -> Reply {
    let mut reply = Reply::default();
    for chunk in chunks.iter().filter(|c| !c["choices"].as_array().unwrap().is_empty()) {
        let choice = &chunk["choices"][0];
        let delta = &choice["delta"];
        if delta["reasoning_content"].as_str().is_some_and(|t| !t.is_empty()) {
            reply.saw(Part::Reasoning);
        }
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            reply.text.push_str(text);
            reply.saw(Part::Text);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap() as usize;
            if let Some(id) = call["id"].as_str() {
                // The opening fragment: index, id, type and name.
                assert_eq!(index, reply.calls.len(), "parallel calls are numbered 0..N-1");
                assert_eq!(call["type"], "function");
                reply.calls.push(Call {
                    id: id.to_owned(),
                    item_id: None,
                    name: call["function"]["name"].as_str().unwrap().to_owned(),
                    arguments: json!(call["function"]["arguments"].as_str().unwrap()),
                    fragments: 0,
                });
                reply.saw(Part::Call);
            } else {
                // Later fragments: only index and function.arguments.
                let keys: Vec<&String> = call.as_object().unwrap().keys().collect();
                assert_eq!(keys, ["function", "index"], "{call}");
                assert_eq!(call["function"].as_object().unwrap().len(), 1, "{call}");
                let target = &mut reply.calls[index];
                let so_far = target.arguments.as_str().unwrap().to_owned();
                target.arguments = json!(so_far + call["function"]["arguments"].as_str().unwrap());
                target.fragments += 1;
            }
        }
        if let Some(finish) = choice["finish_reason"].as_str() {
            reply.finish = finish.to_owned();
        }
    }
    for call in &mut reply.calls {
        call.arguments = arguments(call.arguments.as_str().unwrap());
    }
    reply
}

fn parse_chat_body(body: &Value) -> Reply {
    let mut reply = Reply::default();
    let message = &body["choices"][0]["message"];
    if message["reasoning_content"].is_string() {
        reply.saw(Part::Reasoning);
    }
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        reply.text = text.to_owned();
        reply.saw(Part::Text);
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        assert_eq!(call["type"], "function");
        reply.calls.push(Call {
            id: call["id"].as_str().unwrap().to_owned(),
            item_id: None,
            name: call["function"]["name"].as_str().unwrap().to_owned(),
            arguments: arguments(call["function"]["arguments"].as_str().unwrap()),
            fragments: 0,
        });
        reply.saw(Part::Call);
    }
    reply.finish = body["choices"][0]["finish_reason"].as_str().unwrap().to_owned();
    reply
}

fn parse_responses_stream(events: &[Value]) -> Reply {
    let mut reply = Reply::default();
    let mut arguments_by_item: Vec<(String, String)> = Vec::new();
    for event in events {
        match event["type"].as_str().unwrap() {
            "response.reasoning_summary_text.delta" => reply.saw(Part::Reasoning),
            "response.output_text.delta" => {
                reply.text.push_str(event["delta"].as_str().unwrap());
                reply.saw(Part::Text);
            }
            "response.output_item.added" if event["item"]["type"] == "function_call" => {
                let item = &event["item"];
                assert_eq!(item["arguments"], "");
                reply.calls.push(Call {
                    id: item["call_id"].as_str().unwrap().to_owned(),
                    item_id: Some(item["id"].as_str().unwrap().to_owned()),
                    name: item["name"].as_str().unwrap().to_owned(),
                    arguments: Value::Null,
                    fragments: 0,
                });
                arguments_by_item.push((item["id"].as_str().unwrap().to_owned(), String::new()));
                reply.saw(Part::Call);
            }
            "response.function_call_arguments.delta" => {
                let item_id = event["item_id"].as_str().unwrap();
                let position = arguments_by_item.iter().position(|(id, _)| id == item_id).unwrap();
                arguments_by_item[position].1.push_str(event["delta"].as_str().unwrap());
                reply.calls[position].fragments += 1;
            }
            "response.function_call_arguments.done" => {
                let item_id = event["item_id"].as_str().unwrap();
                let position = arguments_by_item.iter().position(|(id, _)| id == item_id).unwrap();
                assert_eq!(event["arguments"].as_str().unwrap(), arguments_by_item[position].1);
            }
            "response.output_item.done" if event["item"]["type"] == "function_call" => {
                assert_eq!(event["item"]["status"], "completed");
            }
            "response.completed" => {
                reply.finish = event["response"]["status"].as_str().unwrap().to_owned();
                // The completed response lists the same calls.
                let listed: Vec<&str> = event["response"]["output"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|i| i["type"] == "function_call")
                    .map(|i| i["call_id"].as_str().unwrap())
                    .collect();
                assert_eq!(listed, reply.calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>());
            }
            _ => {}
        }
    }
    for (call, (_, text)) in reply.calls.iter_mut().zip(&arguments_by_item) {
        call.arguments = arguments(text);
    }
    reply
}

fn parse_responses_body(body: &Value) -> Reply {
    let mut reply = Reply::default();
    for item in body["output"].as_array().unwrap() {
        match item["type"].as_str().unwrap() {
            "reasoning" => reply.saw(Part::Reasoning),
            "message" => {
                reply.text = item["content"][0]["text"].as_str().unwrap().to_owned();
                reply.saw(Part::Text);
            }
            "function_call" => {
                reply.calls.push(Call {
                    id: item["call_id"].as_str().unwrap().to_owned(),
                    item_id: Some(item["id"].as_str().unwrap().to_owned()),
                    name: item["name"].as_str().unwrap().to_owned(),
                    arguments: arguments(item["arguments"].as_str().unwrap()),
                    fragments: 0,
                });
                reply.saw(Part::Call);
            }
            other => panic!("unexpected output item {other}"),
        }
    }
    reply.finish = body["status"].as_str().unwrap().to_owned();
    reply
}

fn parse_anthropic_stream(events: &[Value]) -> Reply {
    let mut reply = Reply::default();
    // Content block index → (call position, partial JSON).
    let mut partial: Vec<(u64, usize, String)> = Vec::new();
    for event in events {
        match event["type"].as_str().unwrap() {
            "content_block_start" if event["content_block"]["type"] == "tool_use" => {
                let block = &event["content_block"];
                assert_eq!(block["input"], json!({}));
                partial.push((event["index"].as_u64().unwrap(), reply.calls.len(), String::new()));
                reply.calls.push(Call {
                    id: block["id"].as_str().unwrap().to_owned(),
                    item_id: None,
                    name: block["name"].as_str().unwrap().to_owned(),
                    arguments: Value::Null,
                    fragments: 0,
                });
                reply.saw(Part::Call);
            }
            "content_block_delta" => {
                let delta = &event["delta"];
                match delta["type"].as_str().unwrap() {
                    "thinking_delta" => reply.saw(Part::Reasoning),
                    "text_delta" => {
                        reply.text.push_str(delta["text"].as_str().unwrap());
                        reply.saw(Part::Text);
                    }
                    "input_json_delta" => {
                        let index = event["index"].as_u64().unwrap();
                        let entry = partial.iter_mut().find(|(i, _, _)| *i == index).unwrap();
                        entry.2.push_str(delta["partial_json"].as_str().unwrap());
                        reply.calls[entry.1].fragments += 1;
                    }
                    _ => {}
                }
            }
            "message_delta" => reply.finish = event["delta"]["stop_reason"].as_str().unwrap().to_owned(),
            _ => {}
        }
    }
    for (_, position, text) in &partial {
        reply.calls[*position].arguments = arguments(text);
    }
    reply
}

fn parse_anthropic_body(body: &Value) -> Reply {
    let mut reply = Reply::default();
    for block in body["content"].as_array().unwrap() {
        match block["type"].as_str().unwrap() {
            "thinking" => reply.saw(Part::Reasoning),
            "text" => {
                reply.text = block["text"].as_str().unwrap().to_owned();
                reply.saw(Part::Text);
            }
            "tool_use" => {
                assert!(block["input"].is_object());
                reply.calls.push(Call {
                    id: block["id"].as_str().unwrap().to_owned(),
                    item_id: None,
                    name: block["name"].as_str().unwrap().to_owned(),
                    arguments: block["input"].clone(),
                    fragments: 0,
                });
                reply.saw(Part::Call);
            }
            other => panic!("unexpected block {other}"),
        }
    }
    reply.finish = body["stop_reason"].as_str().unwrap().to_owned();
    reply
}

fn gemini_chunk(reply: &mut Reply, chunk: &Value) {
    let candidate = &chunk["candidates"][0];
    for part in candidate["content"]["parts"].as_array().unwrap() {
        if let Some(call) = part.get("functionCall") {
            assert!(call["args"].is_object());
            reply.calls.push(Call {
                // Outside agent mode Gemini calls carry no id, as Gemini's REST API sends them.
                id: call["id"].as_str().unwrap_or_default().to_owned(),
                item_id: None,
                name: call["name"].as_str().unwrap().to_owned(),
                arguments: call["args"].clone(),
                fragments: 0,
            });
            reply.saw(Part::Call);
        } else if let Some(text) = part["text"].as_str().filter(|t| !t.is_empty()) {
            if part["thought"] == true {
                reply.saw(Part::Reasoning);
            } else {
                reply.text.push_str(text);
                reply.saw(Part::Text);
            }
        }
    }
    if let Some(finish) = candidate["finishReason"].as_str() {
        reply.finish = finish.to_owned();
    }
}

/// A tool round as asked: `count` calls of the offered tools in order, unique well-formed ids,
/// schema-shaped arguments, `fragments` argument fragments per call when streaming (if given), no text.
fn assert_tool_round(format: Format, stream: bool, reply: &Reply, count: usize, fragments: Option<usize>) {
    let context = format!("{format:?} stream={stream}");
    assert_eq!(reply.calls.len(), count, "{context}: {reply:?}");
    assert_eq!(reply.finish, format.tool_finish(), "{context}");
    assert!(reply.text.is_empty(), "{context}: no text in a tool round");
    assert_eq!(reply.ids().len(), count, "{context}: ids unique");
    for (i, call) in reply.calls.iter().enumerate() {
        assert!(call.id.starts_with(format.call_prefix()) && call.id.len() > 10, "{context}: {}", call.id);
        if format == Format::Responses {
            assert!(call.item_id.as_deref().is_some_and(|id| id.starts_with("fc_")), "{context}");
        }
        let expected = ["get_weather", "get_time"][i % 2];
        assert_eq!(call.name, expected, "{context}: tools in order, cycling");
        match expected {
            "get_weather" => {
                assert!(call.arguments["city"].as_str().is_some_and(|s| !s.is_empty()), "{context}");
                assert_eq!(call.arguments["unit"], "celsius", "{context}");
            }
            _ => assert!(call.arguments["zone"].is_string(), "{context}"),
        }
        if let Some(fragments) = fragments.filter(|_| stream && format.fragments_arguments()) {
            assert_eq!(call.fragments, fragments, "{context}: argument fragments");
        }
    }
}

fn assert_answer(format: Format, stream: bool, reply: &Reply) {
    let context = format!("{format:?} stream={stream}");
    assert!(reply.calls.is_empty(), "{context}: {reply:?}");
    assert_eq!(reply.text, vocabulary::answer_text(0, ANSWER_TOKENS), "{context}");
    assert_eq!(reply.finish, format.answer_finish(), "{context}");
}

#[tokio::test]
async fn parallel_tool_calls_then_the_final_answer() {
    let addr = start().await;
    let headers =
        [("x-mock-agent", "1"), ("x-mock-agent-parallel", "3"), ("x-mock-tool-fragments", "4"), ("x-mock-seed", "0")];
    for (format, stream) in cases() {
        let path = format.path(stream);
        let request = format.request(stream, true);
        let round = format.parse(stream, &send(addr, path, &headers, &request).await);
        assert_tool_round(format, stream, &round, 3, Some(4));

        let request = format.follow_up(request, &round);
        let answer = format.parse(stream, &send(addr, path, &headers, &request).await);
        assert_answer(format, stream, &answer);

        // A new user message starts a new agent turn.
        let request = format.next_user_message(request, &answer.text);
        let next = format.parse(stream, &send(addr, path, &headers, &request).await);
        assert_tool_round(format, stream, &next, 3, Some(4));
    }
}

#[tokio::test]
async fn two_steps_give_two_tool_rounds() {
    let addr = start().await;
    let headers = [("x-mock-scenario", "agent"), ("x-mock-agent-steps", "2")];
    for (format, stream) in cases() {
        let path = format.path(stream);
        let request = format.request(stream, true);
        let first = format.parse(stream, &send(addr, path, &headers, &request).await);
        // Default: one call per round, arguments in 8-byte pieces (several).
        assert_eq!(first.calls.len(), 1);
        if stream && format.fragments_arguments() {
            assert!(first.calls[0].fragments > 1, "{format:?}");
        }

        let request = format.follow_up(request, &first);
        let second = format.parse(stream, &send(addr, path, &headers, &request).await);
        assert_eq!(second.calls.len(), 1, "{format:?} stream={stream}: a second round");
        assert_eq!(second.finish, format.tool_finish());
        assert!(first.ids().is_disjoint(&second.ids()));

        let request = format.follow_up(request, &second);
        let answer = format.parse(stream, &send(addr, path, &headers, &request).await);
        assert_answer(format, stream, &answer);
    }
}

#[tokio::test]
async fn identical_requests_get_distinct_call_ids() {
    let addr = start().await;
    let headers = [("x-mock-agent", "1"), ("x-mock-agent-parallel", "2")];
    for (format, stream) in cases() {
        let path = format.path(stream);
        let request = format.request(stream, true);
        let (a, b) = tokio::join!(send(addr, path, &headers, &request), send(addr, path, &headers, &request));
        let (a, b) = (format.parse(stream, &a), format.parse(stream, &b));
        assert_eq!((a.calls.len(), b.calls.len()), (2, 2));
        assert!(a.ids().is_disjoint(&b.ids()), "{format:?} stream={stream}");
        // Only the ids differ: the calls themselves are the same.
        assert_eq!(a.calls[1].arguments, b.calls[1].arguments);
    }
}

#[tokio::test]
async fn without_tools_agent_mode_answers() {
    let addr = start().await;
    for (format, stream) in cases() {
        let request = format.request(stream, false);
        let reply = format.parse(stream, &send(addr, format.path(stream), &[("x-mock-agent", "1")], &request).await);
        assert_answer(format, stream, &reply);
    }
}

#[tokio::test]
async fn reasoning_comes_before_the_tool_calls_and_the_answer() {
    let addr = start().await;
    let headers = [("x-mock-scenario", "reasoning_agent"), ("x-mock-agent-parallel", "2")];
    for (format, stream) in cases() {
        let path = format.path(stream);
        let request = format.request(stream, true);
        let round = format.parse(stream, &send(addr, path, &headers, &request).await);
        assert_eq!(round.order, [Part::Reasoning, Part::Call], "{format:?} stream={stream}");
        assert_tool_round(format, stream, &round, 2, None);
        let request = format.follow_up(request, &round);
        let answer = format.parse(stream, &send(addr, path, &headers, &request).await);
        assert_eq!(answer.order, [Part::Reasoning, Part::Text], "{format:?} stream={stream}");
    }
}

#[tokio::test]
async fn single_tool_call_header_keeps_text_then_one_call() {
    let addr = start().await;
    for (format, stream) in cases() {
        let request = format.request(stream, true);
        let bytes = send(addr, format.path(stream), &[("x-mock-tool-call", "1")], &request).await;
        let reply = format.parse(stream, &bytes);
        assert_eq!(reply.order, [Part::Text, Part::Call], "{format:?} stream={stream}");
        assert_eq!(reply.calls.len(), 1);
        assert_eq!(reply.calls[0].name, "get_weather");
        assert_eq!(reply.finish, format.tool_finish());
        assert_eq!(reply.calls[0].id.is_empty(), format == Format::Gemini);
        // Still derived from the body: the same request gets the same id.
        let again =
            format.parse(stream, &send(addr, format.path(stream), &[("x-mock-tool-call", "1")], &request).await);
        assert_eq!(reply.calls[0].id, again.calls[0].id);
    }
}

#[tokio::test]
async fn a_malformed_agent_header_is_rejected() {
    let addr = start().await;
    let request = Format::Chat.request(false, true);
    let body = Request::post("/v1/chat/completions")
        .header("host", "mock")
        .header("x-mock-agent", "sometimes")
        .body(Full::new(Bytes::from(request.to_string())))
        .unwrap();
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    assert_eq!(sender.send_request(body).await.unwrap().status(), StatusCode::BAD_REQUEST);
}
