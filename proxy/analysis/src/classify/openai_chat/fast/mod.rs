//! Fast path for the common shape of a Chat Completions chunk: a one-pass scanner that produces the
//! same [`Chunk`] serde would, for the fields the classifier reads, at a fraction of the cost (the
//! typed serde parse was about 40% of a whole stream's analysis).
//!
//! It reads the text members itself and hands each member that is not text (`usage`, `error`,
//! `timings`, `x_groq`, `time_info`, `tool_calls`, `function_call`, a `reasoning` object) to
//! serde_json as its own bytes, once the scanner has skipped it strictly; a whole body's `message`
//! is read as a delta. Whenever the frame is anything else — an escaped key, a lone surrogate, a
//! duplicate field, an `index` that is not a small unsigned integer, deep nesting, a member serde
//! would refuse, anything that is not strictly valid JSON — it returns `None` and the caller parses
//! with serde_json as before, so results never depend on which path ran. The contract (tested
//! against serde_json on generated and mutated chunks):
//! `parse(..., data) == Some(chunk)` implies `serde_json::from_str::<Chunk>(data)` is `Ok` with an
//! equal chunk.
//!
//! Resuming: the chunks of one stream repeat the same bytes up to the answer text (`id`, `object`,
//! `created`, `model`, ..., `"choices":[{"index":0,"delta":{"content":`). The parser's state at that
//! point depends only on the bytes before it, so [`Resume`] keeps those bytes and where each known
//! member before them started; a chunk with the same prefix re-reads just those members (same bytes,
//! same values) and parses on from the content value, skipping the rest of the prefix.

mod memo;
mod scanner;
#[cfg(test)]
mod tests;
mod walk;

use super::Chunk;
pub(super) use memo::Resume;
use memo::{choice_text, delta_text, top_text};
use memo::{restore, set_choice, set_delta, set_top, Members, Snapshot};
use scanner::Parser;
use walk::{empty_choice, empty_chunk, empty_delta};

/// Nesting depth of unknown values skipped here; deeper ones are left to serde_json (whose own
/// limit, 128, is then never the one that decides).
pub(super) const MAX_DEPTH: u32 = 24;

/// Known members, in the index order that [`Members`] uses.
pub(super) const TOP_FIELDS: [&str; 8] = ["id", "model", "choices", "usage", "error", "timings", "x_groq", "time_info"];
pub(super) const CHOICE_FIELDS: [&str; 5] = ["index", "delta", "message", "text", "finish_reason"];
pub(super) const DELTA_FIELDS: [&str; 7] =
    ["role", "content", "reasoning_content", "reasoning", "refusal", "tool_calls", "function_call"];
pub(super) const CHOICES: usize = 2;
pub(super) const DELTA: usize = 1;
pub(super) const CONTENT: usize = 1;

/// Parses `data` if it has the common shape; `None` means "use serde_json".
pub(super) fn parse<'d>(resume: &mut Resume, data: &'d str) -> Option<Chunk<'d>> {
    if let Some(snapshot) = &resume.snapshot {
        if data.as_bytes().starts_with(&snapshot.prefix) {
            // Same prefix, same state: a fresh parse would reach exactly this point and fail or
            // succeed exactly as the resumed one does.
            return resume_from(snapshot, data);
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

/// A chunk whose bytes start with the snapshot's prefix, parsed on from the content value.
fn resume_from<'d>(snapshot: &Snapshot, data: &'d str) -> Option<Chunk<'d>> {
    let mut p = Parser::new(data);
    let mut chunk = empty_chunk();
    let mut top = Members::default();
    restore(&snapshot.top, data, &mut chunk, &mut top, set_top, |c, m, saved| {
        p.i = saved.at;
        p.top_member(c, m, saved.field)
    })?;
    let mut choice = empty_choice();
    let mut choice_members = Members::default();
    restore(&snapshot.choice, data, &mut choice, &mut choice_members, set_choice, |c, m, saved| {
        p.i = saved.at;
        p.choice_member(c, m, saved.field)
    })?;
    let mut delta = empty_delta();
    let mut delta_members = Members::default();
    restore(&snapshot.delta, data, &mut delta, &mut delta_members, set_delta, |d, m, saved| {
        p.i = saved.at;
        p.delta_member(d, m, saved.field)
    })?;
    top.first(CHOICES, 0)?;
    choice_members.first(DELTA, 0)?;
    // From the content value on, exactly the fresh parse's path.
    p.i = snapshot.prefix.len();
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
