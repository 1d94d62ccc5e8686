//! Request-side facts: what was asked (operation, model, stream flag, limits) and how big the prompt
//! was. Reports state their conditions with these (docs/metrics.md, "Aggregates"). No prompt text
//! leaves this module, only sizes and counts.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::audio::{read_transcription_form, AudioUpload};
use crate::conversation::{self, text_hash, LastInput, TextHashes};
use crate::tokens::count_tokens;

/// What one request body asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestInfo {
    /// OpenTelemetry gen_ai operation name: chat, text_completion, embeddings, generate_content.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub operation: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub stream: Option<bool>,
    /// max_tokens / max_completion_tokens / max_output_tokens / generationConfig.maxOutputTokens /
    /// options.num_predict.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub max_tokens: Option<u64>,
    /// Entries of messages / input / contents.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message_count: Option<u64>,
    /// Request body size; absent when the body was truncated by the capture limit.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub prompt_bytes: Option<u64>,
    /// o200k_base tokens of all text in messages, system prompts, instructions, input and contents.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub prompt_tokens: Option<u64>,
    /// Number of tools offered to the model.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tool_definitions: Option<u64>,
    /// Ids of tool results sent back, to tie this request to the previous response's tool calls.
    #[serde(default)]
    pub tool_result_ids: Vec<String>,
    /// Gemini `functionResponse` parts without an id: their function names, in order (matched to
    /// the previous response's calls by name and order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_result_names: Vec<String>,
    /// What the last message / input item is: a new user message starts a turn, tool results
    /// continue one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub last_input: Option<LastInput>,
    /// OpenAI Responses `previous_response_id`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub previous_response_id: Option<String>,
    /// Keyed hashes of the message prefixes (`conversation.rs`), for linking; never written.
    #[serde(skip)]
    pub prefix_hashes: Vec<u64>,
    /// The turn's and the conversation's keys (`conversation.rs`: anchors and replies), written
    /// only with `[turns] fleet_key`, so that several instances' records rebuild one turn.
    #[serde(
        default,
        with = "crate::conversation::fleet_hex",
        skip_serializing_if = "crate::conversation::fleet_hex::hidden"
    )]
    pub turn_anchor: Option<u64>,
    #[serde(
        default,
        with = "crate::conversation::fleet_hex",
        skip_serializing_if = "crate::conversation::fleet_hex::hidden"
    )]
    pub turn_reply: Option<u64>,
    #[serde(
        default,
        with = "crate::conversation::fleet_hex",
        skip_serializing_if = "crate::conversation::fleet_hex::hidden"
    )]
    pub conversation_anchor: Option<u64>,
    #[serde(
        default,
        with = "crate::conversation::fleet_hex",
        skip_serializing_if = "crate::conversation::fleet_hex::hidden"
    )]
    pub conversation_reply: Option<u64>,
    /// Keyed hash of the text of the last message when it is the user's (`conversation::text_hash`),
    /// to link a transcript to the chat request that sends it; never written.
    #[serde(skip)]
    pub last_user_text_hash: Option<u64>,
    /// Speech-to-text: the upload and the answer format asked for.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub transcription: Option<TranscriptionRequest>,
    /// Text-to-speech: voice, formats and the size of the text.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub speech: Option<SpeechRequest>,
    /// Hashes of the text to speak, to link it to the answer it reads out; never written.
    #[serde(skip)]
    pub speech_input_hashes: Option<TextHashes>,
    /// OpenAI `stream_options.include_usage`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub include_usage: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub parse_error: Option<String>,
}

/// A speech-to-text request's form (multipart), without the audio.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TranscriptionRequest {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub response_format: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub language: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub upload: Option<AudioUpload>,
}

/// A text-to-speech request, without the text.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpeechRequest {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub voice: Option<String>,
    /// `response_format`: mp3 (the default), opus, aac, flac, wav, pcm.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub response_format: Option<String>,
    /// `stream_format`: `audio` (raw bytes, the default) or `sse`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub stream_format: Option<String>,
    /// Characters of `input`.
    pub input_chars: u64,
}

const MAX_TOOL_RESULT_IDS: usize = 256;
/// Longer ids are not kept (real ones are tens of bytes).
const MAX_ID_BYTES: usize = 256;

/// Reads a request body. `body_truncated` says the proxy captured only a prefix; facts that need
/// the whole body are then absent and `parse_error` says why. Path-derived facts (operation, the
/// Gemini model and stream flag) are always filled in.
pub fn analyze_request(path: &str, content_type: Option<&str>, body: &[u8], body_truncated: bool) -> RequestInfo {
    let path_only = path.split('?').next().unwrap_or(path);
    let route = Route::from_path(path_only);
    let mut info = RequestInfo {
        operation: route.operation.map(str::to_owned),
        model: route.path_model.clone(),
        stream: route.path_stream,
        ..RequestInfo::default()
    };
    if body_truncated {
        info.parse_error = Some("request body truncated by capture limit".to_owned());
        // An upload's form fields and audio header come first: read what was captured.
        if let Some(ct) =
            content_type.filter(|ct| ct.trim_start().to_ascii_lowercase().starts_with("multipart/form-data"))
        {
            read_form(&mut info, ct, body);
        }
        return info;
    }
    info.prompt_bytes = Some(body.len() as u64);
    if body.iter().all(u8::is_ascii_whitespace) {
        return info;
    }
    if let Some(ct) = content_type {
        let mime = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        if mime == "multipart/form-data" {
            read_form(&mut info, ct, body);
            return info;
        }
        if !(mime == "application/json" || mime.ends_with("+json") || mime.is_empty()) {
            info.parse_error = Some(format!("not JSON (content type {mime})"));
            return info;
        }
    }
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            info.parse_error = Some(format!("invalid JSON: {e}"));
            return info;
        }
    };
    let Value::Object(map) = &value else {
        info.parse_error = Some("JSON body is not an object".to_owned());
        return info;
    };
    if let Some(model) = map.get("model").and_then(Value::as_str) {
        info.model = Some(model.to_owned());
    }
    info.stream = match map.get("stream").and_then(Value::as_bool) {
        Some(s) => Some(s),
        None => info.stream.or(Some(route.default_stream)),
    };
    info.max_tokens = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| map.get(*k).and_then(Value::as_u64))
        .or_else(|| nested(map, "generationConfig", "maxOutputTokens").and_then(Value::as_u64))
        .or_else(|| nested(map, "options", "num_predict").and_then(Value::as_u64));
    info.include_usage = nested(map, "stream_options", "include_usage").and_then(Value::as_bool);

    let mut texts = Vec::new();
    let mut message_count = None;
    for key in ["messages", "contents", "input"] {
        match map.get(key) {
            Some(Value::Array(items)) => {
                message_count = Some(message_count.unwrap_or(0) + items.len() as u64);
                for item in items {
                    collect_text(item, &mut texts, 0);
                    collect_tool_results(item, &mut info.tool_result_ids, &mut info.tool_result_names);
                }
            }
            Some(Value::String(s)) => {
                message_count = Some(message_count.unwrap_or(0) + 1);
                texts.push(s.as_str());
            }
            _ => {}
        }
    }
    info.message_count = message_count;
    info.last_user_text_hash = last_user_text_hash(map);
    if route.operation == Some(TEXT_TO_SPEECH) {
        if let Some(input) = map.get("input").and_then(Value::as_str) {
            info.speech_input_hashes = Some(TextHashes::of(input));
            let field = |k: &str| map.get(k).and_then(Value::as_str).map(|v| v.chars().take(64).collect::<String>());
            info.speech = Some(SpeechRequest {
                voice: field("voice"),
                response_format: field("response_format"),
                stream_format: field("stream_format"),
                input_chars: input.chars().count() as u64,
            });
            // Speech streams whatever `stream` says.
            info.stream = Some(true);
        }
    }
    let shape = conversation::shape(map);
    info.last_input = shape.last_input;
    info.prefix_hashes = shape.prefix_hashes;
    info.turn_anchor = shape.turn_anchor;
    info.turn_reply = shape.turn_reply;
    info.conversation_anchor = shape.conversation_anchor;
    info.conversation_reply = shape.conversation_reply;
    info.previous_response_id = map
        .get("previous_response_id")
        .and_then(Value::as_str)
        .filter(|id| id.len() <= MAX_ID_BYTES)
        .map(str::to_owned);
    for key in ["system", "instructions", "systemInstruction", "system_instruction", "prompt"] {
        if let Some(v) = map.get(key) {
            collect_text(v, &mut texts, 0);
        }
    }
    info.prompt_tokens = Some(texts.iter().filter_map(|t| count_tokens(t)).sum());
    info.tool_definitions = Some(match map.get("tools") {
        Some(Value::Array(tools)) => tools
            .iter()
            .map(|tool| match tool.get("functionDeclarations").or_else(|| tool.get("function_declarations")) {
                Some(Value::Array(decls)) => decls.len() as u64,
                _ => 1,
            })
            .sum(),
        _ => 0,
    });
    info
}

/// Speech-to-text and text-to-speech operation names (the OpenTelemetry GenAI proposals).
pub const SPEECH_TO_TEXT: &str = "speech_to_text";
pub const TEXT_TO_SPEECH: &str = "text_to_speech";

fn read_form(info: &mut RequestInfo, content_type: &str, body: &[u8]) {
    match read_transcription_form(content_type, body, info.prompt_bytes.unwrap_or(body.len() as u64)) {
        Ok(form) => {
            info.model = form.model.or(info.model.take());
            info.stream = Some(form.stream.unwrap_or(false));
            info.transcription = Some(TranscriptionRequest {
                response_format: form.response_format,
                language: form.language,
                upload: form.upload,
            });
        }
        Err(e) => {
            info.parse_error.get_or_insert(e);
        }
    }
}

/// The hash of the last message's text when the user sent it.
fn last_user_text_hash(map: &serde_json::Map<String, Value>) -> Option<u64> {
    let last = match ["messages", "contents", "input"].iter().find_map(|k| map.get(*k))? {
        Value::Array(items) => items.last()?,
        s @ Value::String(_) => s,
        _ => return None,
    };
    if !matches!(last, Value::String(_)) {
        let role = last.get("role").and_then(Value::as_str).unwrap_or("user");
        if role != "user" || conversation::shape_of_item(last) != LastInput::User {
            return None;
        }
    }
    let mut texts = Vec::new();
    collect_text(last, &mut texts, 0);
    (!texts.is_empty()).then(|| text_hash(&texts.join(" ")))
}

/// `map[outer][inner]` (what `Value::pointer` finds for `/outer/inner`, without building a string
/// per step of the path).
fn nested<'v>(map: &'v serde_json::Map<String, Value>, outer: &str, inner: &str) -> Option<&'v Value> {
    map.get(outer)?.as_object()?.get(inner)
}

/// What the path alone says.
struct Route {
    operation: Option<&'static str>,
    path_model: Option<String>,
    path_stream: Option<bool>,
    /// The API's default for a missing `stream` field (Ollama streams unless told otherwise).
    default_stream: bool,
}

impl Route {
    fn from_path(path: &str) -> Route {
        let mut route = Route { operation: None, path_model: None, path_stream: None, default_stream: false };
        if let Some(idx) = path.find("/models/") {
            // Gemini: /v1beta/models/{model}:{method}
            let rest = &path[idx + "/models/".len()..];
            if let Some((model, method)) = rest.split_once(':') {
                route.path_model = Some(model.to_owned());
                route.operation = match method {
                    "streamGenerateContent" | "generateContent" => Some("generate_content"),
                    "embedContent" | "batchEmbedContents" => Some("embeddings"),
                    _ => None,
                };
                route.path_stream = match method {
                    "streamGenerateContent" => Some(true),
                    "generateContent" => Some(false),
                    _ => None,
                };
                return route;
            }
        }
        if path.ends_with("/audio/transcriptions") || path.ends_with("/audio/translations") {
            route.operation = Some(SPEECH_TO_TEXT);
            return route;
        }
        if path.ends_with("/audio/speech") {
            route.operation = Some(TEXT_TO_SPEECH);
            route.default_stream = true;
            return route;
        }
        route.operation =
            if path.ends_with("/chat/completions") || path.ends_with("/messages") || path.ends_with("/responses") {
                Some("chat")
            } else if path.ends_with("/completions") {
                Some("text_completion")
            } else if path.ends_with("/embeddings") || path.ends_with("/api/embed") || path.ends_with("/api/embeddings")
            {
                Some("embeddings")
            } else if path.ends_with("/api/chat") {
                route.default_stream = true;
                Some("chat")
            } else if path.ends_with("/api/generate") {
                route.default_stream = true;
                Some("text_completion")
            } else {
                None
            };
        route
    }
}

/// Collects every prompt text string reachable from a message, content part list or system value.
/// Recursion is bounded so that deeply nested JSON cannot exhaust the stack.
fn collect_text<'a>(value: &'a Value, out: &mut Vec<&'a str>, depth: usize) {
    if depth > 16 {
        return;
    }
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| collect_text(v, out, depth + 1)),
        Value::Object(map) => {
            for key in ["text", "content", "parts", "output", "thinking"] {
                if let Some(v) = map.get(key) {
                    collect_text(v, out, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// OpenAI `role: tool` messages (`tool_call_id`), Anthropic `tool_result` blocks (`tool_use_id`),
/// Responses `function_call_output` items (`call_id`), Gemini `functionResponse` parts (`id`).
fn collect_tool_results(item: &Value, ids: &mut Vec<String>, names: &mut Vec<String>) {
    let mut push = |id: Option<&Value>| {
        if let Some(id) = id.and_then(Value::as_str).filter(|id| id.len() <= MAX_ID_BYTES) {
            if ids.len() < MAX_TOOL_RESULT_IDS {
                ids.push(id.to_owned());
            }
        }
    };
    if item.get("role").and_then(Value::as_str) == Some("tool") {
        push(item.get("tool_call_id"));
    }
    if item.get("type").and_then(Value::as_str).is_some_and(|t| t.ends_with("_call_output")) {
        push(item.get("call_id"));
    }
    for parts_key in ["content", "parts"] {
        if let Some(Value::Array(parts)) = item.get(parts_key) {
            for part in parts {
                if part.get("type").and_then(Value::as_str) == Some("tool_result") {
                    push(part.get("tool_use_id"));
                }
                if let Some(response) = part.get("functionResponse") {
                    if response.get("id").and_then(Value::as_str).is_some() {
                        push(response.get("id"));
                    } else if let Some(name) = response.get("name").and_then(Value::as_str) {
                        if names.len() < MAX_TOOL_RESULT_IDS && name.len() <= MAX_ID_BYTES {
                            names.push(name.to_owned());
                        }
                    }
                }
            }
        }
    }
}
