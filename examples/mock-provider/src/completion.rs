//! The provider-neutral answer to one request: reasoning chunks, answer chunks, an optional tool call,
//! usage and deterministic ids. Each wire format renders the same `Completion` in its own shape.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::config::ReasoningField;
use crate::request::{DeclaredTool, ProviderRequest};
use crate::scenario::ResponsePlan;
use crate::vocabulary::{self, WordStream};

/// Tool name used when the scenario asks for a tool call but the request declares no tool.
const FALLBACK_TOOL: &str = "lookup";
/// Bytes of argument JSON per `arguments` fragment, so arguments always arrive in several pieces.
const ARGUMENT_FRAGMENT_BYTES: usize = 8;

#[derive(Clone, Debug)]
pub(crate) struct Completion {
    pub(crate) model: String,
    pub(crate) ids: ResponseIds,
    /// Unix seconds; derived from the seed so identical requests get identical bodies.
    pub(crate) created: u64,
    pub(crate) reasoning_chunks: Vec<String>,
    pub(crate) answer_chunks: Vec<String>,
    pub(crate) tool_call: Option<ToolCall>,
    pub(crate) usage: Usage,
    pub(crate) include_usage: bool,
    pub(crate) reasoning_field: ReasoningField,
    /// Pad content events to about this many bytes.
    pub(crate) event_bytes: Option<usize>,
    /// `response_format` of an audio speech request (mp3, wav, ...).
    pub(crate) audio_format: Option<String>,
}

#[derive(Clone, Debug)]
pub(crate) struct ToolCall {
    pub(crate) name: String,
    pub(crate) arguments: Value,
    pub(crate) arguments_json: String,
    /// `arguments_json` cut into pieces, each one content event.
    pub(crate) fragments: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) input_tokens: u32,
    pub(crate) output_tokens: u32,
    pub(crate) reasoning_tokens: u32,
    pub(crate) cached_tokens: u32,
}

impl Usage {
    pub(crate) fn total_tokens(&self) -> u32 {
        self.input_tokens + self.output_tokens
    }
}

/// Ids derived from the request hash and seed (never from a counter or clock).
#[derive(Clone, Debug)]
pub(crate) struct ResponseIds {
    digest: [u8; 32],
}

impl ResponseIds {
    pub(crate) fn new(body_hash: [u8; 32], seed: u64) -> ResponseIds {
        let mut hasher = Sha256::new();
        hasher.update(body_hash);
        hasher.update(seed.to_le_bytes());
        ResponseIds { digest: hasher.finalize().into() }
    }

    fn bytes(&self, tag: &str) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(self.digest);
        hasher.update(tag.as_bytes());
        hasher.finalize().into()
    }

    /// `prefix` followed by 24 lowercase alphanumerics, e.g. `chatcmpl-…`, `msg_…`, `call_…`.
    pub(crate) fn id(&self, prefix: &str, tag: &str) -> String {
        const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let suffix: String =
            self.bytes(tag)[..24].iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect();
        format!("{prefix}{suffix}")
    }

    /// A base64 string shaped like Anthropic's opaque thinking signature.
    pub(crate) fn signature(&self) -> String {
        let mut raw = self.bytes("signature").to_vec();
        raw.extend_from_slice(&self.bytes("signature-2"));
        base64(&raw)
    }
}

impl Completion {
    pub(crate) fn build(request: &ProviderRequest, plan: &ResponsePlan) -> Completion {
        let reasoning_tokens = vocabulary::tokens(plan.seed, WordStream::Reasoning, plan.reasoning_tokens);
        let answer_tokens = vocabulary::tokens(plan.seed, WordStream::Answer, plan.answer_tokens);
        let tool_call = plan.tool_call.then(|| ToolCall::generate(request.first_tool.as_ref(), plan.seed));
        let tool_tokens = tool_call.as_ref().map_or(0, |t| t.fragments.len() as u32);
        Completion {
            model: request.model.clone(),
            ids: ResponseIds::new(request.body_hash, plan.seed),
            created: 1_700_000_000 + plan.seed % 100_000_000,
            reasoning_chunks: vocabulary::chunks(&reasoning_tokens, plan.tokens_per_chunk),
            answer_chunks: vocabulary::chunks(&answer_tokens, plan.tokens_per_chunk),
            usage: Usage {
                input_tokens: request.input_tokens,
                output_tokens: plan.reasoning_tokens + plan.answer_tokens + tool_tokens,
                reasoning_tokens: plan.reasoning_tokens,
                cached_tokens: 0,
            },
            tool_call,
            include_usage: request.include_usage,
            reasoning_field: plan.reasoning_field,
            event_bytes: plan.event_bytes,
            audio_format: request.audio_format.clone(),
        }
    }

    pub(crate) fn answer_text(&self) -> String {
        self.answer_chunks.concat()
    }

    pub(crate) fn reasoning_text(&self) -> String {
        self.reasoning_chunks.concat()
    }
}

impl ToolCall {
    /// Arguments that fit the declared schema well enough: strings get two words, numbers 42,
    /// booleans true, enums their first value; at most three properties.
    fn generate(tool: Option<&DeclaredTool>, seed: u64) -> ToolCall {
        let name = tool.map_or(FALLBACK_TOOL, |t| t.name.as_str()).to_owned();
        let words = vocabulary::tokens(seed, WordStream::ToolArguments, 6);
        let mut words = words.iter().map(|w| w.trim().to_owned());
        let mut arguments = Map::new();
        let properties =
            tool.and_then(|t| t.parameters.as_ref()).and_then(|p| p.get("properties")).and_then(Value::as_object);
        if let Some(properties) = properties.filter(|p| !p.is_empty()) {
            for (key, schema) in properties.iter().take(3) {
                let value = if let Some(first) = schema.get("enum").and_then(|e| e.as_array()?.first()) {
                    first.clone()
                } else {
                    match schema.get("type").and_then(Value::as_str) {
                        Some("integer" | "number") => json!(42),
                        Some("boolean") => json!(true),
                        Some("array") => json!([]),
                        Some("object") => json!({}),
                        _ => {
                            json!(format!("{} {}", words.next().unwrap_or_default(), words.next().unwrap_or_default()))
                        }
                    }
                };
                arguments.insert(key.clone(), value);
            }
        } else {
            arguments.insert(
                "query".to_owned(),
                json!(format!("{} {}", words.next().unwrap_or_default(), words.next().unwrap_or_default())),
            );
        }
        let arguments = Value::Object(arguments);
        let arguments_json = arguments.to_string();
        let fragments = split_fragments(&arguments_json, ARGUMENT_FRAGMENT_BYTES);
        ToolCall { name, arguments, arguments_json, fragments }
    }
}

/// Splits on char boundaries into pieces of at most `max` bytes (at least one char each).
fn split_fragments(text: &str, max: usize) -> Vec<String> {
    let mut fragments = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        if !current.is_empty() && current.len() + c.len_utf8() > max {
            fragments.push(std::mem::take(&mut current));
        }
        current.push(c);
    }
    if !current.is_empty() {
        fragments.push(current);
    }
    fragments
}

fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_rejoin() {
        let f = split_fragments("{\"location\":\"the of\"}", 8);
        assert!(f.len() > 2);
        assert_eq!(f.concat(), "{\"location\":\"the of\"}");
    }

    #[test]
    fn base64_matches_known_values() {
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(b"Ma"), "TWE=");
        assert_eq!(base64(b"M"), "TQ==");
    }

    #[test]
    fn ids_are_deterministic_and_distinct() {
        let a = ResponseIds::new([1; 32], 0);
        assert_eq!(a.id("msg_", "message"), ResponseIds::new([1; 32], 0).id("msg_", "message"));
        assert_ne!(a.id("msg_", "message"), ResponseIds::new([1; 32], 1).id("msg_", "message"));
        assert_eq!(a.id("call_", "x").len(), "call_".len() + 24);
    }

    #[test]
    fn tool_arguments_follow_schema() {
        let tool = DeclaredTool {
            name: "get_weather".into(),
            parameters: Some(json!({"type":"object","properties":{
                "city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer"}}})),
        };
        let call = ToolCall::generate(Some(&tool), 0);
        assert_eq!(call.arguments["unit"], "celsius");
        assert_eq!(call.arguments["days"], 42);
        assert!(call.arguments["city"].is_string());
        assert_eq!(call.fragments.concat(), call.arguments_json);
    }
}
