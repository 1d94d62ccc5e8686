//! The shape of a request's conversation, as far as linking the steps of an agent turn needs it:
//! what the last input is (a new user message or tool results), the tool results it carries, and
//! hashes of its message prefixes. No text leaves this module: prefixes are kept as keyed 64-bit
//! hashes, so neither the record nor the turn state holds prompt content. The key is chosen at
//! random per process, or derived from `[turns] fleet_key` ([`use_fleet_key`]) so that every
//! instance of a fleet hashes the same conversation the same way.
//!
//! Besides the prefixes, a shape names the turn a request belongs to without any state: the
//! prefix up to the last user message (the turn's *anchor*) and the assistant reply right after
//! it (its tool call ids, else its text), which every step after the first carries in its history
//! and the first step's response is. The same pair for the first user message names the
//! conversation.

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use siphasher::sip::SipHasher13;

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
    /// The prefix hash up to and including the last user message: the same for every step of a
    /// turn.
    pub turn_anchor: Option<u64>,
    /// [`reply_key`] of the assistant items right after the last user message (a later step's
    /// history holds the turn's first reply there); `None` when nothing follows it.
    pub turn_reply: Option<u64>,
    /// The prefix hash up to and including the first user message.
    pub conversation_anchor: Option<u64>,
    /// [`reply_key`] of the assistant items right after the first user message.
    pub conversation_reply: Option<u64>,
}

/// The SipHash keys of this process.
#[derive(Debug, Clone, Copy)]
struct HashKey(u64, u64);

static KEY: OnceLock<(HashKey, bool)> = OnceLock::new();

fn key() -> HashKey {
    KEY.get_or_init(|| {
        let random = std::collections::hash_map::RandomState::new();
        (HashKey(random.hash_one(0x5eed_u64), random.hash_one(0xfeed_u64)), false)
    })
    .0
}

fn hasher() -> impl Hasher {
    let HashKey(k0, k1) = key();
    SipHasher13::new_with_keys(k0, k1)
}

/// Keys every conversation hash with `secret` (`[turns] fleet_key`) instead of a random key, so
/// that the instances of a fleet sharing it name the same turn the same way. Call it once, before
/// any request is analysed; returns false (and changes nothing) when hashing had already started
/// or a key was already set.
pub fn use_fleet_key(secret: &[u8]) -> bool {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new().chain_update(b"tokentap fleet key v1\0").chain_update(secret).finalize();
    let word = |i: usize| u64::from_le_bytes(digest[i..i + 8].try_into().unwrap_or_default());
    let mut set = false;
    KEY.get_or_init(|| {
        set = true;
        (HashKey(word(0), word(8)), true)
    });
    set
}

/// Whether conversation hashes are keyed by a fleet key (and so mean the same on every instance):
/// only then are the turn keys written into records.
pub fn fleet_keyed() -> bool {
    KEY.get().is_some_and(|(_, fleet)| *fleet)
}

/// Serde for the turn keys of a record (`request.turn_anchor`…, `analysis.reply_key`): 16 hex
/// digits, written only when the hashes are fleet-keyed (a per-process key means nothing outside
/// the process).
pub mod fleet_hex {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => s.serialize_str(&format!("{v:016x}")),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        Ok(text.and_then(|t| u64::from_str_radix(&t, 16).ok()))
    }

    /// Left out of the record: absent, or keyed per process.
    pub fn hidden(value: &Option<u64>) -> bool {
        value.is_none() || !super::fleet_keyed()
    }
}

/// The key of an assistant reply: its tool call ids in order when it made calls with ids, else
/// its text ([`text_hash`]). The first step's response and a later step's history give the same
/// key for the same reply.
pub fn reply_key<'a>(call_ids: impl IntoIterator<Item = &'a str>, text: &str) -> Option<u64> {
    reply_key_or(call_ids, || (!text.trim().is_empty()).then(|| text_hash(text)))
}

/// [`reply_key`] for a text whose hash is at hand: `text_hash` gives what `reply_key` would compute
/// from the text (`None` for a blank text), and is called only when there are no call ids. An
/// answer's [`TextHashes::whole`] is that hash, so the answer is not normalised twice.
pub fn reply_key_or<'a>(
    call_ids: impl IntoIterator<Item = &'a str>,
    text_hash: impl FnOnce() -> Option<u64>,
) -> Option<u64> {
    let mut h = hasher();
    let mut any = false;
    for id in call_ids {
        h.write(id.as_bytes());
        h.write_u8(0xff);
        any = true;
    }
    if any {
        h.write_u8(0xfe);
        return Some(h.finish());
    }
    text_hash()
}

/// Most sentences hashed of one text.
pub const MAX_SENTENCES: usize = 512;

/// Keyed hash of a text in normalised form (trimmed, whitespace runs as one space, lower case), so
/// that a transcript and the chat message that carries it, or an answer and the speech request
/// that reads it out, hash the same. Like the prefix hashes, the key is random per process.
pub fn text_hash(text: &str) -> u64 {
    let mut normal = Vec::with_capacity(text.len());
    normalise(text, &mut normal, |_| {});
    hash_bytes(&normal)
}

fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = hasher();
    h.write(bytes);
    h.finish()
}

/// Where a sentence ends (the character itself belongs to neither sentence's hash).
const SENTENCE_ENDS: [char; 8] = ['.', '!', '?', '\n', '…', '。', '！', '？'];

/// Appends `text` in normalised form to `out`: its words joined by one space, lower case. At each
/// sentence end (a character of [`SENTENCE_ENDS`]) calls `sentence` with the normalised sentence
/// before it, which may begin with the space that joins it to the one before. Returns where the
/// last sentence (the one no end closed) starts in `out`.
fn normalise(text: &str, out: &mut Vec<u8>, mut sentence: impl FnMut(&[u8])) -> usize {
    // A whitespace run was seen after a word: a space goes before the next word's character.
    let mut space = false;
    let mut start = 0;
    if text.is_ascii() {
        // The common case, byte by byte: the ASCII characters `char::is_whitespace` accepts.
        for &b in text.as_bytes() {
            match b {
                b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r' => {
                    space = !out.is_empty();
                    if b == b'\n' {
                        sentence(&out[start..]);
                        start = out.len();
                    }
                }
                _ => {
                    let end = out.len();
                    if std::mem::take(&mut space) {
                        out.push(b' ');
                    }
                    out.push(b.to_ascii_lowercase());
                    if matches!(b, b'.' | b'!' | b'?') {
                        sentence(&out[start..end]);
                        start = out.len();
                    }
                }
            }
        }
        return start;
    }
    for c in text.chars() {
        if c.is_whitespace() {
            space = !out.is_empty();
            if c == '\n' {
                sentence(&out[start..]);
                start = out.len();
            }
            continue;
        }
        let end = out.len();
        if std::mem::take(&mut space) {
            out.push(b' ');
        }
        for lower in c.to_lowercase() {
            let mut utf8 = [0; 4];
            out.extend_from_slice(lower.encode_utf8(&mut utf8).as_bytes());
        }
        if SENTENCE_ENDS.contains(&c) {
            sentence(&out[start..end]);
            start = out.len();
        }
    }
    start
}

/// Hashes of a text as a whole and of each of its sentences (cut after `.`, `!`, `?`, `…`, their
/// CJK forms and line breaks), for telling whether a speech request reads out (part of) an answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextHashes {
    pub whole: u64,
    pub sentences: Vec<u64>,
}

impl TextHashes {
    /// The text is normalised once; the whole and each sentence are hashed from that one copy,
    /// so the hashes are those of [`text_hash`] of the text and of each sentence (a test compares
    /// them) without normalising the text again per sentence.
    pub fn of(text: &str) -> TextHashes {
        let mut normal = Vec::with_capacity(text.len());
        let mut sentences = Vec::new();
        let mut add = |sentence: &[u8]| {
            let sentence = sentence.trim_ascii();
            if !sentence.is_empty() && sentences.len() < MAX_SENTENCES {
                sentences.push(hash_bytes(sentence));
            }
        };
        let last = normalise(text, &mut normal, &mut add);
        add(&normal[last..]);
        TextHashes { whole: hash_bytes(&normal), sentences }
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
    for item in &items {
        let mut h = hasher();
        h.write_u64(running);
        feed(&mut h, item, 0);
        running = h.finish();
        shape.prefix_hashes.push(running);
    }
    let users: Vec<usize> = (0..items.len()).filter(|i| last_input(items[*i]) == LastInput::User).collect();
    if let (Some(&first), Some(&last)) = (users.first(), users.last()) {
        shape.turn_anchor = Some(shape.prefix_hashes[last]);
        shape.turn_reply = reply_after(&items[last + 1..]);
        shape.conversation_anchor = Some(shape.prefix_hashes[first]);
        shape.conversation_reply = reply_after(&items[first + 1..]);
    }
    shape
}

/// [`reply_key`] of the assistant items at the start of `items` (one chat message, or several
/// Responses items: a message and its `function_call`s), up to the first item that is not the
/// assistant's.
fn reply_after(items: &[&Value]) -> Option<u64> {
    let mut ids: Vec<&str> = Vec::new();
    let mut text = String::new();
    for item in items.iter().take_while(|item| last_input(item) == LastInput::Assistant) {
        reply_parts(item, &mut ids, &mut text);
    }
    reply_key(ids, &text)
}

/// Tool call ids and text of one assistant item: Chat `tool_calls[].id` and `content`, Anthropic
/// `tool_use` blocks and `text` blocks, Responses `function_call` items (`call_id`) and
/// `output_text` parts, Gemini `functionCall.id` and `text` parts.
fn reply_parts<'a>(item: &'a Value, ids: &mut Vec<&'a str>, text: &mut String) {
    const MAX_IDS: usize = 256;
    let mut id = |v: Option<&'a Value>| {
        if let Some(s) = v.and_then(Value::as_str) {
            if ids.len() < MAX_IDS {
                ids.push(s);
            }
        }
    };
    if let Some(calls) = item.get("tool_calls").and_then(Value::as_array) {
        calls.iter().for_each(|c| id(c.get("id")));
    }
    if item.get("type").and_then(Value::as_str).is_some_and(|t| t.ends_with("_call")) {
        id(item.get("call_id").or_else(|| item.get("id")));
    }
    match ["content", "parts"].iter().find_map(|k| item.get(*k)) {
        Some(Value::String(s)) => text.push_str(s),
        Some(Value::Array(parts)) => {
            for part in parts {
                match part.get("type").and_then(Value::as_str) {
                    Some("tool_use") => id(part.get("id")),
                    Some("text" | "output_text") | None => {
                        if let Some(s) = part.get("text").and_then(Value::as_str) {
                            text.push_str(s);
                        }
                    }
                    _ => {}
                }
                if let Some(call) = part.get("functionCall") {
                    id(call.get("id"));
                }
            }
        }
        _ => {}
    }
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

/// Keyed hash of a tool call's arguments as parsed values, so that a model's argument string and
/// the `arguments` object an agent SDK re-serialised into an MCP `tools/call` hash the same: keys
/// in any order, any whitespace or escapes, numbers by value (`1` and `1.0` alike). An empty text
/// is `{}` (agent SDKs call a tool with no arguments so); text that is not JSON has no hash.
pub fn arguments_hash(json: &str) -> Option<u64> {
    let mut h = hasher();
    h.write(b"tool arguments\0");
    if json.trim().is_empty() {
        feed_value(&mut h, &Value::Object(serde_json::Map::new()), 0);
    } else {
        feed_value(&mut h, &serde_json::from_str::<Value>(json).ok()?, 0);
    }
    Some(h.finish())
}

/// [`feed`] with numbers by value and null-valued keys kept.
fn feed_value(h: &mut impl Hasher, value: &Value, depth: usize) {
    if depth > 32 {
        return;
    }
    match value {
        Value::Number(n) => {
            h.write_u8(3);
            let f = n.as_f64().unwrap_or(f64::NAN);
            h.write_u64(if f == 0.0 { 0 } else { f.to_bits() });
        }
        Value::Array(items) => {
            h.write_u8(5);
            h.write_usize(items.len());
            items.iter().for_each(|v| feed_value(h, v, depth + 1));
        }
        Value::Object(map) => {
            h.write_u8(6);
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            h.write_usize(keys.len());
            for key in keys {
                h.write(key.as_bytes());
                h.write_u8(0xff);
                feed_value(h, &map[key.as_str()], depth + 1);
            }
        }
        other => feed(h, other, depth),
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
    fn argument_hashes_compare_parsed_values() {
        let model = r#"{"city": "Paris", "days": 3, "units": null, "when": {"b": 1.0, "a": [1, "x\u00e9"]}}"#;
        let sdk = r#"{"when":{"a":[1,"xé"],"b":1},"units":null,"days":3.0,"city":"Paris"}"#;
        assert_eq!(arguments_hash(model), arguments_hash(sdk));
        assert!(arguments_hash(model).is_some());
        assert_ne!(arguments_hash(r#"{"days":3}"#), arguments_hash(r#"{"days":4}"#));
        assert_ne!(arguments_hash(r#"{"days":3}"#), arguments_hash(r#"{"days":"3"}"#));
        assert_ne!(arguments_hash(r#"{"a":null}"#), arguments_hash("{}"));
        assert_eq!(arguments_hash(""), arguments_hash("{}"));
        assert_eq!(arguments_hash("{not json"), None);
    }

    /// The normalised form as it was first written: the string built whole, then hashed.
    fn built_whole(text: &str) -> u64 {
        let mut normal = String::new();
        for word in text.split_whitespace() {
            if !normal.is_empty() {
                normal.push(' ');
            }
            normal.extend(word.chars().flat_map(char::to_lowercase));
        }
        let mut h = hasher();
        h.write(normal.as_bytes());
        h.finish()
    }

    proptest::proptest! {
        /// Hashes must not change between versions: a fleet sharing a key hashes alike while it
        /// is upgraded. Any text, ASCII or not, long enough to cross the writer's buffer.
        #[test]
        fn streamed_normalisation_hashes_as_the_whole_string(
            ascii in "[a-zA-Z0-9 .,!?\t\n\r\u{0b}\u{0c}]{0,700}",
            other in "[a-zA-Z .\t\u{85}\u{a0}\u{2003}\u{3000}ÉéİßΣ日本]{0,400}",
        ) {
            proptest::prop_assert_eq!(text_hash(&ascii), built_whole(&ascii));
            proptest::prop_assert_eq!(text_hash(&other), built_whole(&other));
        }

        /// The one-pass hashes are those of the text and of each sentence cut out and hashed
        /// on its own, as first written.
        #[test]
        fn one_pass_text_hashes_are_the_sentences_hashed_one_by_one(
            ascii in "[a-zA-Z0-9 .,!?\t\n\r\u{0b}\u{0c}]{0,700}",
            other in "[a-zA-Z .!?\n\t\u{85}\u{a0}\u{3000}Éé日…。！？]{0,400}",
        ) {
            proptest::prop_assert_eq!(TextHashes::of(&ascii), sentences_one_by_one(&ascii));
            proptest::prop_assert_eq!(TextHashes::of(&other), sentences_one_by_one(&other));
        }
    }

    #[test]
    fn an_answers_reply_key_from_its_text_hashes_is_the_reply_key_of_its_text() {
        for text in ["", "  \n ", "Sunny.", " It is  sunny in Paris.\nHighs of 21. ", "Été à Paris…"] {
            let hashes = (!text.trim().is_empty()).then(|| TextHashes::of(text));
            let from_hashes = reply_key_or([], || hashes.as_ref().map(|h| h.whole));
            assert_eq!(from_hashes, reply_key([], text), "{text:?}");
            assert_eq!(reply_key_or(["call_1"], || hashes.as_ref().map(|h| h.whole)), reply_key(["call_1"], text));
        }
    }

    fn sentences_one_by_one(text: &str) -> TextHashes {
        let sentences = text
            .split(SENTENCE_ENDS)
            .filter(|piece| !piece.trim().is_empty())
            .take(MAX_SENTENCES)
            .map(built_whole)
            .collect();
        TextHashes { whole: built_whole(text), sentences }
    }

    #[test]
    fn sentences_beyond_the_cap_are_not_hashed_in_either_kind_of_text() {
        for text in ["Yes. ".repeat(MAX_SENTENCES + 20), "Oui。".repeat(MAX_SENTENCES + 20)] {
            let hashes = TextHashes::of(&text);
            assert_eq!(hashes.sentences.len(), MAX_SENTENCES);
            assert_eq!(hashes, sentences_one_by_one(&text));
        }
    }

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
