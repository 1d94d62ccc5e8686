//! Answer characters in the body the page reads, counted as it arrives.
//!
//! When an app server stands between the page and tokentap, the page reads the app's own
//! encoding of the answer, so tokentap cannot line up the page's bytes with its own. The probe
//! therefore counts the answer's characters (Unicode scalars, as tokentap counts
//! `answer_chars_cum`) in the formats apps commonly stream, and reports the count at every chunk
//! arrival. Only the count leaves the page, never the text.
//!
//! Formats ([`TextFormat`]), chosen from the content type (and the AI SDK's header), else from
//! the first bytes:
//! - `Sse` (`text/event-stream`): each event's `data` (lines joined with LF). JSON data is read
//!   with [`event_text`]; `[DONE]` has no text; any other data is text itself.
//! - `Ndjson` (`application/x-ndjson`, `application/jsonl`, or a body starting with `{`): each
//!   line read with [`event_text`].
//! - `DataStream` (`x-vercel-ai-data-stream: v1`): `0:"…"` lines are text; other parts are not.
//! - `PlainText` (anything else): every character is answer text.
//!
//! Only complete events count (a line or SSE event whose end has arrived), as tokentap counts
//! an event when the bytes that complete it arrive. An event or line longer than
//! [`MAX_EVENT_BYTES`] is skipped and counted.

pub mod infer;
pub mod json;

use infer::Fields;
use json::Value;

/// Longest event (SSE data, or one line) read; longer ones are skipped.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// How the body carries its answer text (the protocol's names).
pub use tokentap_probe_protocol::TextFormat;

/// The format a response's headers announce, if they do.
pub fn format_from_headers(content_type: &str, ai_data_stream: bool) -> Option<TextFormat> {
    let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if ai_data_stream {
        return Some(TextFormat::DataStream);
    }
    match media.as_str() {
        "text/event-stream" => Some(TextFormat::Sse),
        "application/x-ndjson" | "application/jsonl" | "application/json-lines" | "application/x-jsonlines" => {
            Some(TextFormat::Ndjson)
        }
        "text/plain" | "text/markdown" => Some(TextFormat::PlainText),
        _ => None,
    }
}

/// The format the first bytes suggest (after any UTF-8 BOM and whitespace).
fn sniff(start: &[u8]) -> TextFormat {
    let start = &start[start.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(start.len())..];
    if [&b"data:"[..], b"event:", b"id:", b"retry:", b":"].iter().any(|p| start.starts_with(p)) {
        TextFormat::Sse
    } else if start.starts_with(b"{") || tagged_json(start) {
        TextFormat::Ndjson
    } else {
        TextFormat::PlainText
    }
}

/// A line starting with a short tag or length and a colon before JSON (`12:{`, `t:"`).
fn tagged_json(start: &[u8]) -> bool {
    let tag = start.iter().take_while(|b| b.is_ascii_alphanumeric()).count();
    (1..=4).contains(&tag) && start.get(tag) == Some(&b':') && matches!(start.get(tag + 1), Some(b'{' | b'"' | b'['))
}

/// The incremental counter for one body.
#[derive(Debug)]
pub struct AnswerText {
    format: Option<TextFormat>,
    /// Bytes of a leading UTF-8 BOM matched so far; `None` once the start is past.
    bom: Option<usize>,
    /// Bytes seen before the format could be sniffed.
    head: Vec<u8>,
    line: Vec<u8>,
    line_oversized: bool,
    /// A CR ended the last line: an LF right after it is the same line end.
    after_cr: bool,
    /// SSE: the current event's data, and whether it has a data field yet.
    data: Vec<u8>,
    has_data: bool,
    data_oversized: bool,
    chars: u64,
    /// Events longer than [`MAX_EVENT_BYTES`], skipped.
    pub skipped_events: u64,
    /// Learning which fields carry text (the first pass), or counting those (the second).
    learn: Fields,
    fields: Option<Vec<String>>,
}

const BOM: &[u8; 3] = b"\xEF\xBB\xBF";

/// Significant bytes needed to sniff a format (`retry:` is the longest prefix).
const SNIFF_BYTES: usize = 6;

impl AnswerText {
    /// A counter for a body in `format`, or one that sniffs the format from the first bytes.
    pub fn new(format: Option<TextFormat>) -> Self {
        AnswerText {
            format,
            bom: Some(0),
            head: Vec::new(),
            line: Vec::new(),
            line_oversized: false,
            after_cr: false,
            data: Vec::new(),
            has_data: false,
            data_oversized: false,
            chars: 0,
            skipped_events: 0,
            learn: Fields::default(),
            fields: None,
        }
    }

    /// Answer characters in one JSON event: by the known shapes, or in the inferred fields.
    fn json_text(&mut self, v: &Value) -> u64 {
        match &self.fields {
            Some(fields) => infer::count(v, fields),
            None => {
                self.learn.learn(v);
                event_text(v)
            }
        }
    }

    pub fn format(&self) -> Option<TextFormat> {
        self.format
    }

    /// Answer characters of the complete events so far.
    pub fn chars(&self) -> u64 {
        self.chars
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.push(b);
        }
    }

    /// The body ended: a last line without a line end counts (NDJSON, data stream); an SSE event
    /// without its blank line does not (as in browsers and tokentap).
    pub fn finish(&mut self) {
        if let Some(matched) = self.bom.take() {
            for &b in &BOM[..matched] {
                self.after_bom(b);
            }
        }
        if self.format.is_none() {
            self.sniff();
        }
        if matches!(self.format, Some(TextFormat::Ndjson | TextFormat::DataStream)) && !self.line.is_empty() {
            self.end_line();
        }
    }

    fn push(&mut self, b: u8) {
        if let Some(matched) = self.bom {
            if b == BOM[matched] {
                self.bom = (matched + 1 < BOM.len()).then_some(matched + 1);
                return;
            }
            // Not a BOM after all: its bytes so far are body bytes.
            self.bom = None;
            for &earlier in &BOM[..matched] {
                self.after_bom(earlier);
            }
        }
        self.after_bom(b);
    }

    fn after_bom(&mut self, b: u8) {
        match self.format {
            Some(format) => self.byte(format, b),
            None => {
                self.head.push(b);
                let significant = self.head.iter().skip_while(|b| b.is_ascii_whitespace()).count();
                if significant >= SNIFF_BYTES || (significant > 0 && b == b'\n') {
                    self.sniff();
                }
            }
        }
    }

    fn sniff(&mut self) {
        let format = sniff(&self.head);
        self.format = Some(format);
        for b in std::mem::take(&mut self.head) {
            self.byte(format, b);
        }
    }

    fn byte(&mut self, format: TextFormat, b: u8) {
        if format == TextFormat::PlainText {
            // Every scalar counts: count the bytes that start one (not UTF-8 continuation bytes).
            if b & 0xC0 != 0x80 {
                self.chars += 1;
            }
            return;
        }
        match b {
            b'\n' if self.after_cr => self.after_cr = false,
            b'\n' | b'\r' => {
                self.after_cr = b == b'\r';
                self.end_line();
            }
            _ => {
                self.after_cr = false;
                if self.line.len() < MAX_EVENT_BYTES {
                    self.line.push(b);
                } else {
                    self.line_oversized = true;
                }
            }
        }
    }

    fn end_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        let oversized = std::mem::replace(&mut self.line_oversized, false);
        match self.format {
            Some(TextFormat::Sse) => self.sse_line(&line, oversized),
            Some(TextFormat::Ndjson) if oversized => self.skipped_events += 1,
            Some(TextFormat::Ndjson) if !line.iter().all(u8::is_ascii_whitespace) => {
                // JSON lines, possibly after a short prefix (a length, a tag: `12:{…}`).
                let start = line.iter().position(|b| matches!(b, b'{' | b'[' | b'"')).unwrap_or(0);
                if let Some(v) = json::parse(&line[start..]) {
                    self.chars += self.json_text(&v);
                }
            }
            Some(TextFormat::DataStream) if oversized => self.skipped_events += 1,
            Some(TextFormat::DataStream) => {
                if let Some(part) = line.strip_prefix(b"0:") {
                    self.chars += json::parse(part).as_ref().and_then(Value::str).map_or(0, count);
                }
            }
            _ => {}
        }
        self.line = line;
        self.line.clear();
    }

    fn sse_line(&mut self, line: &[u8], oversized: bool) {
        if line.is_empty() {
            // Dispatch.
            if std::mem::replace(&mut self.data_oversized, false) {
                self.skipped_events += 1;
            } else if self.has_data {
                let data = std::mem::take(&mut self.data);
                self.chars += self.sse_data_text(&data);
                self.data = data;
            }
            self.data.clear();
            self.has_data = false;
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &b""[..]),
        };
        if field != b"data" {
            return;
        }
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if oversized || self.data.len() + value.len() + 1 > MAX_EVENT_BYTES {
            self.data_oversized = true;
            return;
        }
        if self.has_data {
            self.data.push(b'\n');
        }
        self.data.extend_from_slice(value);
        self.has_data = true;
    }
}

fn count(s: &str) -> u64 {
    s.chars().count() as u64
}

impl AnswerText {
    /// One whole message (an event's data): its answer characters count at once.
    pub fn message(&mut self, data: &[u8]) {
        if data.len() > MAX_EVENT_BYTES {
            self.skipped_events += 1;
        } else {
            self.chars += self.sse_data_text(data);
        }
    }

    /// Answer characters of one SSE event's data.
    fn sse_data_text(&mut self, data: &[u8]) -> u64 {
        let trimmed = data.trim_ascii();
        if trimmed == b"[DONE]" {
            return 0;
        }
        if trimmed.starts_with(b"{") || trimmed.starts_with(b"[") || trimmed.starts_with(b"\"") {
            if let Some(v) = json::parse(trimmed) {
                return self.json_text(&v);
            }
        }
        count(&String::from_utf8_lossy(data))
    }
}

/// A body's answer characters after each chunk, and how they were found.
#[derive(Debug, PartialEq)]
pub struct Counted {
    /// (cumulative bytes, cumulative answer characters) after each chunk.
    pub counts: Vec<(u64, u64)>,
    pub format: Option<TextFormat>,
    /// No known shape had text: the characters are those of the inferred fields ([`infer`]).
    pub inferred: bool,
}

/// Counts the answer characters of a body received in `chunks` (`ended`: the body ended, so a
/// last line without its line end counts). When no known shape yields text, a second pass counts
/// the fields inferred from the first.
pub fn count_chunks(format: Option<TextFormat>, chunks: &[Vec<u8>], ended: bool) -> Counted {
    two_passes(format, |counter| {
        let mut counts = Vec::with_capacity(chunks.len());
        let mut total = 0u64;
        for chunk in chunks {
            counter.feed(chunk);
            total += chunk.len() as u64;
            counts.push((total, counter.chars()));
        }
        if ended {
            counter.finish();
            if let Some(last) = counts.last_mut() {
                last.1 = counter.chars();
            }
        }
        counts
    })
}

/// Counts the answer characters of a stream the page received as whole messages (the data of
/// each `EventSource` event, each WebSocket text message): every message is one complete event,
/// read like an SSE event's data (JSON by the known shapes, `[DONE]` none, anything else text).
/// `format` is what the report names (`sse` for an `EventSource`, `messages` for a socket).
pub fn count_messages(format: TextFormat, messages: &[Vec<u8>]) -> Counted {
    two_passes(Some(format), |counter| {
        let mut total = 0u64;
        messages
            .iter()
            .map(|m| {
                counter.message(m);
                total += m.len() as u64;
                (total, counter.chars())
            })
            .collect()
    })
}

/// Runs `pass` with a counter of the known shapes; when those found no text, again with the
/// fields the first pass inferred.
fn two_passes(format: Option<TextFormat>, pass: impl Fn(&mut AnswerText) -> Vec<(u64, u64)>) -> Counted {
    let mut first = AnswerText::new(format);
    let counts = pass(&mut first);
    if first.chars() == 0 {
        let fields = first.learn.text_fields();
        if !fields.is_empty() {
            let mut second = AnswerText::new(first.format());
            second.fields = Some(fields);
            let counts = pass(&mut second);
            return Counted { counts, format: second.format(), inferred: true };
        }
    }
    Counted { counts, format: first.format(), inferred: false }
}

/// Answer characters in one JSON event, by the first rule that matches:
/// - a `type` field: `text-delta` (`delta`, or `textDelta`; the AI SDK), `response.output_text.delta`
///   and `response.refusal.delta` (`delta`; OpenAI Responses), `content_block_delta` with a
///   `text_delta` (`delta.text`) and a `text` `content_block_start` (Anthropic), `text` (`text`);
///   any other type has no answer text (reasoning, tool input, lifecycle);
/// - `choices[]`: `delta.content`, `delta.refusal`, `text`, `message.content` (OpenAI chat);
/// - `candidates[].content.parts[].text` without `thought: true` (Gemini);
/// - `message.content`, or a string `response` (Ollama);
/// - the first string among `text`, `delta`, `content`, `token`, `answer` (an app's own event);
/// - a bare JSON string.
pub fn event_text(v: &Value) -> u64 {
    let text = |v: Option<&Value>| v.and_then(Value::str).map_or(0, count);
    if let Value::String(s) = v {
        return count(s);
    }
    if let Some(kind) = v.get("type").and_then(Value::str) {
        return match kind {
            "text-delta" => text(v.get("delta").or_else(|| v.get("textDelta"))),
            "response.output_text.delta" | "response.refusal.delta" => text(v.get("delta")),
            "content_block_delta" => match v.get("delta") {
                Some(d) if d.get("type").and_then(Value::str) == Some("text_delta") => text(d.get("text")),
                _ => 0,
            },
            "content_block_start" => match v.get("content_block") {
                Some(b) if b.get("type").and_then(Value::str) == Some("text") => text(b.get("text")),
                _ => 0,
            },
            "text" => text(v.get("text")),
            _ => 0,
        };
    }
    if let Some(choices) = v.get("choices") {
        return choices
            .items()
            .iter()
            .map(|c| {
                let delta = c.get("delta");
                text(delta.and_then(|d| d.get("content")))
                    + text(delta.and_then(|d| d.get("refusal")))
                    + text(c.get("text"))
                    + text(c.get("message").and_then(|m| m.get("content")))
            })
            .sum();
    }
    if let Some(candidates) = v.get("candidates") {
        return candidates
            .items()
            .iter()
            .flat_map(|c| c.get("content").and_then(|c| c.get("parts")).map(Value::items).unwrap_or(&[]))
            .filter(|p| p.get("thought") != Some(&Value::Bool(true)))
            .map(|p| text(p.get("text")))
            .sum();
    }
    if let Some(message) = v.get("message") {
        return text(message.get("content"));
    }
    ["response", "text", "delta", "content", "token", "answer"]
        .iter()
        .find_map(|k| v.get(k).and_then(Value::str))
        .map_or(0, count)
}

#[cfg(test)]
mod tests;
