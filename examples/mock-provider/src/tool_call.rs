//! One call of a declared tool: its name, arguments the mock invents from the tool's JSON schema,
//! and those arguments cut into the fragments that stream as separate content events.

use serde_json::{json, Map, Value};

use crate::request::DeclaredTool;
use crate::vocabulary::{self, WordStream};

/// Tool name used when the scenario asks for a tool call but the request declares no tool.
const FALLBACK_TOOL: &str = "lookup";
/// Bytes of argument JSON per fragment when no fragment count is asked for.
const ARGUMENT_FRAGMENT_BYTES: usize = 8;
/// Words drawn for one call's string values; they repeat if a schema needs more.
const ARGUMENT_WORDS: u32 = 32;
/// Properties filled in besides the required ones.
const OPTIONAL_PROPERTIES: usize = 3;
/// Nesting depth up to which objects and arrays get contents.
const MAX_DEPTH: u32 = 4;

/// How the argument JSON is cut into streamed pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ArgumentSplit {
    /// Pieces of at most 8 bytes, so arguments always arrive in several pieces.
    SmallPieces,
    /// About this many pieces of similar length (fewer when the JSON is shorter).
    Pieces(u32),
}

impl ArgumentSplit {
    pub(crate) fn from_count(count: Option<u32>) -> ArgumentSplit {
        count.map_or(ArgumentSplit::SmallPieces, |n| ArgumentSplit::Pieces(n.max(1)))
    }

    fn split(self, text: &str) -> Vec<String> {
        match self {
            ArgumentSplit::SmallPieces => split_fragments(text, ARGUMENT_FRAGMENT_BYTES),
            ArgumentSplit::Pieces(count) => split_into(text, count as usize),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct ToolCall {
    /// Position among the calls of one response (the chat-completions `index`).
    pub(crate) index: usize,
    pub(crate) name: String,
    pub(crate) arguments: Value,
    pub(crate) arguments_json: String,
    /// `arguments_json` cut into pieces, each one content event.
    pub(crate) fragments: Vec<String>,
}

impl ToolCall {
    /// A call of `tool` (or of [`FALLBACK_TOOL`] when the request declares none) with arguments that
    /// fit its schema well enough for a client to accept them.
    pub(crate) fn generate(tool: Option<&DeclaredTool>, index: usize, seed: u64, split: ArgumentSplit) -> ToolCall {
        let name = tool.map_or(FALLBACK_TOOL, |t| t.name.as_str()).to_owned();
        let words = vocabulary::tokens(seed.wrapping_add(index as u64), WordStream::ToolArguments, ARGUMENT_WORDS);
        let mut writer = ArgumentWriter { words: words.iter().map(|w| w.trim()).cycle() };
        let arguments = match tool.and_then(|t| t.parameters.as_ref()).filter(|s| s.get("properties").is_some()) {
            Some(schema) => writer.value(schema, schema, 0),
            None => json!({"query": writer.phrase()}),
        };
        let arguments_json = arguments.to_string();
        let fragments = split.split(&arguments_json);
        ToolCall { index, name, arguments, arguments_json, fragments }
    }

    /// The id tag of this call: `base` for the first call (as single calls always had), `base-N` after.
    pub(crate) fn tag(&self, base: &str) -> String {
        match self.index {
            0 => base.to_owned(),
            n => format!("{base}-{n}"),
        }
    }
}

/// Fills a JSON schema with plain values: strings get two words, numbers 42 (kept inside
/// `minimum`/`maximum`), booleans true, consts, enums and defaults their (first) value; objects get their
/// required properties and a few more; `$ref`, `anyOf`/`oneOf`/`allOf` and nullable types are followed.
struct ArgumentWriter<'a, I: Iterator<Item = &'a str>> {
    words: I,
}

impl<'a, I: Iterator<Item = &'a str>> ArgumentWriter<'a, I> {
    fn phrase(&mut self) -> String {
        let first = self.words.next().unwrap_or_default();
        let second = self.words.next().unwrap_or_default();
        format!("{first} {second}")
    }

    fn value(&mut self, schema: &Value, root: &Value, depth: u32) -> Value {
        if let Some(target) = schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix('#'))
            .and_then(|pointer| root.pointer(pointer))
        {
            if depth < MAX_DEPTH {
                return self.value(target, root, depth + 1);
            }
        }
        if let Some(constant) = schema.get("const") {
            return constant.clone();
        }
        if let Some(first) = schema.get("enum").and_then(|e| e.as_array()?.first()) {
            return first.clone();
        }
        if let Some(default) = schema.get("default").filter(|d| !d.is_null()) {
            return default.clone();
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            let branches = schema.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            let not_null = branches.iter().find(|b| b.get("type").and_then(Value::as_str) != Some("null"));
            if let Some(branch) = not_null {
                return self.value(branch, root, depth + 1);
            }
        }
        let kind = match schema.get("type") {
            Some(Value::String(kind)) => Some(kind.as_str()),
            Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).find(|k| *k != "null"),
            _ => None,
        };
        match kind {
            Some("object") => self.object(schema, root, depth),
            None if schema.get("properties").is_some() => self.object(schema, root, depth),
            Some("integer") => number(schema, 42.0).map_or(json!(42), |n| json!(n as i64)),
            Some("number") => number(schema, 42.0).map_or(json!(42), |n| json!(n)),
            Some("boolean") => json!(true),
            Some("null") => Value::Null,
            Some("array") => self.array(schema, root, depth),
            _ => json!(self.phrase()),
        }
    }

    fn object(&mut self, schema: &Value, root: &Value, depth: u32) -> Value {
        let mut object = Map::new();
        let Some(properties) = schema.get("properties").and_then(Value::as_object).filter(|_| depth < MAX_DEPTH) else {
            return Value::Object(object);
        };
        let required: Vec<&str> =
            schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        let mut optional = 0;
        for (key, property) in properties {
            let is_required = required.contains(&key.as_str());
            if !is_required {
                if optional == OPTIONAL_PROPERTIES {
                    continue;
                }
                optional += 1;
            }
            let value = self.value(property, root, depth + 1);
            object.insert(key.clone(), value);
        }
        Value::Object(object)
    }

    fn array(&mut self, schema: &Value, root: &Value, depth: u32) -> Value {
        let min_items = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0).min(3);
        match schema.get("items").filter(|_| depth < MAX_DEPTH) {
            Some(items) => Value::Array((0..min_items).map(|_| self.value(items, root, depth + 1)).collect()),
            None => json!([]),
        }
    }
}

/// `preferred` moved inside the schema's `minimum`/`maximum`, or `None` when the schema sets neither.
fn number(schema: &Value, preferred: f64) -> Option<f64> {
    let minimum = schema.get("minimum").and_then(Value::as_f64);
    let maximum = schema.get("maximum").and_then(Value::as_f64);
    if minimum.is_none() && maximum.is_none() {
        return None;
    }
    let low = minimum.unwrap_or(f64::MIN);
    Some(preferred.max(low).min(maximum.unwrap_or(f64::MAX).max(low)))
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

/// Splits on char boundaries into `count` pieces of nearly equal length (fewer for short text).
fn split_into(text: &str, count: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let count = count.clamp(1, chars.len().max(1));
    (0..count).map(|i| chars[i * chars.len() / count..(i + 1) * chars.len() / count].iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(parameters: Value) -> DeclaredTool {
        DeclaredTool { name: "t".into(), parameters: Some(parameters) }
    }

    #[test]
    fn fragments_rejoin() {
        let f = split_fragments("{\"location\":\"the of\"}", 8);
        assert!(f.len() > 2);
        assert_eq!(f.concat(), "{\"location\":\"the of\"}");
        for count in 1..=30 {
            let pieces = split_into("{\"location\":\"the of\"}", count);
            assert_eq!(pieces.len(), count.min(21));
            assert!(pieces.iter().all(|p| !p.is_empty()));
            assert_eq!(pieces.concat(), "{\"location\":\"the of\"}");
        }
    }

    #[test]
    fn tool_arguments_follow_schema() {
        let tool = DeclaredTool {
            name: "get_weather".into(),
            parameters: Some(json!({"type":"object","properties":{
                "city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer"}}})),
        };
        let call = ToolCall::generate(Some(&tool), 0, 0, ArgumentSplit::SmallPieces);
        assert_eq!(call.arguments["unit"], "celsius");
        assert_eq!(call.arguments["days"], 42);
        assert!(call.arguments["city"].is_string());
        assert_eq!(call.fragments.concat(), call.arguments_json);
        let other = ToolCall::generate(Some(&tool), 1, 0, ArgumentSplit::Pieces(3));
        assert_eq!(other.fragments.len(), 3);
        assert_eq!(other.tag("tool"), "tool-1");
    }

    #[test]
    fn schemas_get_plausible_values() {
        let cases = [
            // Every required property, even past the optional limit (strict schemas require them all).
            (
                json!({"type":"object","required":["a","b","c","d","e"],"additionalProperties":false,"properties":{
                "a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"},"d":{"type":"boolean"},"e":{"type":"null"}}}),
                json!(["a", "b", "c", "d", "e"]),
            ),
            (json!({"type":"object","properties":{}}), json!([])),
        ];
        for (schema, keys) in cases {
            let call = ToolCall::generate(Some(&tool(schema)), 0, 0, ArgumentSplit::SmallPieces);
            let got: Vec<&String> = call.arguments.as_object().unwrap().keys().collect();
            assert_eq!(json!(got), keys);
        }
        let nested = json!({"type":"object","required":["when","where","n","tags","level","unit"],"properties":{
            "unit":{"type":"string","default":"celsius"},
            "when":{"anyOf":[{"type":"null"},{"type":"string"}]},
            "where":{"$ref":"#/$defs/Place"},
            "n":{"type":"integer","minimum":100},
            "tags":{"type":"array","items":{"type":"string"},"minItems":2},
            "level":{"type":["null","number"],"maximum":1}},
            "$defs":{"Place":{"type":"object","required":["city"],"properties":{"city":{"type":"string"}}}}});
        let call = ToolCall::generate(Some(&tool(nested)), 0, 0, ArgumentSplit::SmallPieces);
        let args = &call.arguments;
        assert!(args["when"].is_string());
        assert!(args["where"]["city"].is_string());
        assert_eq!(args["n"], 100);
        assert_eq!(args["tags"].as_array().unwrap().len(), 2);
        assert_eq!(args["level"], 1.0);
        assert_eq!(args["unit"], "celsius");
        let untyped = ToolCall::generate(None, 0, 0, ArgumentSplit::SmallPieces);
        assert_eq!(untyped.name, FALLBACK_TOOL);
        assert!(untyped.arguments["query"].is_string());
    }
}
