//! The page's body chunks, kept per turn by reference (no copy while the app reads), and their
//! answer characters counted when the turn is reported, after its paints settled: the counting
//! never runs between a chunk's arrival and the app seeing it.

use std::cell::RefCell;
use std::collections::BTreeMap;

use js_sys::{Array, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};

use crate::answer_text::{count_chunks, TextFormat};
use crate::turn::Turn;

/// Body bytes kept per turn; arrivals past them get no character count.
pub(super) const MAX_KEPT_BYTES: u64 = 1 << 20;
/// Turns whose bodies are kept at once; past this the oldest is forgotten.
const MAX_TURNS: usize = 32;

struct Kept {
    format: Option<TextFormat>,
    chunks: Array,
    bytes: u64,
    full: bool,
}

thread_local! {
    static KEPT: RefCell<BTreeMap<u32, Kept>> = const { RefCell::new(BTreeMap::new()) };
}

/// Starts keeping `turn`'s body, whose headers announce `format` (`None`: sniffed).
pub(super) fn start(turn: u32, format: Option<TextFormat>) {
    KEPT.with(|k| {
        let mut kept = k.borrow_mut();
        if kept.len() >= MAX_TURNS {
            kept.pop_first();
        }
        kept.insert(turn, Kept { format, chunks: Array::new(), bytes: 0, full: false });
    });
}

/// Keeps a reference to a chunk the app is about to read.
pub(super) fn keep(turn: u32, chunk: &JsValue, len: u64) {
    KEPT.with(|k| {
        if let Some(kept) = k.borrow_mut().get_mut(&turn) {
            if kept.full || kept.bytes + len > MAX_KEPT_BYTES {
                kept.full = true;
            } else {
                kept.chunks.push(chunk);
                kept.bytes += len;
            }
        }
    });
}

/// Counts the answer characters of `turn`'s kept body and sets them on its arrivals.
pub(super) fn count(turn: &mut Turn) {
    let Some(kept) = KEPT.with(|k| k.borrow_mut().remove(&turn.id)) else { return };
    let chunks: Vec<Vec<u8>> =
        kept.chunks.iter().map_while(|c| c.dyn_ref::<Uint8Array>().map(Uint8Array::to_vec)).collect();
    let counted = count_chunks(kept.format, &chunks, !kept.full && turn.end_ms.is_some());
    turn.set_chars(&counted.counts);
    turn.response_path.text_format = counted.format;
    turn.response_path.text_inferred = counted.inferred;
}
