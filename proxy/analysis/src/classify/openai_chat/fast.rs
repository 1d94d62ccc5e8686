//! Fast path for the common shape of a Chat Completions chunk: a one-pass scanner that produces the
//! same [`Chunk`] serde would, for the fields the classifier reads, at a fraction of the cost (the
//! typed serde parse was about 40% of a whole stream's analysis).
//!
//! It is deliberately narrow. Whenever the frame is anything but a plain object of the common shape
//! — a non-null `usage`, `error`, `timings`, `x_groq`, `time_info`, `tool_calls`, `function_call` or
//! `message`, a `reasoning` object, an escaped key, a lone surrogate, a duplicate field, an `index`
//! that is not a small unsigned integer, deep nesting, anything that is not strictly valid JSON — it
//! returns `None` and the caller parses with serde_json as before, so results never depend on which
//! path ran. The contract (tested against serde_json on generated and mutated chunks):
//! `parse(..., data) == Some(chunk)` implies `serde_json::from_str::<Chunk>(data)` is `Ok` with an
//! equal chunk.
//!
//! Resuming: the chunks of one stream repeat the same bytes up to the answer text (`id`, `object`,
//! `created`, `model`, ..., `"choices":[{"index":0,"delta":{"content":`). The parser's state at that
//! point depends only on the bytes before it, so [`Resume`] keeps those bytes and where each known
//! member before them started; a chunk with the same prefix re-reads just those members (same bytes,
//! same values) and parses on from the content value, skipping the rest of the prefix.

use std::borrow::Cow;

use serde_json::Value;

use super::{Choice, Chunk, Delta};
use crate::classify::Text;

/// Nesting depth of unknown values skipped here; deeper ones are left to serde_json (whose own
/// limit, 128, is then never the one that decides).
const MAX_DEPTH: u32 = 24;

/// Known members, in the index order that [`Members`] uses.
const TOP_FIELDS: [&str; 8] = ["id", "model", "choices", "usage", "error", "timings", "x_groq", "time_info"];
const CHOICE_FIELDS: [&str; 5] = ["index", "delta", "message", "text", "finish_reason"];
const DELTA_FIELDS: [&str; 7] =
    ["role", "content", "reasoning_content", "reasoning", "refusal", "tool_calls", "function_call"];
const CHOICES: usize = 2;
const DELTA: usize = 1;
const CONTENT: usize = 1;

/// The resumable state of one stream (see the module documentation).
#[derive(Debug, Default)]
pub(super) struct Resume {
    snapshot: Option<Snapshot>,
}

#[derive(Debug)]
struct Snapshot {
    /// The bytes before the value of `choices[0].delta.content`.
    prefix: Vec<u8>,
    /// Known members before it, per object.
    top: Vec<Saved>,
    choice: Vec<Saved>,
    delta: Vec<Saved>,
}

/// A known member before the resume point: its field index, the offset of its value, and how to
/// get the value back from a chunk with the same prefix.
#[derive(Debug, Clone, Copy)]
struct Saved {
    field: usize,
    at: usize,
    value: SavedValue,
}

#[derive(Debug, Clone, Copy)]
enum SavedValue {
    /// A text member that was `null`.
    Null,
    /// A text member without escapes: the same bytes, so the same slice of the new chunk.
    Slice(usize, usize),
    /// Anything else: parsed again from the same bytes.
    Parse,
}

/// Parses `data` if it has the common shape; `None` means "use serde_json".
pub(super) fn parse<'d>(resume: &mut Resume, data: &'d str) -> Option<Chunk<'d>> {
    if let Some(snapshot) = &resume.snapshot {
        if data.as_bytes().starts_with(&snapshot.prefix) {
            // Same prefix, same state: a fresh parse would reach exactly this point and fail or
            // succeed exactly as the resumed one does.
            return snapshot.resume(data);
        }
    }
    let mut p = Parser::new(data);
    let (chunk, top) = p.chunk()?;
    p.ws();
    if p.i != p.b.len() {
        return None;
    }
    if let (Some(mark), Some(choice_members), Some(delta_members)) = (p.mark, &p.choice0, &p.delta0) {
        let choice = chunk.choices.as_ref().and_then(|c| c.first());
        let delta = choice.and_then(|c| c.delta.as_ref());
        if let (Some(choice), Some(delta)) = (choice, delta) {
            resume.snapshot = Some(Snapshot {
                prefix: data.as_bytes()[..mark].to_vec(),
                top: top.saved(mark, Some(CHOICES), |f| top_text(&chunk, f), data),
                choice: choice_members.saved(mark, Some(DELTA), |f| choice_text(choice, f), data),
                delta: delta_members.saved(mark, None, |f| delta_text(delta, f), data),
            });
        }
    }
    Some(chunk)
}

/// The text members of each object, by field index (others are parsed again when resuming).
fn top_text<'x, 'a>(chunk: &'x Chunk<'a>, field: usize) -> Option<&'x Option<Text<'a>>> {
    match field {
        0 => Some(&chunk.id),
        1 => Some(&chunk.model),
        _ => None,
    }
}

fn choice_text<'x, 'a>(choice: &'x Choice<'a>, field: usize) -> Option<&'x Option<Text<'a>>> {
    match field {
        3 => Some(&choice.text),
        4 => Some(&choice.finish_reason),
        _ => None,
    }
}

fn delta_text<'x, 'a>(delta: &'x Delta<'a>, field: usize) -> Option<&'x Option<Text<'a>>> {
    match field {
        0 => Some(&delta.role),
        CONTENT => Some(&delta.content),
        2 => Some(&delta.reasoning_content),
        4 => Some(&delta.refusal),
        _ => None,
    }
}

fn set_top<'a>(chunk: &mut Chunk<'a>, field: usize, value: Option<Text<'a>>) {
    match field {
        0 => chunk.id = value,
        _ => chunk.model = value,
    }
}

fn set_choice<'a>(choice: &mut Choice<'a>, field: usize, value: Option<Text<'a>>) {
    match field {
        3 => choice.text = value,
        _ => choice.finish_reason = value,
    }
}

fn set_delta<'a>(delta: &mut Delta<'a>, field: usize, value: Option<Text<'a>>) {
    match field {
        0 => delta.role = value,
        CONTENT => delta.content = value,
        2 => delta.reasoning_content = value,
        _ => delta.refusal = value,
    }
}

/// Restores saved members into one object: `set` for text members, `parse` for the others.
fn restore<'d, T>(
    saved: &[Saved],
    data: &'d str,
    target: &mut T,
    members: &mut Members,
    set: impl Fn(&mut T, usize, Option<Text<'d>>),
    mut parse: impl FnMut(&mut T, &mut Members, Saved) -> Option<()>,
) -> Option<()> {
    for &m in saved {
        match m.value {
            SavedValue::Null => members.first(m.field, m.at)?,
            SavedValue::Slice(start, end) => {
                members.first(m.field, m.at)?;
                set(target, m.field, Some(Text(Cow::Borrowed(data.get(start..end)?))));
            }
            SavedValue::Parse => parse(target, members, m)?,
        }
    }
    Some(())
}

impl Snapshot {
    fn resume<'d>(&self, data: &'d str) -> Option<Chunk<'d>> {
        let mut p = Parser::new(data);
        let mut chunk = empty_chunk();
        let mut top = Members::default();
        restore(&self.top, data, &mut chunk, &mut top, set_top, |c, m, saved| {
            p.i = saved.at;
            p.top_member(c, m, saved.field)
        })?;
        let mut choice = empty_choice();
        let mut choice_members = Members::default();
        restore(&self.choice, data, &mut choice, &mut choice_members, set_choice, |c, m, saved| {
            p.i = saved.at;
            p.choice_member(c, m, saved.field)
        })?;
        let mut delta = empty_delta();
        let mut delta_members = Members::default();
        restore(&self.delta, data, &mut delta, &mut delta_members, set_delta, |d, m, saved| {
            p.i = saved.at;
            p.delta_member(d, m, saved.field)
        })?;
        top.first(CHOICES, 0)?;
        choice_members.first(DELTA, 0)?;
        // From the content value on, exactly the fresh parse's path.
        p.i = self.prefix.len();
        p.delta_member(&mut delta, &mut delta_members, CONTENT)?;
        p.members_after_value(|p, key| p.delta_key(&mut delta, &mut delta_members, key))?;
        choice.delta = Some(delta);
        p.members_after_value(|p, key| p.choice_key(&mut choice, &mut choice_members, key))?;
        let mut choices = vec![choice];
        if p.more(b']')? {
            p.elements(1, |p, _| {
                choices.push(p.choice(false)?);
                Some(())
            })?;
        }
        chunk.choices = Some(choices);
        p.members_after_value(|p, key| p.top_key(&mut chunk, &mut top, key))?;
        p.ws();
        (p.i == p.b.len()).then_some(chunk)
    }
}

/// Known members seen in one object and where their values start: serde rejects a repeated known
/// member, and the offsets make a resumable snapshot.
#[derive(Default)]
struct Members {
    seen: u32,
    at: [usize; 8],
}

impl Members {
    fn first(&mut self, field: usize, at: usize) -> Option<()> {
        let bit = 1 << field;
        if self.seen & bit != 0 {
            return None;
        }
        self.seen |= bit;
        self.at[field] = at;
        Some(())
    }

    /// The members whose values start before `mark`, except `enclosing` (the one holding `mark`),
    /// with how to restore each: `text(field)` gives a text member's parsed value.
    fn saved<'x, 'a: 'x>(
        &self,
        mark: usize,
        enclosing: Option<usize>,
        text: impl Fn(usize) -> Option<&'x Option<Text<'a>>>,
        data: &str,
    ) -> Vec<Saved> {
        (0..self.at.len())
            .filter(|&f| self.seen & (1 << f) != 0 && self.at[f] < mark && Some(f) != enclosing)
            .map(|field| {
                let value = match text(field) {
                    Some(None) => SavedValue::Null,
                    Some(Some(Text(Cow::Borrowed(s)))) => {
                        // Borrowed from `data`, so this is the slice's offset in it; it lies in
                        // the prefix, whose bytes every resumed chunk repeats.
                        let start = (s.as_ptr() as usize).wrapping_sub(data.as_ptr() as usize);
                        if start.checked_add(s.len()).is_some_and(|end| end <= mark) {
                            SavedValue::Slice(start, start + s.len())
                        } else {
                            SavedValue::Parse
                        }
                    }
                    _ => SavedValue::Parse,
                };
                Saved { field, at: self.at[field], value }
            })
            .collect()
    }
}

fn empty_chunk<'a>() -> Chunk<'a> {
    Chunk {
        id: None,
        model: None,
        choices: None,
        usage: None,
        error: None,
        timings: None,
        x_groq: None,
        time_info: None,
    }
}

fn empty_choice<'a>() -> Choice<'a> {
    Choice { index: None, delta: None, message: None, text: None, finish_reason: None }
}

fn empty_delta<'a>() -> Delta<'a> {
    Delta {
        role: None,
        content: None,
        reasoning_content: None,
        reasoning: None,
        refusal: None,
        tool_calls: None,
        function_call: None,
    }
}

fn field_index(fields: &[&str], key: &str) -> Option<usize> {
    fields.iter().position(|f| *f == key)
}

/// Index of the first byte at or after `from` that ends a plain run inside a string (`"`, `\\` or a
/// control character), or `b.len()`. Eight bytes at a time, like serde_json: in each word the lowest
/// flagged byte is exact (borrows only ever flag bytes above a true hit).
fn plain_run_end(b: &[u8], from: usize) -> usize {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES << 7;
    let mut i = from;
    while let Some(word) = b.get(i..i + 8) {
        let Ok(word) = <[u8; 8]>::try_from(word) else {
            break;
        };
        let v = u64::from_le_bytes(word);
        let control = v.wrapping_sub(ONES * 0x20) & !v;
        let q = v ^ (ONES * u64::from(b'"'));
        let quote = q.wrapping_sub(ONES) & !q;
        let e = v ^ (ONES * u64::from(b'\\'));
        let escape = e.wrapping_sub(ONES) & !e;
        let hits = (control | quote | escape) & HIGH;
        if hits != 0 {
            return i + (hits.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&c) = b.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            break;
        }
        i += 1;
    }
    i
}

struct Parser<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
    /// Where the parse is on the resumable path: 0 outside, 1 in the members of `choices[0]`, 2 in
    /// the members of its `delta`.
    path: u8,
    /// Offset just after `"content":` in `choices[0].delta`, once reached.
    mark: Option<usize>,
    /// The members of `choices[0]` and of its `delta`, once parsed.
    choice0: Option<Members>,
    delta0: Option<Members>,
}

impl<'a> Parser<'a> {
    fn new(s: &'a str) -> Self {
        Parser { s, b: s.as_bytes(), i: 0, path: 0, mark: None, choice0: None, delta0: None }
    }

    /// JSON whitespace only (serde_json's definition), not Unicode whitespace.
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        if self.peek()? != byte {
            return None;
        }
        self.i += 1;
        Some(())
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if !self.b[self.i..].starts_with(word) {
            return None;
        }
        self.i += word.len();
        Some(())
    }

    /// At a value: consumes `null` and returns true, or returns false without consuming.
    fn null(&mut self) -> bool {
        self.peek() == Some(b'n') && self.literal(b"null").is_some()
    }

    /// Calls `member(self, key)` for each member of the object at the cursor, with the cursor just
    /// after the member's colon. Keys must be plain strings (no escapes).
    fn object(&mut self, member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        self.members(member)
    }

    /// The members of an object from the cursor (at a key) through its closing brace.
    fn members(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        loop {
            let key = self.plain_string()?;
            self.eat(b':')?;
            member(self, key)?;
            if !self.more(b'}')? {
                return Some(());
            }
        }
    }

    /// After a member or element: `,` (true, more follow) or the closing byte (false).
    fn more(&mut self, close: u8) -> Option<bool> {
        match self.peek()? {
            b',' => {
                self.i += 1;
                Some(true)
            }
            c if c == close => {
                self.i += 1;
                Some(false)
            }
            _ => None,
        }
    }

    /// The rest of an object after one of its member values.
    fn members_after_value(&mut self, member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        if self.more(b'}')? {
            self.members(member)
        } else {
            Some(())
        }
    }

    /// Calls `element(self, position)` for each element of the array at the cursor.
    fn array(&mut self, element: impl FnMut(&mut Self, usize) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        self.elements(0, element)
    }

    /// Array elements from the cursor through the closing bracket, the first being `position`.
    fn elements(&mut self, mut position: usize, mut element: impl FnMut(&mut Self, usize) -> Option<()>) -> Option<()> {
        loop {
            element(self, position)?;
            position += 1;
            if !self.more(b']')? {
                return Some(());
            }
        }
    }

    /// A string without escapes, borrowed.
    fn plain_string(&mut self) -> Option<&'a str> {
        match self.string()? {
            Cow::Borrowed(s) => Some(s),
            Cow::Owned(_) => None,
        }
    }

    /// The string at the cursor, unescaped exactly like serde_json does for a `str` (lone
    /// surrogates are left to serde_json, which rejects them).
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let start = self.i;
        self.i = plain_run_end(self.b, self.i);
        match *self.b.get(self.i)? {
            b'"' => {
                // Quotes are ASCII, so both ends are character boundaries.
                let text = &self.s[start..self.i];
                self.i += 1;
                return Some(Cow::Borrowed(text));
            }
            b'\\' => {}
            _ => return None, // a raw control character
        }
        let mut out = String::with_capacity(self.i - start + 16);
        out.push_str(&self.s[start..self.i]);
        loop {
            match *self.b.get(self.i)? {
                b'"' => {
                    self.i += 1;
                    return Some(Cow::Owned(out));
                }
                b'\\' => {
                    let escape = *self.b.get(self.i + 1)?;
                    self.i += 2;
                    out.push(match escape {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return None,
                    });
                }
                0..=0x1f => return None,
                _ => {
                    let run = self.i;
                    self.i = plain_run_end(self.b, self.i);
                    out.push_str(&self.s[run..self.i]);
                }
            }
        }
    }

    /// After `\u`: four hex digits, or a surrogate pair written as two escapes.
    fn unicode_escape(&mut self) -> Option<char> {
        let high = self.hex4()?;
        match high {
            0xD800..=0xDBFF => {
                if self.b.get(self.i..self.i + 2)? != b"\\u" {
                    return None;
                }
                self.i += 2;
                let low = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return None;
                }
                char::from_u32(0x1_0000 + ((high - 0xD800) << 10) + (low - 0xDC00))
            }
            0xDC00..=0xDFFF => None,
            _ => char::from_u32(high),
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.b.get(self.i..self.i + 4)?;
        let mut n = 0;
        for &d in digits {
            n = n * 16 + char::from(d).to_digit(16)?;
        }
        self.i += 4;
        Some(n)
    }

    /// `null` → `None`, a string → its text; anything else is not the common shape.
    fn opt_text(&mut self) -> Option<Option<Text<'a>>> {
        if self.null() {
            return Some(None);
        }
        self.string().map(|s| Some(Text(s)))
    }

    /// Only `null` is accepted here (a present value of this field means "use serde_json").
    fn null_only(&mut self) -> Option<()> {
        self.null().then_some(())
    }

    /// `null`, or an unsigned integer that serde reads as `u64` (at most 19 digits, no sign,
    /// fraction or exponent: the caller's delimiter check rejects what follows otherwise).
    fn opt_u64(&mut self) -> Option<Option<u64>> {
        if self.null() {
            return Some(None);
        }
        let start = self.i;
        match self.b.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                while let Some(b'0'..=b'9') = self.b.get(self.i) {
                    self.i += 1;
                }
            }
            _ => return None,
        }
        if self.i - start > 19 || matches!(self.b.get(self.i), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        self.s[start..self.i].parse().ok().map(Some)
    }

    /// Skips any valid JSON value, as strictly as serde_json's `IgnoredAny`.
    fn skip_value(&mut self, depth: u32) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' if depth < MAX_DEPTH => self.object(|p, _| p.skip_value(depth + 1)),
            b'[' if depth < MAX_DEPTH => self.array(|p, _| p.skip_value(depth + 1)),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.skip_number(),
            _ => None,
        }
    }

    /// Like [`Self::string`] but without building the text; any `\uXXXX` is accepted, as in
    /// serde_json's `ignore_str`.
    fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            self.i = plain_run_end(self.b, self.i);
            match *self.b.get(self.i)? {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                b'\\' => {
                    let escape = *self.b.get(self.i + 1)?;
                    self.i += 2;
                    match escape {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            self.hex4()?;
                        }
                        _ => return None,
                    }
                }
                _ => return None, // a raw control character
            }
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn skip_number(&mut self) -> Option<()> {
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.b.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            self.at_least_one_digit()?;
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            self.at_least_one_digit()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn at_least_one_digit(&mut self) -> Option<()> {
        let start = self.i;
        self.digits();
        (self.i > start).then_some(())
    }

    fn chunk(&mut self) -> Option<(Chunk<'a>, Members)> {
        if self.peek()? != b'{' {
            return None; // serde also takes a struct written as an array: leave that to it
        }
        let mut chunk = empty_chunk();
        let mut members = Members::default();
        self.object(|p, key| p.top_key(&mut chunk, &mut members, key))?;
        Some((chunk, members))
    }

    fn top_key(&mut self, chunk: &mut Chunk<'a>, members: &mut Members, key: &str) -> Option<()> {
        match field_index(&TOP_FIELDS, key) {
            Some(field) => self.top_member(chunk, members, field),
            None => self.skip_value(1),
        }
    }

    fn top_member(&mut self, chunk: &mut Chunk<'a>, members: &mut Members, field: usize) -> Option<()> {
        members.first(field, self.i)?;
        match field {
            0 => chunk.id = self.opt_text()?,
            1 => chunk.model = self.opt_text()?,
            CHOICES => {
                if !self.null() {
                    let mut choices = Vec::with_capacity(1);
                    self.array(|p, position| {
                        choices.push(p.choice(position == 0)?);
                        Some(())
                    })?;
                    chunk.choices = Some(choices);
                }
            }
            _ => self.null_only()?, // usage, error, timings, x_groq, time_info
        }
        Some(())
    }

    /// One element of `choices`; `first` marks `choices[0]`, the resumable path.
    fn choice(&mut self, first: bool) -> Option<Choice<'a>> {
        if self.peek()? != b'{' {
            return None;
        }
        let outer = self.path;
        self.path = if first { 1 } else { 0 };
        let mut choice = empty_choice();
        let mut members = Members::default();
        self.object(|p, key| p.choice_key(&mut choice, &mut members, key))?;
        if first {
            self.choice0 = Some(members);
        }
        self.path = outer;
        Some(choice)
    }

    fn choice_key(&mut self, choice: &mut Choice<'a>, members: &mut Members, key: &str) -> Option<()> {
        match field_index(&CHOICE_FIELDS, key) {
            Some(field) => self.choice_member(choice, members, field),
            None => self.skip_value(3),
        }
    }

    fn choice_member(&mut self, choice: &mut Choice<'a>, members: &mut Members, field: usize) -> Option<()> {
        members.first(field, self.i)?;
        match field {
            0 => choice.index = self.opt_u64()?,
            DELTA => {
                if !self.null() {
                    choice.delta = Some(self.delta()?);
                }
            }
            2 => self.null_only()?, // message
            3 => choice.text = self.opt_text()?,
            _ => choice.finish_reason = self.opt_text()?,
        }
        Some(())
    }

    fn delta(&mut self) -> Option<Delta<'a>> {
        let outer = self.path;
        let on_path = outer == 1;
        self.path = if on_path { 2 } else { 0 };
        let mut delta = empty_delta();
        let mut members = Members::default();
        self.object(|p, key| p.delta_key(&mut delta, &mut members, key))?;
        if on_path {
            self.delta0 = Some(members);
        }
        self.path = outer;
        Some(delta)
    }

    fn delta_key(&mut self, delta: &mut Delta<'a>, members: &mut Members, key: &str) -> Option<()> {
        match field_index(&DELTA_FIELDS, key) {
            Some(field) => self.delta_member(delta, members, field),
            None => self.skip_value(4),
        }
    }

    fn delta_member(&mut self, delta: &mut Delta<'a>, members: &mut Members, field: usize) -> Option<()> {
        members.first(field, self.i)?;
        match field {
            0 => delta.role = self.opt_text()?,
            CONTENT => {
                if self.path == 2 {
                    self.mark = Some(self.i);
                }
                delta.content = self.opt_text()?;
            }
            2 => delta.reasoning_content = self.opt_text()?,
            3 => delta.reasoning = self.opt_text()?.map(|t| Value::String(t.0.into_owned())),
            4 => delta.refusal = self.opt_text()?,
            _ => self.null_only()?, // tool_calls, function_call
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The contract: whenever the fast path answers, serde_json agrees exactly.
    fn agrees(data: &str) -> bool {
        agrees_after(&mut Resume::default(), data)
    }

    /// The same, for a chunk that follows others of the same stream (resumed parses).
    fn agrees_after(resume: &mut Resume, data: &str) -> bool {
        let fast = parse(resume, data);
        if let Some(fast) = &fast {
            let slow = serde_json::from_str::<Chunk<'_>>(data);
            assert!(slow.is_ok(), "fast path accepted what serde rejects: {data:?}");
            assert_eq!(Some(fast), slow.ok().as_ref(), "different chunk for {data:?}");
        }
        fast.is_some()
    }

    const ID: &str = r#""id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_eb9dce56a8""#;

    #[test]
    fn common_shapes_take_the_fast_path() {
        let shapes = [
            format!(r#"{{{ID},"choices":[{{"index":0,"delta":{{"role":"assistant","content":"","refusal":null}},"logprobs":null,"finish_reason":null}}]}}"#),
            format!(r#"{{{ID},"choices":[{{"index":0,"delta":{{"content":" the"}},"logprobs":null,"finish_reason":null}}]}}"#),
            format!(r#"{{{ID},"choices":[{{"index":0,"delta":{{}},"logprobs":null,"finish_reason":"stop"}}]}}"#),
            format!(r#"{{{ID},"service_tier":"default","choices":[{{"index":0,"delta":{{"content":"line\n\"quoted\" \\ \/ \b\f\r\t \u00e9\u6771 \ud83d\udc4d"}},"logprobs":null,"finish_reason":null}}],"usage":null,"obfuscation":"Xy3"}}"#),
            format!(r#"{{{ID},"choices":[{{"index":0,"delta":{{"reasoning_content":"think"}},"finish_reason":null}}]}}"#),
            format!(r#"{{{ID},"choices":[{{"index":0,"delta":{{"reasoning":"think","content":null}}}}]}}"#),
            // Azure: filter results on every choice, prompt filter results first.
            format!(r#"{{{ID},"prompt_filter_results":[{{"prompt_index":0,"content_filter_results":{{"hate":{{"filtered":false,"severity":"safe"}}}}}}],"choices":[]}}"#),
            format!(r#"{{{ID},"choices":[{{"content_filter_results":{{"hate":{{"filtered":false,"severity":"safe"}},"self_harm":{{"filtered":false,"severity":"safe"}}}},"delta":{{"content":"x"}},"finish_reason":null,"index":0,"logprobs":{{"content":[{{"token":"x","logprob":-0.25,"bytes":[120],"top_logprobs":[]}}],"refusal":null}}}}]}}"#),
            " { \"choices\" : [ { \"delta\" : { \"content\" : \"a\" } , \"index\" : 7 } ] , \"x\" : [ 1 , -2.5e+3 , true , false , null , { } , [ ] ] } ".into(),
            r#"{"choices":null,"id":null,"model":null}"#.into(),
            r#"{"choices":[{"text":"legacy","index":0,"finish_reason":null}]}"#.into(),
            r#"{"choices":[{"delta":null},{"delta":{"content":"b"},"index":1}]}"#.into(),
            "{}".into(),
        ];
        for data in &shapes {
            assert!(agrees(data), "fell back on {data}");
        }
    }

    #[test]
    fn unusual_shapes_fall_back() {
        let cases = [
            r#"{"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":2000,"total_tokens":2020}}"#,
            r#"{"error":{"message":"overloaded","type":"server_error"}}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"function_call":{"name":"f"}}}]}"#,
            r#"{"choices":[{"index":0,"message":{"content":"whole"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning":{"text":"obj"}}}]}"#,
            r#"{"choices":[{"index":-1,"delta":{"content":"a"}}]}"#,
            r#"{"choices":[{"index":1.0,"delta":{"content":"a"}}]}"#,
            r#"{"choices":[{"index":1e0,"delta":{"content":"a"}}]}"#,
            r#"{"choices":[{"index":18446744073709551616,"delta":{"content":"a"}}]}"#,
            r#"{"choices":[{"index":01,"delta":{"content":"a"}}]}"#,
            r#"{"choices":[{"index":"0","delta":{"content":"a"}}]}"#,
            r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
            r#"{"id":"a","id":null}"#,
            r#"{"choices":[{"delta":{"cont\u0065nt":"a"}}]}"#,
            r#"{"choices":[{"delta":{"content":"\ud83d"}}]}"#,
            r#"{"choices":[{"delta":{"content":"\udc4d"}}]}"#,
            r#"{"choices":[{"delta":{"content":"\ud83d\u0041"}}]}"#,
            r#"{"choices":[{"delta":{"content":"\x"}}]}"#,
            "{\"choices\":[{\"delta\":{\"content\":\"raw\ttab\"}}]}",
            r#"{"choices":[{"delta":{"content":"a"}}],}"#,
            r#"{"choices":[{"delta":{"content":"a"}},]}"#,
            r#"{"choices":[{"delta":{"content":"a"}}]} x"#,
            r#"{"choices":[{"delta":{"content":"a"}}]"#,
            r#"{"choices":[["a"]]}"#,
            r#"["id","model"]"#,
            r#"{"id":1}"#,
            r#"{"x":01}"#,
            r#"{"x":1.}"#,
            r#"{"x":-}"#,
            r#"{"x":tru}"#,
            r#"{"x":nulll}"#,
            r#"{"x" 1}"#,
            r#"{"a":1 "b":2}"#,
            "",
            "[DONE]",
        ];
        for data in cases {
            assert!(!agrees(data), "fast path took {data}");
        }
        // Far too deep for the fast path; serde decides.
        let deep = format!("{{\"x\":{}1{}}}", "[".repeat(200), "]".repeat(200));
        assert!(!agrees(&deep));
    }

    /// A JSON string literal for `text`, each character written one of the ways JSON allows, and
    /// now and then a way it does not (raw control character, lone surrogate, bad escape).
    fn string_literal() -> impl Strategy<Value = String> {
        let piece = (
            prop_oneof![
                6 => prop::sample::select(vec![
                    'a', ' ', 'Z', '0', '"', '\\', '/', '\n', '\r', '\t', '\u{8}', '\u{c}', '\u{0}',
                    '\u{1f}', '\u{7f}', 'é', '東', '👍', '\u{2028}', '\u{fffd}',
                ]),
                1 => any::<char>(),
            ],
            0..40u8,
        )
            .prop_map(|(c, how)| {
                let short = match c {
                    '"' => Some("\\\""),
                    '\\' => Some("\\\\"),
                    '/' => Some("\\/"),
                    '\u{8}' => Some("\\b"),
                    '\u{c}' => Some("\\f"),
                    '\n' => Some("\\n"),
                    '\r' => Some("\\r"),
                    '\t' => Some("\\t"),
                    _ => None,
                };
                let mut units = [0u16; 2];
                let utf16 = c.encode_utf16(&mut units);
                let escaped: String = utf16
                    .iter()
                    .map(|u| if how % 2 == 0 { format!("\\u{u:04x}") } else { format!("\\u{u:04X}") })
                    .collect();
                let must_escape = matches!(c, '"' | '\\') || (c as u32) < 0x20;
                match how {
                    0..=5 => escaped,
                    6..=9 => short.map(str::to_owned).unwrap_or(escaped),
                    10 if (c as u32) < 0x20 => c.to_string(), // raw control character: invalid
                    10 => "\\ud800".to_owned(),               // lone surrogate
                    11 => "\\udc00".to_owned(),               // lone trailing surrogate
                    12 => "\\a".to_owned(),                   // invalid escape
                    _ if must_escape => short.map(str::to_owned).unwrap_or(escaped),
                    _ => c.to_string(),
                }
            });
        prop::collection::vec(piece, 0..12).prop_map(|p| format!("\"{}\"", p.concat()))
    }

    fn ws() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec!["", "", "", " ", "\n", " \t\r\n "])
    }

    /// Any JSON value (small), for unknown fields and for known fields of the wrong type.
    fn any_value() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just("false".to_owned()),
            prop::sample::select(vec!["0", "7", "-1", "1.5", "-0.0e-7", "1E+2", "123456789012345678901234"])
                .prop_map(str::to_owned),
            string_literal(),
        ];
        leaf.prop_recursive(3, 12, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec((string_literal(), inner), 0..4).prop_map(|v| {
                    let members: Vec<String> = v.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        })
    }

    /// A value for a field that the classifier reads as text: mostly a string, sometimes null,
    /// sometimes anything.
    fn text_value() -> impl Strategy<Value = String> {
        prop_oneof![12 => string_literal(), 3 => Just("null".to_owned()), 1 => any_value()]
    }

    /// `"key":value` members joined with commas, with varying whitespace.
    fn render(members: &[(String, String)], spaces: &[&'static str]) -> String {
        let mut out = String::new();
        for (i, (key, value)) in members.iter().enumerate() {
            let s = spaces.get(i % spaces.len().max(1)).copied().unwrap_or("");
            if i > 0 {
                out.push(',');
            }
            out.push_str(&format!("{s}\"{key}\"{s}:{s}{value}{s}"));
        }
        out
    }

    /// Some of `fields` (each with a value from its strategy), plus unknown or repeated members,
    /// in varying order.
    fn member_list(
        fields: Vec<(&'static str, BoxedStrategy<String>)>,
    ) -> impl Strategy<Value = (Vec<(String, String)>, Vec<&'static str>)> {
        let n = fields.len();
        let options: Vec<_> = fields
            .into_iter()
            .map(|(key, value)| prop::option::weighted(0.6, value.prop_map(move |v| (key.to_owned(), v))))
            .collect();
        (
            options,
            prop::collection::vec(prop::sample::select(vec!["x", "logprobs", "index", "content", "id"]), 0..2),
            prop::collection::vec(any_value(), 2),
            prop::collection::vec(ws(), n + 2),
            any::<u64>(),
        )
            .prop_map(|(chosen, extra_keys, extra_values, spaces, seed)| {
                let mut members: Vec<(String, String)> = chosen.into_iter().flatten().collect();
                // Unknown fields, or a repeated known one.
                for (key, value) in extra_keys.into_iter().zip(extra_values) {
                    members.push((key.to_owned(), value));
                }
                // Field order varies.
                let len = members.len().max(1);
                members.rotate_left((seed as usize) % len);
                if seed % 3 == 0 {
                    members.reverse();
                }
                (members, spaces)
            })
    }

    fn members(fields: Vec<(&'static str, BoxedStrategy<String>)>) -> impl Strategy<Value = String> {
        member_list(fields).prop_map(|(members, spaces)| format!("{{{}}}", render(&members, &spaces)))
    }

    fn delta_fields() -> Vec<(&'static str, BoxedStrategy<String>)> {
        vec![
            ("role", text_value().boxed()),
            ("content", text_value().boxed()),
            ("reasoning_content", text_value().boxed()),
            ("reasoning", text_value().boxed()),
            ("refusal", text_value().boxed()),
            ("tool_calls", prop_oneof![8 => Just("null".to_owned()), 1 => any_value()].boxed()),
            ("function_call", prop_oneof![8 => Just("null".to_owned()), 1 => any_value()].boxed()),
        ]
    }

    fn delta() -> impl Strategy<Value = String> {
        members(delta_fields())
    }

    fn choice_fields() -> Vec<(&'static str, BoxedStrategy<String>)> {
        let index = prop_oneof![
            4 => prop::sample::select(vec!["0", "1", "12", "null", "-0", "1.0", "01", "99999999999999999999", "18446744073709551615", "\"0\""]).prop_map(str::to_owned),
            1 => any_value(),
        ];
        vec![
            ("index", index.boxed()),
            ("delta", prop_oneof![6 => delta(), 1 => Just("null".to_owned()), 1 => any_value()].boxed()),
            ("message", prop_oneof![8 => Just("null".to_owned()), 1 => delta()].boxed()),
            ("text", text_value().boxed()),
            ("finish_reason", text_value().boxed()),
            ("logprobs", any_value().boxed()),
        ]
    }

    fn choice() -> impl Strategy<Value = String> {
        members(choice_fields())
    }

    fn top_fields() -> Vec<(&'static str, BoxedStrategy<String>)> {
        let choices = prop_oneof![
            6 => prop::collection::vec(choice(), 0..3).prop_map(|c| format!("[{}]", c.join(","))),
            1 => Just("null".to_owned()),
            1 => any_value(),
        ];
        vec![
            ("id", text_value().boxed()),
            ("model", text_value().boxed()),
            ("choices", choices.boxed()),
            ("usage", prop_oneof![8 => Just("null".to_owned()), 1 => any_value()].boxed()),
            ("error", prop_oneof![8 => Just("null".to_owned()), 1 => any_value()].boxed()),
            ("timings", prop_oneof![8 => Just("null".to_owned()), 1 => any_value()].boxed()),
            ("x_groq", prop_oneof![8 => Just("null".to_owned()), 1 => any_value()].boxed()),
            ("object", string_literal().boxed()),
        ]
    }

    fn chunk() -> impl Strategy<Value = String> {
        members(top_fields())
    }

    /// Members before and after the resumable point, split at a random place.
    fn split_members(fields: Vec<(&'static str, BoxedStrategy<String>)>) -> impl Strategy<Value = (String, String)> {
        (member_list(fields), any::<prop::sample::Index>()).prop_map(|((members, spaces), at)| {
            let at = at.index(members.len() + 1);
            let before = render(&members[..at], &spaces);
            let after = render(&members[at..], &spaces);
            (
                if before.is_empty() { before } else { before + "," },
                if after.is_empty() { after } else { format!(",{after}") },
            )
        })
    }

    /// Several chunks of one stream: the same bytes up to `choices[0].delta.content`, then each
    /// its own content value and remaining members. Prefixes and tails are realistic ones or
    /// generated ones.
    fn resumable_stream() -> impl Strategy<Value = Vec<String>> {
        let generated_tail = (
            split_members(delta_fields()),
            split_members(choice_fields()),
            prop::collection::vec(choice(), 0..2),
            split_members(top_fields()),
        )
            .prop_map(|((_, delta_after), (_, choice_after), more, (_, top_after))| {
                let more: String = more.iter().map(|c| format!(",{c}")).collect();
                format!("{delta_after}}}{choice_after}}}{more}]{top_after}}}")
            });
        let tail = prop_oneof![
            1 => generated_tail,
            6 => prop::sample::select(vec![
                "}}]}",
                "},\"logprobs\":null,\"finish_reason\":null}]}",
                " } , \"finish_reason\" : null , \"logprobs\" : null } ] , \"obfuscation\" : \"a1\" }",
                ",\"refusal\":null},\"finish_reason\":null}],\"usage\":null}",
                "}},{\"index\":1,\"delta\":{\"content\":\"b\"}}]}",
                "},\"content_filter_results\":{\"hate\":{\"filtered\":false,\"severity\":\"safe\"}}}]}",
                "},\"finish_reason\":\"stop\"}]}",
            ])
            .prop_map(str::to_owned),
            1 => prop::sample::select(vec![
                ",\"content\":\"dup\"}}]}",
                "}}],\"usage\":{\"total_tokens\":1}}",
                "}}]",
                "}}]}x",
            ])
            .prop_map(str::to_owned),
        ];
        let generated_prefix =
            (split_members(top_fields()), split_members(choice_fields()), split_members(delta_fields())).prop_map(
                |((top, _), (choice, _), (delta, _))| {
                    format!("{{{top}\"choices\":[{{{choice}\"delta\":{{{delta}\"content\":")
                },
            );
        let prefix = prop_oneof![
            1 => generated_prefix,
            4 => prop::sample::select(vec![
                format!("{{{ID},\"choices\":[{{\"index\":0,\"delta\":{{\"content\":"),
                format!("{{{ID},\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":"),
                "{\"id\":\"a\\u0041\\n\",\"model\":null,\"choices\":[{\"delta\":{\"reasoning\":\"r\",\"content\": ".to_owned(),
                "{ \"choices\" : [ { \"content_filter_results\" : { } , \"index\" : 3 , \"delta\" : { \"content\" :".to_owned(),
                "{\"choices\":[{\"text\":\"t\",\"finish_reason\":null,\"delta\":{\"refusal\":\"no\",\"content\":".to_owned(),
            ]),
        ];
        let content = prop_oneof![
            6 => prop::sample::select(vec![
                "\"Hello\"", "\" world\"", "\"\"", "\"\\n\\n\"", "\"\\u00e9t\\u00E9\"",
                "\"\\ud83d\\udc4d\"", "\"tab\\there \\\"q\\\" \\\\ \\/\"", "\"東京 👍\"",
            ])
            .prop_map(str::to_owned),
            2 => string_literal(),
            1 => Just("null".to_owned()),
            1 => any_value(),
        ];
        (prefix, prop::collection::vec((content, tail), 1..5))
            .prop_map(|(prefix, suffixes)| suffixes.iter().map(|(c, t)| format!("{prefix}{c}{t}")).collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn fast_path_agrees_with_serde(data in chunk()) {
            agrees(&data);
        }

        /// Chunks of one stream, parsed in order with one [`Resume`]: resumed parses agree too,
        /// also when a later chunk is corrupted after the shared prefix.
        #[test]
        fn resumed_parses_agree_with_serde(
            stream in resumable_stream(),
            corrupt in any::<prop::sample::Index>(),
            at in any::<prop::sample::Index>(),
        ) {
            let mut resume = Resume::default();
            let corrupt = corrupt.index(stream.len() * 2);
            for (i, data) in stream.iter().enumerate() {
                agrees_after(&mut resume, data);
                if i == corrupt {
                    let mut bytes = data.clone().into_bytes();
                    let at = at.index(bytes.len());
                    bytes[at] = b'"';
                    if let Ok(mutated) = String::from_utf8(bytes) {
                        agrees_after(&mut resume, &mutated);
                    }
                }
            }
        }

        /// Cut, spliced or corrupted chunks: still never accepted unless serde agrees.
        #[test]
        fn fast_path_agrees_on_mutated_chunks(
            data in chunk(),
            at in any::<prop::sample::Index>(),
            cut in 0..3usize,
            insert in prop::sample::select(vec!["", "\"", "\\", ",", "}", "]", "{", "[", " ", "0", "-", "\u{1}", "é", "null"]),
        ) {
            let mut bytes = data.into_bytes();
            let at = at.index(bytes.len() + 1);
            let end = (at + cut).min(bytes.len());
            bytes.splice(at..end, insert.bytes());
            if let Ok(mutated) = String::from_utf8(bytes) {
                agrees(&mutated);
            }
        }
    }

    #[test]
    fn a_stream_resumes_after_its_first_content_chunk() {
        let chunk = |content: &str| {
            format!(
                r#"{{{ID},"choices":[{{"index":0,"delta":{{"content":"{content}"}},"logprobs":null,"finish_reason":null}}],"obfuscation":"{content}"}}"#
            )
        };
        let role = format!(
            r#"{{{ID},"choices":[{{"index":0,"delta":{{"role":"assistant","content":"","refusal":null}},"logprobs":null,"finish_reason":null}}]}}"#
        );
        let mut resume = Resume::default();
        assert!(agrees_after(&mut resume, &role));
        assert!(agrees_after(&mut resume, &chunk("Hello")));
        let prefix_len = resume.snapshot.as_ref().map(|s| s.prefix.len());
        assert_eq!(prefix_len, chunk("").find(r#""content":"#).map(|i| i + 10));
        for content in [" world", "", "\\n\\u00e9", " \\ud83d\\udc4d"] {
            assert!(agrees_after(&mut resume, &chunk(content)), "{content}");
        }
        // Same prefix, then not the common shape: serde decides.
        for data in [
            chunk("a\\ud800"),
            chunk("x").replace(r#""logprobs":null"#, r#""logprobs":nul"#),
            chunk("x").replace(r#""finish_reason":null"#, r#""finish_reason":"stop","index":1"#),
            chunk("x") + " x",
        ] {
            assert!(!agrees_after(&mut resume, &data), "{data}");
        }
        let usage = chunk("x").replace(r#""obfuscation""#, r#""usage":{"total_tokens":3},"o""#);
        assert!(!agrees_after(&mut resume, &usage));
        assert!(agrees_after(&mut resume, &chunk("again")));
    }

    #[test]
    fn generated_chunks_mostly_take_the_fast_path() {
        // The generator must exercise the fast path, not only its fallbacks.
        use proptest::strategy::ValueTree;
        use proptest::test_runner::TestRunner;
        let mut runner = TestRunner::deterministic();
        let strategy = chunk();
        let mut fast = 0;
        for _ in 0..2000 {
            let data = strategy.new_tree(&mut runner).unwrap().current();
            if agrees(&data) {
                fast += 1;
            }
        }
        assert!(fast > 300, "only {fast} of 2000 generated chunks took the fast path");
    }
}
