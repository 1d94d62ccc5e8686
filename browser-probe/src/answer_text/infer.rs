//! Which JSON string values carry the answer in a body whose format the probe has no reader for
//! (an app's own event shape, with field names never seen before).
//!
//! A first pass over the body's events learns, per field name, how its string values behave.
//! Answer text changes from event to event; metadata does not, or looks like an id:
//! - a field whose value repeats the previous one in at least half of its events (a type, a
//!   model, a message id, a role) is metadata;
//! - a field whose values, at least [`FIXED_LEN_MIN`] characters long, all have the same length
//!   (ids, timestamps, hashes) is metadata;
//! - a field seen in one event only (a final summary repeating the whole text, a start event)
//!   is not counted, unless no field is seen in several events.
//!
//! The remaining fields are the answer's, and a second pass counts their characters. The count
//! is an estimate (tokentap states `alignment: inferred` and scales it to its own answer).

use super::json::Value;

/// Values of one length this long or longer are an id or a timestamp when a field always has them.
const FIXED_LEN_MIN: usize = 8;
/// Field names learned at most (the first ones seen).
const MAX_KEYS: usize = 64;

#[derive(Debug)]
struct Field {
    name: String,
    events: u32,
    repeats: u32,
    chars: u64,
    /// The length of every value so far, while they all have one.
    fixed_len: Option<usize>,
    last: String,
}

/// What the first pass learned.
#[derive(Debug, Default)]
pub struct Fields(Vec<Field>);

impl Fields {
    /// Learns from one event.
    pub fn learn(&mut self, v: &Value) {
        walk(v, "", &mut |name, s| {
            let len = s.chars().count();
            let i = match self.0.iter().position(|f| f.name == name) {
                Some(i) => i,
                None if self.0.len() < MAX_KEYS => {
                    self.0.push(Field {
                        name: name.into(),
                        events: 0,
                        repeats: 0,
                        chars: 0,
                        fixed_len: Some(len),
                        last: String::new(),
                    });
                    self.0.len() - 1
                }
                None => return,
            };
            let f = &mut self.0[i];
            if f.events > 0 && f.last == s {
                f.repeats += 1;
            }
            if f.fixed_len != Some(len) {
                f.fixed_len = None;
            }
            f.events += 1;
            f.chars += len as u64;
            f.last = s.into();
        });
    }

    /// The fields whose values are the answer's text (empty: none found).
    pub fn text_fields(&self) -> Vec<String> {
        let text = |f: &&Field| {
            2 * f.repeats < f.events.saturating_sub(1).max(1)
                && !(f.events > 2 && f.fixed_len.is_some_and(|n| n >= FIXED_LEN_MIN))
        };
        let several: Vec<String> =
            self.0.iter().filter(|f| f.events > 1).filter(text).map(|f| f.name.clone()).collect();
        if !several.is_empty() {
            return several;
        }
        self.0.iter().filter(text).max_by_key(|f| f.chars).map(|f| f.name.clone()).into_iter().collect()
    }
}

/// Characters of `v`'s string values in `fields`.
pub fn count(v: &Value, fields: &[String]) -> u64 {
    let mut n = 0;
    walk(v, "", &mut |name, s| {
        if fields.iter().any(|f| f == name) {
            n += s.chars().count() as u64;
        }
    });
    n
}

/// Calls `f(field, value)` for every non-empty string in `v`; an array's items belong to its
/// field, a bare string to the field "".
fn walk(v: &Value, name: &str, f: &mut impl FnMut(&str, &str)) {
    match v {
        Value::String(s) if !s.is_empty() => f(name, s),
        Value::Array(items) => items.iter().for_each(|item| walk(item, name, f)),
        Value::Object(fields) => fields.iter().for_each(|(k, item)| walk(item, k, f)),
        _ => {}
    }
}
