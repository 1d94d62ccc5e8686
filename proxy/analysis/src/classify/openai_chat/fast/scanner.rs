//! A schema-free JSON scanner over one frame: whitespace, literals, objects and arrays by callback,
//! strings (borrowed when unescaped), small unsigned integers, and values skipped to a depth limit.
//! Anything it does not accept strictly is `None`.

use std::borrow::Cow;

use super::memo::Members;
use super::MAX_DEPTH;
use crate::classify::Text;

/// Index of the first byte at or after `from` that ends a plain run inside a string (`"`, `\\` or a
/// control character), or `b.len()`. Eight bytes at a time, like serde_json: in each word the lowest
/// flagged byte is exact (borrows only ever flag bytes above a true hit).
pub(super) fn plain_run_end(b: &[u8], from: usize) -> usize {
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

pub(super) struct Parser<'a> {
    pub(super) s: &'a str,
    pub(super) b: &'a [u8],
    pub(super) i: usize,
    /// Where the parse is on the resumable path: 0 outside, 1 in the members of `choices[0]`, 2 in
    /// the members of its `delta`.
    pub(super) path: u8,
    /// Offset just after `"content":` in `choices[0].delta`, once reached.
    pub(super) mark: Option<usize>,
    /// The members of `choices[0]` and of its `delta`, once parsed.
    pub(super) choice0: Option<Members>,
    pub(super) delta0: Option<Members>,
}

impl<'a> Parser<'a> {
    pub(super) fn new(s: &'a str) -> Self {
        Parser { s, b: s.as_bytes(), i: 0, path: 0, mark: None, choice0: None, delta0: None }
    }

    /// JSON whitespace only (serde_json's definition), not Unicode whitespace.
    pub(super) fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    pub(super) fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    pub(super) fn eat(&mut self, byte: u8) -> Option<()> {
        if self.peek()? != byte {
            return None;
        }
        self.i += 1;
        Some(())
    }

    pub(super) fn literal(&mut self, word: &[u8]) -> Option<()> {
        if !self.b[self.i..].starts_with(word) {
            return None;
        }
        self.i += word.len();
        Some(())
    }

    /// At a value: consumes `null` and returns true, or returns false without consuming.
    pub(super) fn null(&mut self) -> bool {
        self.peek() == Some(b'n') && self.literal(b"null").is_some()
    }

    /// Calls `member(self, key)` for each member of the object at the cursor, with the cursor just
    /// after the member's colon. Keys must be plain strings (no escapes).
    pub(super) fn object(&mut self, member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        self.members(member)
    }

    /// The members of an object from the cursor (at a key) through its closing brace.
    pub(super) fn members(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
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
    pub(super) fn more(&mut self, close: u8) -> Option<bool> {
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
    pub(super) fn members_after_value(&mut self, member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        if self.more(b'}')? {
            self.members(member)
        } else {
            Some(())
        }
    }

    /// Calls `element(self, position)` for each element of the array at the cursor.
    pub(super) fn array(&mut self, element: impl FnMut(&mut Self, usize) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        self.elements(0, element)
    }

    /// Array elements from the cursor through the closing bracket, the first being `position`.
    pub(super) fn elements(
        &mut self,
        mut position: usize,
        mut element: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<()> {
        loop {
            element(self, position)?;
            position += 1;
            if !self.more(b']')? {
                return Some(());
            }
        }
    }

    /// A string without escapes, borrowed.
    pub(super) fn plain_string(&mut self) -> Option<&'a str> {
        match self.string()? {
            Cow::Borrowed(s) => Some(s),
            Cow::Owned(_) => None,
        }
    }

    /// The string at the cursor, unescaped exactly like serde_json does for a `str` (lone
    /// surrogates are left to serde_json, which rejects them).
    pub(super) fn string(&mut self) -> Option<Cow<'a, str>> {
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
    pub(super) fn unicode_escape(&mut self) -> Option<char> {
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

    pub(super) fn hex4(&mut self) -> Option<u32> {
        let digits = self.b.get(self.i..self.i + 4)?;
        let mut n = 0;
        for &d in digits {
            n = n * 16 + char::from(d).to_digit(16)?;
        }
        self.i += 4;
        Some(n)
    }

    /// `null` → `None`, a string → its text; anything else is not the common shape.
    pub(super) fn opt_text(&mut self) -> Option<Option<Text<'a>>> {
        if self.null() {
            return Some(None);
        }
        self.string().map(|s| Some(Text(s)))
    }

    /// `null` → `None`; any other value is skipped (as strictly as [`Self::skip_value`]) and its
    /// own bytes given to serde_json, which reads it as it would inside the whole frame (the same
    /// parser on the same bytes; a string borrows from the frame where it has no escapes).
    /// For the members whose values are not text: usage, errors, server timings, tool calls.
    pub(super) fn by_serde<T: serde::Deserialize<'a>>(&mut self, depth: u32) -> Option<Option<T>> {
        if self.null() {
            return Some(None);
        }
        let start = self.i;
        self.skip_value(depth)?;
        let s: &'a str = self.s;
        serde_json::from_str(&s[start..self.i]).ok().map(Some)
    }

    /// `null`, or an unsigned integer that serde reads as `u64` (at most 19 digits, no sign,
    /// fraction or exponent: the caller's delimiter check rejects what follows otherwise).
    pub(super) fn opt_u64(&mut self) -> Option<Option<u64>> {
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
    pub(super) fn skip_value(&mut self, depth: u32) -> Option<()> {
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
    pub(super) fn skip_string(&mut self) -> Option<()> {
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
    pub(super) fn skip_number(&mut self) -> Option<()> {
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

    pub(super) fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    pub(super) fn at_least_one_digit(&mut self) -> Option<()> {
        let start = self.i;
        self.digits();
        (self.i > start).then_some(())
    }
}
