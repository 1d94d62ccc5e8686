//! The Chat Completions walk: a chunk's known members read into the typed chunk, unknown ones
//! skipped, and the resumable path (`choices[0].delta`) marked on the way.

use serde_json::Value;

use super::super::{Choice, Chunk, Delta};
use super::memo::Members;
use super::scanner::Parser;
use super::{CHOICES, CHOICE_FIELDS, CONTENT, DELTA, DELTA_FIELDS, TOP_FIELDS};

#[inline]
pub(super) fn empty_chunk<'a>() -> Chunk<'a> {
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

#[inline]
pub(super) fn empty_choice<'a>() -> Choice<'a> {
    Choice { index: None, delta: None, message: None, text: None, finish_reason: None }
}

#[inline]
pub(super) fn empty_delta<'a>() -> Delta<'a> {
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

#[inline]
pub(super) fn field_index(fields: &[&str], key: &str) -> Option<usize> {
    fields.iter().position(|f| *f == key)
}

impl<'a> Parser<'a> {
    pub(super) fn chunk(&mut self) -> Option<(Chunk<'a>, Members)> {
        if self.peek()? != b'{' {
            return None; // serde also takes a struct written as an array: leave that to it
        }
        let mut chunk = empty_chunk();
        let mut members = Members::default();
        self.object(|p, key| p.top_key(&mut chunk, &mut members, key))?;
        Some((chunk, members))
    }

    pub(super) fn top_key(&mut self, chunk: &mut Chunk<'a>, members: &mut Members, key: &str) -> Option<()> {
        match field_index(&TOP_FIELDS, key) {
            Some(field) => self.top_member(chunk, members, field),
            None => self.skip_value(1),
        }
    }

    pub(super) fn top_member(&mut self, chunk: &mut Chunk<'a>, members: &mut Members, field: usize) -> Option<()> {
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
            3 => chunk.usage = self.by_serde(1)?,
            4 => chunk.error = self.by_serde(1)?,
            5 => chunk.timings = self.by_serde(1)?,
            6 => chunk.x_groq = self.by_serde(1)?,
            _ => chunk.time_info = self.by_serde(1)?,
        }
        Some(())
    }

    /// One element of `choices`; `first` marks `choices[0]`, the resumable path.
    pub(super) fn choice(&mut self, first: bool) -> Option<Choice<'a>> {
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

    pub(super) fn choice_key(&mut self, choice: &mut Choice<'a>, members: &mut Members, key: &str) -> Option<()> {
        match field_index(&CHOICE_FIELDS, key) {
            Some(field) => self.choice_member(choice, members, field),
            None => self.skip_value(3),
        }
    }

    pub(super) fn choice_member(&mut self, choice: &mut Choice<'a>, members: &mut Members, field: usize) -> Option<()> {
        members.first(field, self.i)?;
        match field {
            0 => choice.index = self.opt_u64()?,
            DELTA => {
                if !self.null() {
                    choice.delta = Some(self.delta()?);
                }
            }
            2 => {
                // A whole body's `message`: a delta's fields, off the resumable path.
                if !self.null() {
                    let outer = self.path;
                    self.path = 0;
                    let message = self.delta();
                    self.path = outer;
                    choice.message = Some(message?);
                }
            }
            3 => choice.text = self.opt_text()?,
            _ => choice.finish_reason = self.opt_text()?,
        }
        Some(())
    }

    pub(super) fn delta(&mut self) -> Option<Delta<'a>> {
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

    pub(super) fn delta_key(&mut self, delta: &mut Delta<'a>, members: &mut Members, key: &str) -> Option<()> {
        match field_index(&DELTA_FIELDS, key) {
            Some(field) => self.delta_member(delta, members, field),
            None => self.skip_value(4),
        }
    }

    pub(super) fn delta_member(&mut self, delta: &mut Delta<'a>, members: &mut Members, field: usize) -> Option<()> {
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
            3 => {
                delta.reasoning = if self.peek()? == b'"' {
                    self.opt_text()?.map(|t| Value::String(t.0.into_owned()))
                } else {
                    self.by_serde(4)? // some servers send an object
                }
            }
            4 => delta.refusal = self.opt_text()?,
            5 => delta.tool_calls = self.by_serde(4)?,
            _ => delta.function_call = self.by_serde(4)?,
        }
        Some(())
    }
}
