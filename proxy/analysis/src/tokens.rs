//! Output token counting with OpenAI's o200k_base encoding: one yardstick for every provider, so that
//! rates from different models and servers compare (provider-reported usage is kept separately).

use std::sync::OnceLock;

use regex_automata::meta::Regex;
use regex_automata::{Anchored, Input};
use rustc_hash::FxHashMap;
use tiktoken_rs::Rank;

/// Texts are tokenized in segments of at most this many bytes. BPE merging inside one regex piece is
/// quadratic in the piece length, so a megabyte without whitespace would otherwise take minutes.
/// Segments are cut just before a space that follows a non-space character, which is where o200k's
/// pre-tokenizer starts a new piece anyway, so ordinary text counts exactly as if tokenized whole.
const SEGMENT_BYTES: usize = 4096;
/// Without such a space in the window, a run is cut every this many bytes: counts of a pathological
/// run may then differ by a few tokens, but the cost stays linear in the text length.
const RUN_CUT_BYTES: usize = 256;

/// Ordinary (non-special) tokens of o200k_base: ranks 0..=199_997, without gaps.
const O200K_ORDINARY_TOKENS: Rank = 199_998;

/// o200k_base's pre-tokenizer pattern (tiktoken's `o200k_base`), with its one look-ahead
/// alternative `\s+(?!\S)` rewritten so that a plain finite-automaton regex can run it (the
/// technique of GitHub's `bpe-openai`): `\s+$` takes a whitespace run that ends the text, and
/// `\s+\s` (pattern 1 of [`Regex::new_many`]) matches a run of two or more whitespace characters
/// followed by a non-space, of which the last character is then given back. tiktoken-rs runs the
/// original through fancy-regex's backtracking VM, which costs about 5x more; the pieces are the same.
const PRETOKENIZE_PATTERNS: [&str; 3] = [
    concat!(
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        "|\\p{N}{1,3}",
        "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*",
        "|\\s*[\\r\\n]+",
        "|\\s+$",
    ),
    "\\s+\\s",
    "\\s+",
];
/// Index of the pattern whose last character is a look-ahead to give back.
const LOOKAHEAD_PATTERN: usize = 1;

/// The o200k_base encoder: tiktoken's ranks and BPE merge, with a faster pre-tokenizer.
struct O200k {
    ranks: FxHashMap<Vec<u8>, Rank>,
    pretokenizer: Regex,
}

fn encoding() -> Option<&'static O200k> {
    static O200K: OnceLock<Option<O200k>> = OnceLock::new();
    // The ranks ship inside tiktoken-rs; loading cannot fail short of a broken build, but a broken
    // tokenizer must not take the proxy down, so failure means "no token counts" instead of a panic.
    O200K.get_or_init(load).as_ref()
}

fn load() -> Option<O200k> {
    let pretokenizer = Regex::new_many(&PRETOKENIZE_PATTERNS).ok()?;
    let ranks = std::panic::catch_unwind(|| {
        let bpe = tiktoken_rs::o200k_base().ok()?;
        // tiktoken-rs keeps its rank table private; its decoder gives each rank's bytes back.
        let mut ranks = FxHashMap::default();
        ranks.reserve(O200K_ORDINARY_TOKENS as usize);
        for rank in 0..O200K_ORDINARY_TOKENS {
            let bytes = bpe._decode_native_and_split(vec![rank]).next()?;
            ranks.insert(bytes, rank);
        }
        Some(ranks)
    })
    .ok()
    .flatten()?;
    // Every single byte is a token (BPE's starting point); a table without them is not o200k.
    if ranks.len() != O200K_ORDINARY_TOKENS as usize || !(0..=255u8).all(|b| ranks.contains_key(&[b][..])) {
        return None;
    }
    Some(O200k { ranks, pretokenizer })
}

impl O200k {
    /// Calls `on_piece` for each pre-tokenizer piece of `text`, exactly as tiktoken's `find_iter`
    /// over the o200k pattern would report them.
    fn for_each_piece<'t>(&self, text: &'t str, mut on_piece: impl FnMut(&'t str)) {
        let mut at = 0;
        while at < text.len() {
            let input = Input::new(text).range(at..).anchored(Anchored::Yes);
            let Some(m) = self.pretokenizer.find(input) else {
                // Every character starts some alternative, so this does not happen; should it,
                // skip to the next match like an unanchored `find_iter` would.
                match self.pretokenizer.find(Input::new(text).range(at..)) {
                    Some(m) => {
                        at = m.start();
                        continue;
                    }
                    None => return,
                }
            };
            let mut end = m.end();
            if m.pattern().as_usize() == LOOKAHEAD_PATTERN {
                if let Some(last) = text[at..end].chars().next_back() {
                    end -= last.len_utf8();
                }
            }
            if end <= at {
                return; // not reachable (the look-ahead pattern matches two characters or more)
            }
            on_piece(&text[at..end]);
            at = end;
        }
    }

    /// Calls `on_token(bytes)` for each token of `text`, in order (tiktoken's `encode_ordinary`).
    fn for_each_token<'t>(&self, text: &'t str, mut on_token: impl FnMut(&'t [u8])) {
        for segment in segments(text) {
            self.for_each_piece(segment, |piece| {
                let piece = piece.as_bytes();
                if self.ranks.contains_key(piece) {
                    on_token(piece);
                } else {
                    // Not a token itself, so at least two bytes long (all bytes are tokens).
                    for token in tiktoken_rs::byte_pair_split(piece, &self.ranks) {
                        on_token(token);
                    }
                }
            });
        }
    }
}

/// Number of o200k_base tokens in `text` (ordinary encoding: special-token text counts as text).
/// Returns `None` only if the bundled encoding failed to load.
pub fn count_tokens(text: &str) -> Option<u64> {
    let bpe = encoding()?;
    let mut count = 0u64;
    bpe.for_each_token(text, |_| count += 1);
    Some(count)
}

/// Calls `on_token(byte_len)` for each o200k token of `text`, in order; the byte lengths add up to
/// `text.len()`. Used to attribute tokens to the events whose bytes completed them.
pub(crate) fn for_each_token_len(text: &str, mut on_token: impl FnMut(usize)) -> bool {
    let Some(bpe) = encoding() else {
        return false;
    };
    bpe.for_each_token(text, |token| on_token(token.len()));
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
        let whole = reference().encode_ordinary(&text).len() as u64;
        assert_eq!(count_tokens(&text), Some(whole));
    }

    #[test]
    fn token_lengths_cover_text() {
        let text = "naïve café — 東京 ".repeat(400);
        let mut total = 0;
        assert!(for_each_token_len(&text, |n| total += n));
        assert_eq!(total, text.len());
    }

    /// tiktoken-rs's own o200k encoder, the reference the fast pre-tokenizer must match exactly.
    fn reference() -> &'static tiktoken_rs::CoreBPE {
        tiktoken_rs::o200k_base_singleton()
    }

    /// Our ranks for `text`, without segmentation (so that any text compares exactly).
    fn encode_whole(text: &str) -> Vec<Rank> {
        let bpe = encoding().unwrap();
        let mut out = Vec::new();
        bpe.for_each_piece(text, |piece| {
            let piece = piece.as_bytes();
            match bpe.ranks.get(piece) {
                Some(&rank) => out.push(rank),
                None => out
                    .extend(tiktoken_rs::byte_pair_split(piece, &bpe.ranks).into_iter().map(|token| bpe.ranks[token])),
            }
        });
        out
    }

    fn assert_same_as_tiktoken(text: &str) {
        let expected = reference().encode_ordinary(text);
        assert_eq!(encode_whole(text), expected, "tokens of {text:?}");
    }

    /// Texts that exercise every alternative of the o200k pattern: contractions (any case, and
    /// Unicode case folds such as the long s and the Kelvin sign), letter categories (upper, lower,
    /// title case, modifier, other, marks), numbers of every kind, punctuation runs with trailing
    /// newlines and slashes, and whitespace runs of every kind before letters, digits, punctuation,
    /// newlines and the end of the text.
    const CORPUS: &[&str] = &[
        "",
        " ",
        "  ",
        "\n",
        "a",
        "Hello, world!",
        "The quick brown fox jumps over the lazy dog.",
        "I'm sure you're right, it's what they'd've said; we'll see. I'M SURE YOU'RE IT'S WE'LL",
        "it'\u{17f} don'T they'Re we'LL i'M he'D'S 's 't 'x",
        "\u{212A}elvin 'K' 'Ka' K'S",
        "ǅungla ǈ Ǌ ǋ ʰʱʲ ʰa aʰ 東京タワー 中文文本 עברית العربية ภาษาไทย",
        "e\u{301}te\u{301} \u{301}\u{301}a naïve café Ångström",
        "123 4567 89012345 1,234,567.89 -42 3.14159 1e10 0x1F ² ³ ½ Ⅻ ٣٤٥ ١٢٣٤ 〇",
        "   leading spaces\ttab\t\tdouble tab  two  spaces   three   spaces",
        "trailing spaces   ",
        "trailing newline\n",
        "lines\n\nblank\r\ncrlf\rcr\n\n\n   \n  indented\n\tlast",
        "mixed \u{a0}nbsp \u{3000}ideographic\u{2003}em \u{85}nel \u{b}vt \u{c}ff \u{2028}ls",
        "  \u{a0}  x \u{a0}\u{a0}1 \t\t! \n \n!",
        "fn main() {\n    let x = vec![1, 2, 3];\n    println!(\"{x:?}\");\n}\n",
        "def f(a, b):\n\treturn a // b  # comment\n\n\nclass X: pass",
        "<div class=\"a\">/path/to/file.rs</div>\n//comment\n/* block */",
        "!!!??? ... --- *** ''' \"\"\" ``` ~~~ @@@ ### $$$ %%% ^^^ &&& ((( )))",
        ".\n\n/\n/ /\r\n\r\n//\n",
        "emoji 👍🏽 🇩🇪 👨‍👩‍👧‍👦 ❤️ ✨🎉",
        "<|endoftext|> <|endofprompt|> special tokens count as text",
        "https://example.com/a/b?c=d&e=f#g user@example.com",
        "CamelCaseWord XMLHttpRequest getHTTPResponseCode snake_case_word kebab-case-word",
        "ALLCAPS lowercase MiXeD mIxEd Title Case",
        "\u{0}\u{1}\u{1f}\u{7f} control \u{200b}zero\u{200d}width\u{feff}",
        "a\u{10FFFF}b\u{E000}c\u{FFFD}",
    ];

    #[test]
    fn pretokenizer_matches_tiktoken_on_corpus() {
        for text in CORPUS {
            assert_same_as_tiktoken(text);
        }
        assert_same_as_tiktoken(&CORPUS.concat());
        assert_same_as_tiktoken(&CORPUS.join(" "));
        assert_same_as_tiktoken(&CORPUS.join("\n"));
        assert_same_as_tiktoken(&CORPUS.join("  \t"));
    }

    #[test]
    fn counts_match_tiktoken_with_segmentation() {
        // Longer than a segment, ordinary text: segmentation does not change the count either.
        let text = CORPUS[1..].join(" ").repeat(40);
        assert!(text.len() > 3 * SEGMENT_BYTES);
        let expected = reference().encode_ordinary(&text).len() as u64;
        assert_eq!(count_tokens(&text), Some(expected));
    }

    #[test]
    fn rank_table_round_trips() {
        let bpe = encoding().unwrap();
        assert_eq!(bpe.ranks.len(), O200K_ORDINARY_TOKENS as usize);
        for (bytes, &rank) in bpe.ranks.iter().step_by(97) {
            let back: Vec<u8> = reference()._decode_native_and_split(vec![rank]).flatten().collect();
            assert_eq!(&back, bytes);
        }
    }

    mod random {
        use super::*;
        use proptest::prelude::*;

        /// Characters from every class the pattern distinguishes.
        #[rustfmt::skip]
        const ALPHABET: &[char] = &[
            'a', 'b', 'z', 'A', 'Z', 's', 'S', 't', 'T', 'r', 'e', 'v', 'm', 'l', 'd', 'D', 'L',
            '\'', '0', '1', '9', ' ', ' ', ' ', '\t', '\n', '\r', '\u{b}', '\u{c}', '\u{85}',
            '\u{a0}', '\u{3000}', '\u{2028}', '.', ',', '!', '?', '/', '\\', '-', '_', '(', ')',
            '{', '"', '#', '\u{17f}', '\u{212a}', 'ǅ', 'ʰ', '東', 'א', '\u{301}', '\u{94d}', 'é',
            'É', 'ß', 'ẞ', '²', 'Ⅻ', '٣', '½', '👍', '\u{1f3fd}', '\u{200d}', '\u{0}', '\u{7f}',
            '\u{feff}', '\u{fffd}',
        ];

        fn text() -> impl Strategy<Value = String> {
            prop::collection::vec(
                prop_oneof![
                    4 => prop::sample::select(ALPHABET).prop_map(String::from),
                    1 => prop::sample::select(CORPUS).prop_map(String::from),
                    1 => "\\PC{0,6}",
                    1 => "[ \t\r\n]{1,5}",
                ],
                0..40,
            )
            .prop_map(|parts| parts.concat())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            #[test]
            fn same_tokens_as_tiktoken(text in text()) {
                let expected = reference().encode_ordinary(&text);
                prop_assert_eq!(encode_whole(&text), expected);
            }

            #[test]
            fn any_string_same_tokens_as_tiktoken(text in "\\PC{0,60}|(?s).{0,60}") {
                let expected = reference().encode_ordinary(&text);
                prop_assert_eq!(encode_whole(&text), expected);
            }
        }
    }

    #[test]
    fn long_run_without_spaces_is_fast_enough() {
        let text = "a".repeat(200_000);
        assert!(count_tokens(&text).unwrap() > 0);
    }
}
