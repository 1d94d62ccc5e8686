//! Output token counting with OpenAI's o200k_base encoding: one yardstick for every provider, so that
//! rates from different models and servers compare (provider-reported usage is kept separately).

use std::hash::Hasher as _;
use std::ops::Range;
use std::sync::OnceLock;

use regex_automata::meta::Regex;
use regex_automata::{Anchored, Input};
use rustc_hash::FxHasher;
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
/// At least the bytes of all ordinary o200k tokens back to back (a test checks it).
const ARENA_BYTES: usize = 2 << 20;

/// Index of the pattern whose last character is a look-ahead to give back.
const LOOKAHEAD_PATTERN: usize = 1;

/// The o200k_base encoder: tiktoken's ranks and BPE merge rule, with a faster pre-tokenizer.
struct O200k {
    ranks: RankTable,
    pretokenizer: Regex,
}

/// o200k's ordinary tokens by their bytes, in about 4.4 MB: the bytes of all 199,998 tokens back
/// to back (about 1.6 MB), where each rank's bytes start (0.8 MB), and an open-addressing table of
/// ranks by the hash of their bytes (2 MiB). A hash map of slices held about twice that (24 bytes
/// a bucket), all of it resident from start (about a fifth of tokentap's idle memory).
struct RankTable {
    arena: &'static [u8],
    /// Token `r` is `arena[starts[r]..starts[r + 1]]`.
    starts: Box<[u32]>,
    /// `rank + 1` of the token whose bytes hash here (or next along), 0 for an empty slot. Its
    /// length is a power of two, at most 40 % full: a lookup of bytes that are not a token (most
    /// of those the merge makes) ends at an empty slot after one or two probes.
    slots: Box<[u32]>,
    /// Bits of the hash that index `slots` (the high ones, the best mixed).
    shift: u32,
}

impl RankTable {
    /// The table of the tokens whose ends (exclusive) in `arena` are `ends`, in rank order; `None`
    /// when two ranks have the same bytes or the arena is too large to index with `u32`.
    fn new(arena: &'static [u8], ends: &[usize]) -> Option<RankTable> {
        let mut starts = Vec::with_capacity(ends.len() + 1);
        starts.push(0);
        for &end in ends {
            starts.push(u32::try_from(end).ok()?);
        }
        let slot_count = (ends.len() * 5 / 2).next_power_of_two().max(2);
        let mut table = RankTable {
            arena,
            starts: starts.into_boxed_slice(),
            slots: vec![0; slot_count].into_boxed_slice(),
            shift: 64 - slot_count.trailing_zeros(),
        };
        for rank in 0..ends.len() as Rank {
            let mut slot = table.home(table.token(rank));
            while table.slots[slot] != 0 {
                if table.token(table.slots[slot] - 1) == table.token(rank) {
                    return None;
                }
                slot = (slot + 1) & (table.slots.len() - 1);
            }
            table.slots[slot] = rank + 1;
        }
        Some(table)
    }

    fn token(&self, rank: Rank) -> &'static [u8] {
        let r = rank as usize;
        &self.arena[self.starts[r] as usize..self.starts[r + 1] as usize]
    }

    fn home(&self, bytes: &[u8]) -> usize {
        let mut h = FxHasher::default();
        h.write(bytes);
        (h.finish() >> self.shift) as usize
    }

    fn get(&self, bytes: &[u8]) -> Option<Rank> {
        let mask = self.slots.len() - 1;
        let mut slot = self.home(bytes);
        loop {
            match self.slots[slot] {
                0 => return None,
                occupant if self.token(occupant - 1) == bytes => return Some(occupant - 1),
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// tiktoken's byte-pair merge: start from single bytes and repeatedly merge the adjacent pair
    /// whose concatenation has the lowest rank (the leftmost of equal ranks), until no adjacent
    /// pair is a token. Calls `on_token` with each resulting token's bytes, in order.
    fn merge<'p>(&self, piece: &'p [u8], mut on_token: impl FnMut(&'p [u8])) {
        // parts[i] = (start of part i, rank of part i joined with part i + 1).
        let pair_rank = |parts: &[(usize, Rank)], i: usize| -> Rank {
            match (parts.get(i), parts.get(i + 2)) {
                (Some(&(start, _)), Some(&(end, _))) => self.get(&piece[start..end]).unwrap_or(Rank::MAX),
                _ => Rank::MAX,
            }
        };
        let mut parts: Vec<(usize, Rank)> = (0..=piece.len()).map(|i| (i, Rank::MAX)).collect();
        for i in 0..parts.len().saturating_sub(2) {
            parts[i].1 = pair_rank(&parts, i);
        }
        loop {
            let mut best = (Rank::MAX, 0);
            for (i, &(_, rank)) in parts[..parts.len() - 1].iter().enumerate() {
                if rank < best.0 {
                    best = (rank, i);
                }
            }
            if best.0 == Rank::MAX {
                break;
            }
            let i = best.1;
            parts.remove(i + 1);
            parts[i].1 = pair_rank(&parts, i);
            if i > 0 {
                parts[i - 1].1 = pair_rank(&parts, i - 1);
            }
        }
        for w in parts.windows(2) {
            on_token(&piece[w[0].0..w[1].0]);
        }
    }
}

fn encoding() -> Option<&'static O200k> {
    static O200K: OnceLock<Option<O200k>> = OnceLock::new();
    // The ranks ship inside tiktoken-rs; loading cannot fail short of a broken build, but a broken
    // tokenizer must not take the proxy down, so failure means "no token counts" instead of a panic.
    O200K.get_or_init(load).as_ref()
}

fn load() -> Option<O200k> {
    let pretokenizer = Regex::new_many(&PRETOKENIZE_PATTERNS).ok()?;
    // tiktoken-rs builds tens of MB of maps to give us each rank's bytes. They are built and
    // dropped on a thread of their own, so that they live in an allocator arena of their own that
    // is handed back to the system when they are freed; the two vectors that are kept are
    // allocated here, before, so that they do not pin that arena.
    let mut arena: Vec<u8> = Vec::with_capacity(ARENA_BYTES);
    let mut ends: Vec<usize> = Vec::with_capacity(O200K_ORDINARY_TOKENS as usize);
    let filled = std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new().name("tokentap-o200k".into()).spawn_scoped(scope, || {
            let bpe = tiktoken_rs::o200k_base().ok()?;
            // tiktoken-rs keeps its rank table private; its decoder gives each rank's bytes back.
            for rank in 0..O200K_ORDINARY_TOKENS {
                arena.extend_from_slice(&bpe._decode_native_and_split(vec![rank]).next()?);
                ends.push(arena.len());
            }
            Some(())
        });
        spawned.ok()?.join().ok().flatten()
    });
    filled?;
    // Loaded once per process into a static: the bytes live as long as the process.
    let arena: &'static [u8] = Box::leak(arena.into_boxed_slice());
    let ranks = RankTable::new(arena, &ends)?;
    // Every single byte is a token (BPE's starting point); a table without them is not o200k.
    if ranks.len() != O200K_ORDINARY_TOKENS as usize || !(0..=255u8).all(|b| ranks.get(&[b]).is_some()) {
        return None;
    }
    Some(O200k { ranks, pretokenizer })
}

impl O200k {
    /// Calls `on_piece` for each pre-tokenizer piece of `text`, exactly as tiktoken's `find_iter`
    /// over the o200k pattern would report them. Pieces that ASCII bytes alone decide (most of
    /// English prose and code) are cut by [`ascii_piece_end`], for about 100 instructions a piece
    /// against about 550 for an anchored regex search (callgrind, an English answer); the regex
    /// cuts the rest.
    fn for_each_piece<'t>(&self, text: &'t str, on_piece: impl FnMut(&'t str)) {
        self.for_each_piece_cut_by(text, ascii_piece_end, on_piece);
    }

    /// The piece loop: `ascii_cut` is asked first for the end of the piece at each position, and
    /// the regex cuts the piece when it answers `None`. (The tests pass a cut that always answers
    /// `None`, to compare the fast path against the regex alone.)
    fn for_each_piece_cut_by<'t>(
        &self,
        text: &'t str,
        ascii_cut: impl Fn(&[u8], usize) -> Option<usize>,
        mut on_piece: impl FnMut(&'t str),
    ) {
        let mut at = 0;
        while at < text.len() {
            let piece = match ascii_cut(text.as_bytes(), at) {
                // Never empty (every rule takes a character); checked so that a slip could not loop.
                Some(end) if end > at => at..end,
                _ => match self.regex_piece(text, at) {
                    Some(piece) => piece,
                    None => return,
                },
            };
            on_piece(&text[piece.start..piece.end]);
            at = piece.end;
        }
    }

    /// The next piece at `at` by the pre-tokenizer regex: its byte range, not empty, or `None` if
    /// the rest of the text has no piece.
    fn regex_piece(&self, text: &str, at: usize) -> Option<Range<usize>> {
        let input = Input::new(text).range(at..).anchored(Anchored::Yes);
        let Some(m) = self.pretokenizer.find(input) else {
            // Every character starts some alternative, so this does not happen; should it, skip to
            // the next match like an unanchored `find_iter` would.
            let next = self.pretokenizer.find(Input::new(text).range(at..))?;
            return if next.start() > at { self.regex_piece(text, next.start()) } else { None };
        };
        let mut end = m.end();
        if m.pattern().as_usize() == LOOKAHEAD_PATTERN {
            if let Some(last) = text[at..end].chars().next_back() {
                end -= last.len_utf8();
            }
        }
        // Not empty: the look-ahead pattern matches two characters or more.
        (end > at).then_some(at..end)
    }

    /// Calls `on_token(bytes)` for each token of `text`, in order (tiktoken's `encode_ordinary`).
    fn for_each_token<'t>(&self, text: &'t str, mut on_token: impl FnMut(&'t [u8])) {
        for segment in segments(text) {
            self.for_each_piece(segment, |piece| {
                let piece = piece.as_bytes();
                if self.ranks.get(piece).is_some() {
                    on_token(piece);
                } else {
                    // Not a token itself, so at least two bytes long (all bytes are tokens).
                    self.ranks.merge(piece, &mut on_token);
                }
            });
        }
    }
}

/// The end of the o200k piece that starts at `at`, found without the regex when ASCII bytes alone
/// decide it; `None` when a non-ASCII character could change the piece, and the regex must cut it.
///
/// The o200k pattern's alternatives, first match wins, restricted to ASCII (where its letters are
/// `A-Z` and `a-z`, its numbers `0-9`, and its whitespace `\t \n \x0B \x0C \r` and space):
/// 1. an optional prefix (any character but `\r`, `\n`, letters and digits) before letters: capitals
///    then lower case (`XMLHttp`, `Camel`), else capitals alone (`HTTP`), then an optional
///    contraction (`'s 't 're 've 'm 'll 'd`, any case);
/// 2. one to three digits;
/// 3. an optional space, punctuation (anything but whitespace, letters and digits), then any `\r`,
///    `\n` and `/`;
/// 4. a whitespace run up to its last `\r` or `\n`;
/// 5. a whitespace run that ends the text;
/// 6. a whitespace run before something else, less its last character so that that one can prefix
///    the next piece (the look-ahead `\s+(?!\S)`), unless it is the run's only character.
///
/// Each run is taken to its end, and the character after it must then be ASCII, as must any
/// character the next alternative would look at: non-ASCII letters (`é`), numbers (`²`),
/// punctuation (`—`) and whitespace (no-break space) extend the runs above, and `ſ` is an `s` in a
/// contraction.
fn ascii_piece_end(text: &[u8], at: usize) -> Option<usize> {
    let first = *text.get(at)?;
    if first.is_ascii_alphabetic() {
        return letters_end(text, at);
    }
    if first.is_ascii_digit() {
        let digits = text[at..].iter().take(3).take_while(|b| b.is_ascii_digit()).count();
        let end = at + digits;
        return if digits < 3 { ascii_after(text, end).then_some(end) } else { Some(end) };
    }
    if first == b'\r' || first == b'\n' {
        // Not a letter prefix, not punctuation: the newline alternative.
        return whitespace_end(text, at);
    }
    if !first.is_ascii() {
        return None;
    }
    // Any other ASCII character may prefix letters, which comes first.
    match text.get(at + 1) {
        Some(next) if !next.is_ascii() => None,
        Some(next) if next.is_ascii_alphabetic() => letters_end(text, at + 1),
        Some(&next) if first == b' ' && is_punctuation(next) => punctuation_end(text, at + 1),
        _ if is_whitespace(first) => whitespace_end(text, at),
        _ => punctuation_end(text, at),
    }
}

/// `\s` on ASCII: Unicode's White_Space there, which unlike [`u8::is_ascii_whitespace`] has `\x0B`.
fn is_whitespace(byte: u8) -> bool {
    matches!(byte, b'\t' | b'\n' | b'\x0B' | b'\x0C' | b'\r' | b' ')
}

/// `[^\s\p{L}\p{N}]` on ASCII: punctuation, symbols and control characters.
fn is_punctuation(byte: u8) -> bool {
    byte.is_ascii() && !byte.is_ascii_alphanumeric() && !is_whitespace(byte)
}

/// End of the run of bytes from `start` that `is_in_run` accepts.
fn run_end(text: &[u8], start: usize, is_in_run: impl Fn(u8) -> bool) -> usize {
    start + text[start..].iter().take_while(|&&b| is_in_run(b)).count()
}

/// Whether the character at `at` is ASCII or the text ends there: a run that stops at `at` stops
/// there for the regex too.
fn ascii_after(text: &[u8], at: usize) -> bool {
    text.get(at).is_none_or(u8::is_ascii)
}

/// End of the letters piece whose first letter is at `start` (after any prefix): capitals then
/// lower case, else capitals alone, then a contraction if one follows.
fn letters_end(text: &[u8], start: usize) -> Option<usize> {
    let capitals_end = run_end(text, start, |b| b.is_ascii_uppercase());
    if !ascii_after(text, capitals_end) {
        return None;
    }
    let lower_end = run_end(text, capitals_end, |b| b.is_ascii_lowercase());
    if !ascii_after(text, lower_end) {
        return None;
    }
    contraction_end(text, lower_end)
}

/// `end`, or the end of the contraction (`'s 't 're 've 'm 'll 'd`, any case) that starts there.
fn contraction_end(text: &[u8], end: usize) -> Option<usize> {
    if text.get(end) != Some(&b'\'') {
        return Some(end);
    }
    // Case-insensitive in the regex: a non-ASCII character might fold to the letter (`ſ` is `s`).
    let letter = |i: usize| match text.get(end + i) {
        Some(b) if !b.is_ascii() => Err(()),
        b => Ok(b.map(u8::to_ascii_lowercase)),
    };
    let taken = match letter(1) {
        Err(()) => return None,
        Ok(Some(b's' | b't' | b'm' | b'd')) => 2,
        Ok(Some(first @ (b'r' | b'v' | b'l'))) => {
            let second = if first == b'l' { b'l' } else { b'e' };
            match letter(2) {
                Err(()) => return None,
                Ok(Some(b)) if b == second => 3,
                Ok(_) => 0,
            }
        }
        Ok(_) => 0,
    };
    Some(end + taken)
}

/// End of the punctuation piece whose punctuation starts at `start` (after any space): the
/// punctuation run, then any `\r`, `\n` and `/` (which never continue outside ASCII).
fn punctuation_end(text: &[u8], start: usize) -> Option<usize> {
    let end = run_end(text, start, is_punctuation);
    ascii_after(text, end).then(|| run_end(text, end, |b| matches!(b, b'\r' | b'\n' | b'/')))
}

/// End of the whitespace piece at `at` (alternatives 4 to 6 of [`ascii_piece_end`]).
fn whitespace_end(text: &[u8], at: usize) -> Option<usize> {
    let end = run_end(text, at, is_whitespace);
    if !ascii_after(text, end) {
        return None;
    }
    Some(match text[at..end].iter().rposition(|&b| b == b'\r' || b == b'\n') {
        Some(newline) => at + newline + 1,
        None if end == text.len() || end - at == 1 => end,
        None => end - 1,
    })
}

/// Loads the o200k tables now (they load on first use otherwise); false if they cannot load.
pub fn load_encoding() -> bool {
    encoding().is_some()
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
                Some(rank) => out.push(rank),
                None => {
                    bpe.ranks.merge(piece, |token| out.push(bpe.ranks.get(token).expect("merged tokens are tokens")))
                }
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
        let total = bpe.ranks.arena.len();
        assert!(total <= ARENA_BYTES, "{total} bytes of tokens: raise ARENA_BYTES");
        eprintln!("o200k ordinary tokens: {total} bytes");
        assert_eq!(bpe.ranks.len(), O200K_ORDINARY_TOKENS as usize);
        // Every rank is found by its bytes (none lost to a collision in the open addressing).
        for rank in 0..O200K_ORDINARY_TOKENS {
            assert_eq!(bpe.ranks.get(bpe.ranks.token(rank)), Some(rank));
        }
        for rank in (0..O200K_ORDINARY_TOKENS).step_by(97) {
            let back: Vec<u8> = reference()._decode_native_and_split(vec![rank]).flatten().collect();
            assert_eq!(back, bpe.ranks.token(rank));
        }
        // Bytes that are no token: tiktoken itself needs more than one token for each.
        for text in ["qzxqzxqzxqzxqzx", "\u{1F600}\u{1F600}\u{1F600}", "a b c d e f"] {
            assert!(reference().encode_ordinary(text).len() > 1);
            assert_eq!(bpe.ranks.get(text.as_bytes()), None, "{text:?}");
        }
        assert_eq!(bpe.ranks.get(b""), None);
    }

    #[test]
    fn a_table_with_one_token_twice_is_refused() {
        let arena: &'static [u8] = b"abcab";
        assert!(RankTable::new(arena, &[1, 2, 3]).is_some());
        assert!(RankTable::new(arena, &[1, 2, 3, 5]).is_some());
        assert!(RankTable::new(arena, &[1, 2, 3, 4]).is_none(), "\"a\" twice");
        assert!(RankTable::new(arena, &[2, 3, 5]).is_none(), "\"ab\" twice");
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

    /// The ASCII fast path against the regex alone: the pieces of `text` both ways.
    fn pieces_fast_and_by_regex(text: &str) -> (Vec<&str>, Vec<&str>) {
        let bpe = encoding().unwrap();
        let mut fast = Vec::new();
        bpe.for_each_piece(text, |piece| fast.push(piece));
        let mut by_regex = Vec::new();
        bpe.for_each_piece_cut_by(text, |_, _| None, |piece| by_regex.push(piece));
        (fast, by_regex)
    }

    #[test]
    fn ascii_fast_path_cuts_like_the_regex_on_corpus() {
        for text in CORPUS {
            let (fast, by_regex) = pieces_fast_and_by_regex(text);
            assert_eq!(fast, by_regex, "pieces of {text:?}");
        }
        let (fast, by_regex) = pieces_fast_and_by_regex("XMLHttp CamelCase I'M we'LL  \t x\r\n\n  \ny!/\n/ 12345");
        let expected =
            ["XMLHttp", " Camel", "Case", " I'M", " we'LL", "  \t", " x", "\r\n\n  \n", "y", "!/\n/", " ", "123", "45"];
        assert_eq!((&fast[..], &by_regex[..]), (&expected[..], &expected[..]));
    }

    mod ascii_fast_path {
        use super::*;
        use proptest::prelude::*;

        /// Non-ASCII characters next to which the ASCII runs must give way to the regex: letters
        /// (lower, upper, other, modifier, title case), a mark, a number, an emoji, whitespace, and
        /// `ſ`, which is an `s` in a contraction.
        const NON_ASCII: &[char] =
            &['é', 'É', '東', '\u{a0}', '\u{85}', '\u{3000}', '\u{2028}', 'ʰ', 'ǅ', '\u{301}', '²', '👍', '\u{17f}'];

        /// Mostly ASCII, with extra weight on what the fast path's rules turn on: letters of both
        /// cases, contractions, digits, whitespace, punctuation and '/'.
        fn ascii_part() -> impl Strategy<Value = String> {
            prop_oneof![
                3 => prop::char::range('\0', '\x7f').prop_map(String::from),
                3 => prop::char::range('a', 'z').prop_map(String::from),
                2 => prop::char::range('A', 'Z').prop_map(String::from),
                2 => prop::sample::select(&['s', 'S', 't', 'T', 'r', 'R', 'e', 'E', 'v', 'm', 'M', 'l', 'L', 'd', 'D'][..])
                    .prop_map(String::from),
                2 => prop::sample::select(&["'s", "'T", "'re", "'Ve", "'m", "'ll", "'lL", "'LL", "'d", "'", "'l", "'r"][..])
                    .prop_map(String::from),
                2 => prop::char::range('0', '9').prop_map(String::from),
                3 => prop::sample::select(&[' ', ' ', ' ', '\t', '\r', '\n', '\u{b}', '\u{c}'][..]).prop_map(String::from),
                2 => prop::sample::select(&['\'', '.', ',', '!', '?', '/', '/', '-', '(', ')', '"', '#', '`', '\0', '\x7f'][..])
                    .prop_map(String::from),
            ]
        }

        fn mostly_ascii() -> impl Strategy<Value = String> {
            prop::collection::vec(
                prop_oneof![
                    20 => ascii_part(),
                    1 => prop::sample::select(NON_ASCII).prop_map(String::from),
                ],
                0..80,
            )
            .prop_map(|parts| parts.concat())
        }

        fn pure_ascii() -> impl Strategy<Value = String> {
            prop::collection::vec(ascii_part(), 0..200).prop_map(|parts| parts.concat())
        }

        proptest! {
            #[test]
            fn same_pieces_as_the_regex_on_mostly_ascii(text in mostly_ascii()) {
                let (fast, by_regex) = pieces_fast_and_by_regex(&text);
                prop_assert_eq!(fast, by_regex);
            }

            #[test]
            fn same_pieces_as_the_regex_on_ascii(text in pure_ascii()) {
                let (fast, by_regex) = pieces_fast_and_by_regex(&text);
                prop_assert_eq!(fast, by_regex);
            }
        }
    }

    #[test]
    fn long_run_without_spaces_is_fast_enough() {
        let text = "a".repeat(200_000);
        assert!(count_tokens(&text).unwrap() > 0);
    }
}
