//! The page's body chunks, kept per turn by reference (no copy while the app reads), and their
//! answer characters counted when the turn is reported, after its paints settled: the counting
//! never runs between a chunk's arrival and the app seeing it.
//!
//! A stream received as whole messages (an `EventSource`'s events, a WebSocket's text messages)
//! is kept as the messages' bytes; each message is one complete event.

use std::cell::RefCell;
use std::collections::BTreeMap;

use js_sys::{Array, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};

use super::with_probe;
use crate::answer_text::{count_chunks, count_messages, TextFormat};
use crate::turn::Turn;

/// Body bytes kept per turn; arrivals past them get no character count.
pub(super) const MAX_KEPT_BYTES: u64 = 1 << 20;
/// Turns whose bodies are kept at once; past this the oldest is forgotten.
const MAX_TURNS: usize = 32;

enum Body {
    /// A fetch body's chunks (`Uint8Array`s the app also reads).
    Chunks(Array),
    /// Whole messages, read as events of this format.
    Messages(TextFormat, Vec<Vec<u8>>),
}

struct Kept {
    format: Option<TextFormat>,
    body: Body,
    bytes: u64,
    full: bool,
}

thread_local! {
    static KEPT: RefCell<BTreeMap<u32, Kept>> = const { RefCell::new(BTreeMap::new()) };
}

fn start_kept(turn: u32, format: Option<TextFormat>, body: Body) {
    KEPT.with(|k| {
        let mut kept = k.borrow_mut();
        if kept.len() >= MAX_TURNS {
            kept.pop_first();
        }
        kept.insert(turn, Kept { format, body, bytes: 0, full: false });
    });
}

/// Starts keeping `turn`'s body, whose headers announce `format` (`None`: sniffed).
pub(super) fn start(turn: u32, format: Option<TextFormat>) {
    start_kept(turn, format, Body::Chunks(Array::new()));
}

/// Starts keeping `turn`'s messages, each one event of `format`.
pub(super) fn start_messages(turn: u32, format: TextFormat) {
    start_kept(turn, Some(format), Body::Messages(format, Vec::new()));
}

/// Room for `len` more bytes of `turn`'s body; once a piece did not fit, none after it is kept.
fn with_room(turn: u32, len: u64, f: impl FnOnce(&mut Body)) {
    KEPT.with(|k| {
        if let Some(kept) = k.borrow_mut().get_mut(&turn) {
            if kept.full || kept.bytes + len > MAX_KEPT_BYTES {
                kept.full = true;
            } else {
                kept.bytes += len;
                f(&mut kept.body);
            }
        }
    });
}

/// Keeps a reference to a chunk the app is about to read.
pub(super) fn keep(turn: u32, chunk: &JsValue, len: u64) {
    with_room(turn, len, |body| {
        if let Body::Chunks(chunks) = body {
            chunks.push(chunk);
        }
    });
}

/// Keeps one whole message's bytes.
fn keep_message(turn: u32, message: Vec<u8>) {
    with_room(turn, message.len() as u64, |body| {
        if let Body::Messages(_, messages) = body {
            messages.push(message);
        }
    });
}

/// One whole message of a tracked stream arrived (an event's data, a socket's text message): a
/// read of its UTF-8 bytes, kept for the count. Binary messages and messages after the stream's
/// end are not the answer's reads.
pub(super) fn message_arrived(turn: u32, t_ms: f64, data: &JsValue) {
    let Some(text) = data.as_string() else { return };
    let bytes = text.into_bytes();
    let open = with_probe(|p| match p.turns.get_mut(turn) {
        Some(t) if t.end_ms.is_none() => {
            t.record_chunk(t_ms, bytes.len() as u64);
            true
        }
        _ => false,
    });
    if open {
        keep_message(turn, bytes);
    }
}

/// Counts the answer characters of `turn`'s kept body and sets them on its arrivals.
pub(super) fn count(turn: &mut Turn) {
    let Some(kept) = KEPT.with(|k| k.borrow_mut().remove(&turn.id)) else { return };
    let counted = match kept.body {
        Body::Chunks(chunks) => {
            let chunks: Vec<Vec<u8>> =
                chunks.iter().map_while(|c| c.dyn_ref::<Uint8Array>().map(Uint8Array::to_vec)).collect();
            count_chunks(kept.format, &chunks, !kept.full && turn.end_ms.is_some())
        }
        Body::Messages(format, messages) => count_messages(format, &messages),
    };
    turn.set_chars(&counted.counts);
    turn.response_path.text_format = counted.format;
    turn.response_path.text_inferred = counted.inferred;
}
