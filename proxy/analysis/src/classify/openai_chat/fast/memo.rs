//! The prefix memo: what a chunk's parse left before `choices[0].delta.content`, so the next chunk
//! of the stream with the same prefix can resume there.

use std::borrow::Cow;

use super::super::{Choice, Chunk, Delta};
use super::CONTENT;
use crate::classify::Text;

/// The resumable state of one stream (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Resume {
    pub(super) snapshot: Option<Snapshot>,
}

#[derive(Debug)]
pub(super) struct Snapshot {
    /// The bytes before the value of `choices[0].delta.content`.
    pub(super) prefix: Vec<u8>,
    /// Known members before it, per object.
    pub(super) top: Vec<Saved>,
    pub(super) choice: Vec<Saved>,
    pub(super) delta: Vec<Saved>,
}

/// A known member before the resume point: its field index, the offset of its value, and how to
/// get the value back from a chunk with the same prefix.
#[derive(Debug, Clone, Copy)]
pub(super) struct Saved {
    pub(super) field: usize,
    pub(super) at: usize,
    pub(super) value: SavedValue,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum SavedValue {
    /// A text member that was `null`.
    Null,
    /// A text member without escapes: the same bytes, so the same slice of the new chunk.
    Slice(usize, usize),
    /// Anything else: parsed again from the same bytes.
    Parse,
}

/// The text members of each object, by field index (others are parsed again when resuming).
#[inline]
pub(super) fn top_text<'x, 'a>(chunk: &'x Chunk<'a>, field: usize) -> Option<&'x Option<Text<'a>>> {
    match field {
        0 => Some(&chunk.id),
        1 => Some(&chunk.model),
        _ => None,
    }
}

#[inline]
pub(super) fn choice_text<'x, 'a>(choice: &'x Choice<'a>, field: usize) -> Option<&'x Option<Text<'a>>> {
    match field {
        3 => Some(&choice.text),
        4 => Some(&choice.finish_reason),
        _ => None,
    }
}

#[inline]
pub(super) fn delta_text<'x, 'a>(delta: &'x Delta<'a>, field: usize) -> Option<&'x Option<Text<'a>>> {
    match field {
        0 => Some(&delta.role),
        CONTENT => Some(&delta.content),
        2 => Some(&delta.reasoning_content),
        4 => Some(&delta.refusal),
        _ => None,
    }
}

#[inline]
pub(super) fn set_top<'a>(chunk: &mut Chunk<'a>, field: usize, value: Option<Text<'a>>) {
    match field {
        0 => chunk.id = value,
        _ => chunk.model = value,
    }
}

#[inline]
pub(super) fn set_choice<'a>(choice: &mut Choice<'a>, field: usize, value: Option<Text<'a>>) {
    match field {
        3 => choice.text = value,
        _ => choice.finish_reason = value,
    }
}

#[inline]
pub(super) fn set_delta<'a>(delta: &mut Delta<'a>, field: usize, value: Option<Text<'a>>) {
    match field {
        0 => delta.role = value,
        CONTENT => delta.content = value,
        2 => delta.reasoning_content = value,
        _ => delta.refusal = value,
    }
}

/// Restores saved members into one object: `set` for text members, `parse` for the others.
#[inline]
pub(super) fn restore<'d, T>(
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

/// Known members seen in one object and where their values start: serde rejects a repeated known
/// member, and the offsets make a resumable snapshot.
#[derive(Default)]
pub(super) struct Members {
    pub(super) seen: u32,
    pub(super) at: [usize; 8],
}

impl Members {
    #[inline]
    pub(super) fn first(&mut self, field: usize, at: usize) -> Option<()> {
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
    pub(super) fn saved<'x, 'a: 'x>(
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
