//! The provider-neutral answer to one request: reasoning chunks, answer chunks, tool calls, usage and
//! ids. Each wire format renders the same `Completion` in its own shape.

use sha2::{Digest, Sha256};

use crate::agent::{self, AgentMove};
use crate::config::ReasoningField;
use crate::request::ProviderRequest;
use crate::scenario::ResponsePlan;
use crate::tool_call::{ArgumentSplit, ToolCall};
use crate::vocabulary::{self, WordStream};

#[derive(Clone, Debug)]
pub(crate) struct Completion {
    pub(crate) model: String,
    pub(crate) ids: ResponseIds,
    /// Unix seconds; derived from the seed so identical requests get identical bodies.
    pub(crate) created: u64,
    pub(crate) reasoning_chunks: Vec<String>,
    pub(crate) answer_chunks: Vec<String>,
    /// Calls in the order they are sent; several means parallel calls in one response.
    pub(crate) tool_calls: Vec<ToolCall>,
    /// A step of a client's tool loop (agent mode): every id is unique to this response.
    pub(crate) agent_step: bool,
    pub(crate) usage: Usage,
    pub(crate) include_usage: bool,
    pub(crate) reasoning_field: ReasoningField,
    /// Pad content events to about this many bytes.
    pub(crate) event_bytes: Option<usize>,
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

/// Ids derived from the request hash and seed, so identical requests get identical ids; in agent
/// mode also from a per-response nonce, so every response's ids are its own.
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

    /// Ids that no other response gets: `nonce` is distinct per response.
    pub(crate) fn unique(body_hash: [u8; 32], seed: u64, nonce: u64) -> ResponseIds {
        let mut hasher = Sha256::new();
        hasher.update(ResponseIds::new(body_hash, seed).digest);
        hasher.update(b"agent");
        hasher.update(nonce.to_le_bytes());
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
        let split = ArgumentSplit::from_count(plan.tool_fragments);
        let (answer_token_count, tool_calls, ids) = match plan.agent {
            // A step of a tool loop: tool calls without text, or the final answer.
            Some(agent) => {
                let ids = ResponseIds::unique(request.body_hash, plan.seed, agent::response_nonce());
                match agent.next_move(request.tools.len(), &request.conversation) {
                    AgentMove::CallTools { count } => {
                        let calls = (0..count as usize)
                            .map(|i| {
                                let tool = &request.tools[i % request.tools.len()];
                                ToolCall::generate(Some(tool), i, plan.seed, split)
                            })
                            .collect();
                        (0, calls, ids)
                    }
                    AgentMove::Answer => (plan.answer_tokens, Vec::new(), ids),
                }
            }
            None => {
                let calls = if plan.tool_call {
                    vec![ToolCall::generate(request.tools.first(), 0, plan.seed, split)]
                } else {
                    Vec::new()
                };
                (plan.answer_tokens, calls, ResponseIds::new(request.body_hash, plan.seed))
            }
        };
        let answer_tokens = vocabulary::tokens(plan.seed, WordStream::Answer, answer_token_count);
        let tool_tokens: u32 = tool_calls.iter().map(|t| t.fragments.len() as u32).sum();
        Completion {
            model: request.model.clone(),
            ids,
            created: 1_700_000_000 + plan.seed % 100_000_000,
            reasoning_chunks: vocabulary::chunks(&reasoning_tokens, plan.tokens_per_chunk),
            answer_chunks: vocabulary::chunks(&answer_tokens, plan.tokens_per_chunk),
            usage: Usage {
                input_tokens: request.input_tokens,
                output_tokens: plan.reasoning_tokens + answer_token_count + tool_tokens,
                reasoning_tokens: plan.reasoning_tokens,
                cached_tokens: 0,
            },
            tool_calls,
            agent_step: plan.agent.is_some(),
            include_usage: request.include_usage,
            reasoning_field: plan.reasoning_field,
            event_bytes: plan.event_bytes,
        }
    }

    /// The id of `call` with `prefix`: `call_…` (OpenAI chat, Responses `call_id`), `toolu_…`
    /// (Anthropic); distinct for every call of the response.
    pub(crate) fn call_id(&self, call: &ToolCall, prefix: &str) -> String {
        self.ids.id(prefix, &call.tag("tool"))
    }

    /// The Responses `fc_…` item id of `call`.
    pub(crate) fn call_item_id(&self, call: &ToolCall) -> String {
        self.ids.id("fc_", &call.tag("function_call"))
    }

    pub(crate) fn answer_text(&self) -> String {
        self.answer_chunks.concat()
    }

    pub(crate) fn reasoning_text(&self) -> String {
        self.reasoning_chunks.concat()
    }
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
        let unique = ResponseIds::unique([1; 32], 0, 7);
        assert_ne!(unique.id("call_", "x"), a.id("call_", "x"));
        assert_ne!(unique.id("call_", "x"), ResponseIds::unique([1; 32], 0, 8).id("call_", "x"));
    }
}
