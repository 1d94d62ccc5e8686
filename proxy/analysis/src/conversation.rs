//! The shape of a request's conversation, as far as linking the steps of an agent turn needs it:
//! what the last input is (a new user message or tool results), the tool results it carries, and
//! hashes of its message prefixes. No text leaves this module: prefixes are kept as keyed 64-bit
//! hashes (the key is chosen at random per process), so neither the record nor the turn state holds
//! prompt content.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest message list whose prefixes are hashed; longer conversations are linked by ids only.
pub const MAX_PREFIX_MESSAGES: usize = 1024;

/// What the last entry of the request's messages / input / contents is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LastInput {
    /// A new message from the user: the start of a turn.
    User,
    /// Results of tool calls (OpenAI `role: tool`, Responses `function_call_output`, Anthropic
    /// `tool_result` blocks, Gemini `functionResponse` parts): the next step of a turn.
    ToolResult,
    /// An assistant (model) message, e.g. a prefill.
    Assistant,
    /// A system or developer message.
    System,
}

/// Linking facts of one request body; built by [`crate::analyze_request`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConversationShape {
    pub last_input: Option<LastInput>,
    /// `prefix_hashes[k]` is the hash of the system prompt and the first `k + 1` messages. Empty
    /// when the list is longer than [`MAX_PREFIX_MESSAGES`].
    pub prefix_hashes: Vec<u64>,
}

fn hasher() -> impl Hasher {
    static KEY: OnceLock<RandomState> = OnceLock::new();
    KEY.get_or_init(RandomState::new).build_hasher()
}

/// Most sentences hashed of one text.
pub const MAX_SENTENCES: usize = 512;

/// Keyed hash of a text in normalised form (trimmed, whitespace runs as one space, lower case), so
/// that a transcript and the chat message that carries it, or an answer and the speech request
/// that reads it out, hash the same. Like the prefix hashes, the key is random per process.
pub fn text_hash(text: &str) -> u64 {
    let mut h = hasher();
    feed_normalised(&mut h, text);
    h.finish()
}

fn feed_normalised(h: &mut impl Hasher, text: &str) {
    let mut normal = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !normal.is_empty() {
            normal.push(' ');
        }
        if word.is_ascii() {
            normal.extend(word.bytes().map(|b| char::from(b.to_ascii_lowercase())));
        } else {
            normal.extend(word.chars().flat_map(char::to_lowercase));
        }
    }
    h.write(normal.as_bytes());
}

/// Hashes of a text as a whole and of each of its sentences (cut after `.`, `!`, `?`, `…`, their
/// CJK forms and line breaks), for telling whether a speech request reads out (part of) an answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextHashes {
    pub whole: u64,
    pub sentences: Vec<u64>,
}

impl TextHashes {
    pub fn of(text: &str) -> TextHashes {
        let mut sentences = Vec::new();
        for piece in text.split(['.', '!', '?', '\n', '…', '。', '！', '？']) {
            if sentences.len() >= MAX_SENTENCES {
                break;
            }
            if piece.trim().is_empty() {
                continue;
            }
            sentences.push(text_hash(piece));
        }
        TextHashes { whole: text_hash(text), sentences }
    }

    /// True when `part` is this whole text or made of its sentences.
    pub fn covers(&self, part: &TextHashes) -> bool {
        part.whole == self.whole
            || (!part.sentences.is_empty() && part.sentences.iter().all(|s| self.sentences.contains(s)))
    }
}

/// The conversation shape of a parsed request body object.
pub(crate) fn shape(map: &serde_json::Map<String, Value>) -> ConversationShape {
    let items: Vec<&Value> = match ["messages", "contents", "input"].iter().find_map(|k| map.get(*k)) {
        Some(Value::Array(items)) => items.iter().collect(),
        Some(value @ Value::String(_)) => vec![value],
        _ => Vec::new(),
    };
    let mut shape = ConversationShape { last_input: items.last().map(|item| last_input(item)), ..Default::default() };
    if items.is_empty() || items.len() > MAX_PREFIX_MESSAGES {
        return shape;
    }
    let mut seed = hasher();
    for key in ["system", "instructions", "systemInstruction", "system_instruction"] {
        if let Some(v) = map.get(key) {
            seed.write(key.as_bytes());
            feed(&mut seed, v, 0);
        }
    }
    let mut running = seed.finish();
    shape.prefix_hashes.reserve(items.len());
    for item in items {
        let mut h = hasher();
        h.write_u64(running);
        feed(&mut h, item, 0);
        running = h.finish();
        shape.prefix_hashes.push(running);
    }
    shape
}

/// Feeds a message into the hash in a normalised form: object keys sorted, strings and numbers by
/// value, so that an SDK that re-serialises a message with its keys in another order (or with other
/// whitespace) hashes the same. Nesting is bounded.
fn feed(h: &mut impl Hasher, value: &Value, depth: usize) {
    if depth > 32 {
        return;
    }
    match value {
        Value::Null => h.write_u8(0),
        Value::Bool(b) => h.write_u8(1 + u8::from(*b)),
        Value::Number(n) => {
            h.write_u8(3);
            h.write(n.to_string().as_bytes());
        }
        Value::String(s) => {
            h.write_u8(4);
            h.write(s.as_bytes());
            h.write_u8(0xff);
        }
        Value::Array(items) => {
            h.write_u8(5);
            h.write_usize(items.len());
            items.iter().for_each(|v| feed(h, v, depth + 1));
        }
        Value::Object(map) => {
            h.write_u8(6);
            let mut keys: Vec<&String> = map.keys().filter(|k| !map[k.as_str()].is_null()).collect();
            keys.sort_unstable();
            h.write_usize(keys.len());
            for key in keys {
                h.write(key.as_bytes());
                h.write_u8(0xff);
                feed(h, &map[key.as_str()], depth + 1);
            }
        }
    }
}

pub(crate) fn shape_of_item(item: &Value) -> LastInput {
    last_input(item)
}

fn last_input(item: &Value) -> LastInput {
    let role = item.get("role").and_then(Value::as_str);
    let kind = item.get("type").and_then(Value::as_str);
    if role == Some("tool") || role == Some("function") || kind.is_some_and(|t| t.ends_with("_call_output")) {
        return LastInput::ToolResult;
    }
    let parts = ["content", "parts"].iter().find_map(|k| item.get(*k).and_then(Value::as_array));
    if parts.is_some_and(|parts| {
        parts.iter().any(|part| {
            part.get("type").and_then(Value::as_str) == Some("tool_result") || part.get("functionResponse").is_some()
        })
    }) {
        return LastInput::ToolResult;
    }
    match role {
        Some("assistant" | "model") => LastInput::Assistant,
        Some("system" | "developer") => LastInput::System,
        // A bare string input, a user message, or a Responses item without a role that is not a
        // tool output (e.g. an input_text item).
        _ if kind.is_some_and(|t| t.ends_with("_call") || t == "reasoning") => LastInput::Assistant,
        _ => LastInput::User,
    }
}

#[cfg(test)]
mod text_tests {
    use super::*;

    #[test]
    fn normalised_text_hashes_match() {
        assert_eq!(text_hash("  What is the  weather\nin Paris? "), text_hash("what is the weather in paris?"));
        assert_ne!(text_hash("weather in Paris"), text_hash("weather in Rome"));
    }

    #[test]
    fn an_answer_covers_its_sentences() {
        let answer = TextHashes::of("Sure! It is sunny in Paris today.\nHighs of 21 degrees.");
        assert!(answer.covers(&TextHashes::of("It is sunny in Paris today.")));
        assert!(answer.covers(&TextHashes::of("Sure! It is sunny in Paris today.")));
        assert!(answer.covers(&TextHashes::of("Highs of 21 degrees.")));
        assert!(!answer.covers(&TextHashes::of("It is raining in Paris today.")));
        assert!(!answer.covers(&TextHashes::of("  ")));
        assert!(answer.covers(&TextHashes::of("Sure! It is sunny in Paris today.\nHighs of 21 degrees.")));
    }
}
