//! What the mock reads from a provider request: which endpoint, model, streaming, tools, and the
//! request's own wishes (e.g. Anthropic `thinking`), the conversation's tool rounds. Also the body
//! hash that makes ids deterministic.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::conversation::Conversation;
pub(crate) use crate::endpoint::Endpoint;
use crate::scenario::RequestWishes;

/// A function tool the request offers, in any provider's shape.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DeclaredTool {
    pub(crate) name: String,
    /// JSON schema of the parameters, if given.
    pub(crate) parameters: Option<Value>,
}

/// The parts of a provider request the mock's answer depends on.
#[derive(Clone, Debug)]
pub(crate) struct ProviderRequest {
    pub(crate) model: String,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    /// The function tools offered, in order (Gemini: every `functionDeclarations` entry).
    pub(crate) tools: Vec<DeclaredTool>,
    pub(crate) conversation: Conversation,
    pub(crate) wishes: RequestWishes,
    /// A rough prompt size: one token per four body bytes. Deterministic, which is all that matters.
    pub(crate) input_tokens: u32,
    /// SHA-256 of path + body: identical requests get identical ids.
    pub(crate) body_hash: [u8; 32],
}

impl ProviderRequest {
    pub(crate) fn parse(endpoint: &Endpoint, path: &str, body: &[u8]) -> Result<ProviderRequest, serde_json::Error> {
        let json: Value = serde_json::from_slice(body)?;
        let model = match endpoint {
            Endpoint::Gemini { model, .. } => model.clone(),
            _ => json.get("model").and_then(Value::as_str).unwrap_or("mock-model").to_owned(),
        };
        let stream = match endpoint {
            Endpoint::Gemini { streaming, .. } => *streaming,
            // Ollama streams unless told not to.
            Endpoint::OllamaChat => json.get("stream").and_then(Value::as_bool).unwrap_or(true),
            _ => json.get("stream").and_then(Value::as_bool).unwrap_or(false),
        };
        let include_usage = json.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false);
        let reasoning = match endpoint {
            Endpoint::AnthropicMessages => {
                matches!(json.pointer("/thinking/type").and_then(Value::as_str), Some("enabled" | "adaptive"))
            }
            Endpoint::OpenAiResponses => json.pointer("/reasoning/summary").is_some_and(|s| !s.is_null()),
            Endpoint::Gemini { .. } => json
                .pointer("/generationConfig/thinkingConfig/includeThoughts")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            Endpoint::OllamaChat => json.get("think").is_some_and(|t| t.as_bool() == Some(true) || t.is_string()),
            Endpoint::OpenAiChat => false,
        };
        Ok(ProviderRequest {
            tools: offered_tools(endpoint, &json),
            conversation: Conversation::parse(endpoint, &json),
            model,
            stream,
            include_usage,
            wishes: RequestWishes { reasoning },
            input_tokens: u32::try_from(body.len() / 4).unwrap_or(u32::MAX).max(1),
            body_hash: body_hash(path, body),
        })
    }
}

/// SHA-256 of path + body: the seed of a response's ids.
pub(crate) fn body_hash(path: &str, body: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(path.as_bytes());
    hasher.update([0]);
    hasher.update(body);
    hasher.finalize().into()
}

/// The function tools in OpenAI chat / Ollama (`function.name`), Responses (`type: function` with
/// `name`), Anthropic (`name` + `input_schema`) or Gemini (`functionDeclarations[].name`) form.
/// Tools without a name (built-in tools such as Responses `web_search`) are not offered functions.
fn offered_tools(endpoint: &Endpoint, json: &Value) -> Vec<DeclaredTool> {
    let Some(tools) = json.get("tools").and_then(Value::as_array) else {
        return Vec::new();
    };
    let declared = |holder: &Value, schema_keys: &[&str]| {
        let name = holder.get("name")?.as_str()?.to_owned();
        let parameters = schema_keys.iter().find_map(|k| holder.get(*k)).cloned();
        Some(DeclaredTool { name, parameters })
    };
    match endpoint {
        Endpoint::OpenAiChat | Endpoint::OllamaChat => {
            tools.iter().filter_map(|t| declared(t.get("function")?, &["parameters"])).collect()
        }
        Endpoint::OpenAiResponses => tools
            .iter()
            .filter(|t| t.get("type").and_then(Value::as_str) == Some("function"))
            .filter_map(|t| declared(t, &["parameters"]))
            .collect(),
        Endpoint::AnthropicMessages => tools.iter().filter_map(|t| declared(t, &["input_schema"])).collect(),
        Endpoint::Gemini { .. } => tools
            .iter()
            .filter_map(|t| t.get("functionDeclarations").or_else(|| t.get("function_declarations"))?.as_array())
            .flatten()
            .filter_map(|d| declared(d, &["parameters", "parametersJsonSchema"]))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use serde_json::json;

    #[test]
    fn routes() {
        assert_eq!(Endpoint::route(&Method::POST, "/v1/chat/completions"), Some(Endpoint::OpenAiChat));
        assert_eq!(
            Endpoint::route(&Method::POST, "/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
            Some(Endpoint::Gemini { model: "gemini-2.5-flash".into(), streaming: true })
        );
        assert_eq!(Endpoint::route(&Method::GET, "/v1/messages"), None);
        assert_eq!(Endpoint::route(&Method::POST, "/v1/nope"), None);
    }

    #[test]
    fn finds_offered_tools_in_every_shape() {
        let gemini = Endpoint::Gemini { model: "g".into(), streaming: true };
        let cases = [
            (
                Endpoint::OpenAiChat,
                json!({"tools":[{"type":"function","function":{"name":"a","parameters":{"type":"object"}}},
                    {"type":"function","function":{"name":"a2"}}]}),
                vec!["a", "a2"],
            ),
            (
                Endpoint::OpenAiResponses,
                json!({"tools":[{"type":"web_search"},{"type":"function","name":"r","parameters":{}}]}),
                vec!["r"],
            ),
            (Endpoint::AnthropicMessages, json!({"tools":[{"name":"b","input_schema":{"type":"object"}}]}), vec!["b"]),
            (
                gemini,
                json!({"tools":[{"functionDeclarations":[{"name":"c"},{"name":"d"}]},{"googleSearch":{}}]}),
                vec!["c", "d"],
            ),
            (Endpoint::OpenAiChat, json!({"messages": []}), vec![]),
        ];
        for (endpoint, body, names) in cases {
            let tools = offered_tools(&endpoint, &body);
            assert_eq!(tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), names, "{endpoint:?}");
        }
        let chat = json!({"tools":[{"type":"function","function":{"name":"a","parameters":{"type":"object"}}}]});
        assert!(offered_tools(&Endpoint::OpenAiChat, &chat)[0].parameters.is_some());
    }
}
