//! One module per provider wire format. Each renders a [`Completion`] as stream events, as a
//! non-streaming body, and renders errors the way that provider does.

use bytes::Bytes;
use http::StatusCode;
use serde_json::Value;

use crate::completion::Completion;
use crate::request::Endpoint;
use crate::wire::WireEvent;

mod anthropic;
mod gemini;
mod ollama;
mod openai_chat;
mod openai_responses;

/// A provider's wire format.
pub(crate) trait WireFormat: Send + Sync {
    /// `content-type` of the streaming response.
    fn stream_content_type(&self, completion: &Completion) -> &'static str;
    /// The whole stream, in order, each event tagged with how it is timed.
    fn stream_events(&self, completion: &Completion) -> Vec<WireEvent>;
    /// The provider's mid-stream error event; `events_before` events were already sent.
    /// `None` when the format has no such event (the stream then just ends early).
    fn midstream_error(&self, completion: &Completion, events_before: usize) -> Option<Bytes>;
    /// What the provider sends to keep an idle stream alive, if anything.
    fn heartbeat(&self) -> Option<Bytes>;
    /// The non-streaming JSON body.
    fn full_body(&self, completion: &Completion) -> Value;
    /// The JSON body of an HTTP error response with `status`.
    fn error_body(&self, status: StatusCode, message: &str) -> Value;
    /// Name of the response header carrying the request id.
    fn request_id_header(&self) -> &'static str {
        "x-request-id"
    }
}

pub(crate) fn for_endpoint(endpoint: &Endpoint) -> &'static dyn WireFormat {
    match endpoint {
        Endpoint::OpenAiChat => &openai_chat::OpenAiChat,
        Endpoint::OpenAiResponses => &openai_responses::OpenAiResponses,
        Endpoint::AnthropicMessages => &anthropic::Anthropic,
        Endpoint::Gemini { .. } => &gemini::Gemini,
        Endpoint::OllamaChat => &ollama::Ollama,
    }
}

/// OpenAI's `{"error": {message, type, param, code}}`, shared by chat, responses and audio.
pub(crate) fn openai_error_body(status: StatusCode, message: &str) -> Value {
    let (kind, code) = match status.as_u16() {
        400 | 413 => ("invalid_request_error", Value::Null),
        401 => ("invalid_request_error", Value::from("invalid_api_key")),
        403 => ("invalid_request_error", Value::from("unsupported_country_region_territory")),
        404 => ("invalid_request_error", Value::from("model_not_found")),
        429 => ("requests", Value::from("rate_limit_exceeded")),
        _ => ("server_error", Value::Null),
    };
    serde_json::json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

/// OpenAI's answer to a request field it refuses: `invalid_request_error` naming the field.
pub(crate) fn openai_invalid_request_body(message: &str, param: Option<&str>) -> Value {
    serde_json::json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": null}})
}

#[cfg(test)]
pub(crate) mod testing {
    //! Helpers that parse what the formats produce, the way a client would.

    use bytes::Bytes;
    use serde_json::Value;

    /// Splits SSE bytes into (event name, data json or raw) pairs; comments are returned as `(":", text)`.
    pub(crate) fn parse_sse(bytes: &[u8]) -> Vec<(String, String)> {
        let text = std::str::from_utf8(bytes).unwrap().replace("\r\n", "\n");
        let mut out = Vec::new();
        for block in text.split("\n\n").filter(|b| !b.is_empty()) {
            let mut name = String::new();
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(comment) = line.strip_prefix(':') {
                    out.push((":".to_owned(), comment.trim().to_owned()));
                } else if let Some(v) = line.strip_prefix("event: ") {
                    name = v.to_owned();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push(v.to_owned());
                }
            }
            if !data.is_empty() {
                out.push((name, data.join("\n")));
            }
        }
        out
    }

    pub(crate) fn concat(events: &[crate::wire::WireEvent]) -> Bytes {
        let mut all = Vec::new();
        for e in events {
            all.extend_from_slice(&e.bytes);
        }
        Bytes::from(all)
    }

    pub(crate) fn json(data: &str) -> Value {
        serde_json::from_str(data).unwrap_or_else(|e| panic!("bad json {data:?}: {e}"))
    }

    pub(crate) fn completion(reasoning_tokens: u32, answer_tokens: u32, tool: bool) -> crate::completion::Completion {
        use crate::completion::Completion;
        use crate::config::MockConfig;
        use crate::request::Endpoint;
        use crate::request::ProviderRequest;
        use crate::scenario::{RequestWishes, ResponsePlan};

        let body = br#"{"model":"m","tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],"stream":true,"stream_options":{"include_usage":true}}"#;
        let request = ProviderRequest::parse(&Endpoint::OpenAiChat, "/v1/chat/completions", body).unwrap();
        let mut plan =
            ResponsePlan::resolve(&MockConfig::default(), &http::HeaderMap::new(), RequestWishes::default()).unwrap();
        plan.reasoning_tokens = reasoning_tokens;
        plan.answer_tokens = answer_tokens;
        plan.tool_call = tool;
        Completion::build(&request, &plan)
    }

    /// An agent-mode tool round: `parallel` calls cycling over two offered tools.
    pub(crate) fn agent_completion(reasoning_tokens: u32, parallel: u32) -> crate::completion::Completion {
        use crate::agent::AgentPlan;
        use crate::completion::Completion;
        use crate::config::MockConfig;
        use crate::request::{Endpoint, ProviderRequest};
        use crate::scenario::{RequestWishes, ResponsePlan};

        let body = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"tools":[
            {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},
            {"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"zone":{"type":"string"}}}}}]}"#;
        let request = ProviderRequest::parse(&Endpoint::OpenAiChat, "/v1/chat/completions", body).unwrap();
        let mut plan =
            ResponsePlan::resolve(&MockConfig::default(), &http::HeaderMap::new(), RequestWishes::default()).unwrap();
        plan.reasoning_tokens = reasoning_tokens;
        plan.agent = Some(AgentPlan { steps: 1, parallel });
        Completion::build(&request, &plan)
    }
}
