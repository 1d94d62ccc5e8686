//! Output token counting with OpenAI's o200k_base encoding: one yardstick for every provider, so that
//! rates from different models and servers compare (provider-reported usage is kept separately).

use std::sync::OnceLock;

use tiktoken_rs::CoreBPE;

/// Texts are tokenized in segments of at most this many bytes. BPE merging inside one regex piece is
/// quadratic in the piece length, so a megabyte without whitespace would otherwise take minutes.
/// Segments are cut just before a space that follows a non-space character, which is where o200k's
/// pre-tokenizer starts a new piece anyway, so ordinary text counts exactly as if tokenized whole.
const SEGMENT_BYTES: usize = 4096;
/// Without such a space in the window, a run is cut every this many bytes: counts of a pathological
/// run may then differ by a few tokens, but the cost stays linear in the text length.
const RUN_CUT_BYTES: usize = 256;

fn encoding() -> Option<&'static CoreBPE> {
    static O200K: OnceLock<Option<CoreBPE>> = OnceLock::new();
    // The ranks ship inside tiktoken-rs; loading cannot fail short of a broken build, but a broken
    // tokenizer must not take the proxy down, so failure means "no token counts" instead of a panic.
    O200K
        .get_or_init(|| tiktoken_rs::o200k_base().ok())
        .as_ref()
}

/// Number of o200k_base tokens in `text` (ordinary encoding: special-token text counts as text).
/// Returns `None` only if the bundled encoding failed to load.
pub fn count_tokens(text: &str) -> Option<u64> {
    let bpe = encoding()?;
    Some(
        segments(text)
            .map(|s| bpe.encode_ordinary(s).len() as u64)
            .sum(),
    )
}

/// Calls `on_token(byte_len)` for each o200k token of `text`, in order; the byte lengths add up to
/// `text.len()`. Used to attribute tokens to the events whose bytes completed them.
pub(crate) fn for_each_token_len(text: &str, mut on_token: impl FnMut(usize)) -> bool {
    let Some(bpe) = encoding() else {
        return false;
    };
    for segment in segments(text) {
        let tokens = bpe.encode_ordinary(segment);
        for bytes in bpe._decode_native_and_split(tokens) {
            on_token(bytes.len());
        }
    }
    true
}

/// Splits text into tokenization segments (see [`SEGMENT_BYTES`]).
fn segments(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        if rest.len() <= SEGMENT_BYTES {
            return Some(std::mem::take(&mut rest));
        }
        let bytes = rest.as_bytes();
        // Prefer the last " " preceded by a non-whitespace byte within the window.
        let mut cut = (1..SEGMENT_BYTES)
            .rev()
            .find(|&i| bytes[i] == b' ' && !bytes[i - 1].is_ascii_whitespace())
            .unwrap_or(RUN_CUT_BYTES);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        if cut == 0 {
            // Cannot happen for valid UTF-8 with SEGMENT_BYTES >= 4, kept as a guard against looping.
            cut = rest.len();
        }
        let (head, tail) = rest.split_at(cut);
        rest = tail;
        Some(head)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_known_strings() {
        assert_eq!(count_tokens(""), Some(0));
        assert_eq!(count_tokens("Hello, world!"), Some(4));
    }

    #[test]
    fn segmentation_does_not_change_counts_of_ordinary_text() {
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(500);
        let whole = encoding().unwrap().encode_ordinary(&text).len() as u64;
        assert_eq!(count_tokens(&text), Some(whole));
    }

    #[test]
    fn token_lengths_cover_text() {
        let text = "naïve café — 東京 ".repeat(400);
        let mut total = 0;
        assert!(for_each_token_len(&text, |n| total += n));
        assert_eq!(total, text.len());
    }

    #[test]
    fn long_run_without_spaces_is_fast_enough() {
        let text = "a".repeat(200_000);
        assert!(count_tokens(&text).unwrap() > 0);
    }
}
