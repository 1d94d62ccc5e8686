//! Prompts of an exact o200k_base length from a deterministic built-in corpus.
//!
//! The corpus is a fixed list of common English words, kept only when `" word"` is one o200k
//! token. o200k's pre-tokenizer starts a new piece at every space before a letter, so a run of
//! such words after a header that ends in punctuation is exactly one token per word; the builder
//! still counts the whole prompt and corrects, so the length is exact by construction and by check.
//!
//! - `unique` prompts begin with a nonce (run seed, cell, request index) and draw their words from
//!   a generator seeded with it: two prompts differ from their first tokens, which defeats prefix
//!   caching.
//! - `shared` prompts are one text per prompt length for the whole run (seeded by the run seed
//!   only): every request after the first finds its whole prompt in a prefix cache (warm).

use tokentap_analysis::count_tokens;

/// Candidate words; the ones that are not a single o200k token with a leading space are dropped.
const WORDS: &[&str] = &[
    "time",
    "year",
    "people",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "government",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
    "mother",
    "area",
    "money",
    "story",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "book",
    "eye",
    "job",
    "word",
    "business",
    "issue",
    "side",
    "kind",
    "head",
    "house",
    "service",
    "friend",
    "father",
    "power",
    "hour",
    "game",
    "line",
    "end",
    "member",
    "law",
    "car",
    "city",
    "community",
    "name",
    "president",
    "team",
    "minute",
    "idea",
    "kid",
    "body",
    "information",
    "back",
    "parent",
    "face",
    "others",
    "level",
    "office",
    "door",
    "health",
    "person",
    "art",
    "war",
    "history",
    "party",
    "result",
    "change",
    "morning",
    "reason",
    "research",
    "girl",
    "guy",
    "moment",
    "air",
    "teacher",
    "force",
    "education",
    "river",
    "garden",
    "window",
    "market",
    "music",
    "table",
    "paper",
    "light",
    "stone",
    "field",
    "road",
    "train",
    "letter",
    "picture",
    "bird",
    "tree",
    "sun",
    "moon",
    "star",
    "sea",
    "island",
    "bridge",
    "valley",
    "mountain",
    "forest",
    "winter",
    "summer",
    "spring",
    "autumn",
    "color",
    "sound",
    "voice",
    "horse",
    "dog",
    "cat",
    "fish",
    "bread",
    "milk",
    "coffee",
    "tea",
    "apple",
    "orange",
    "green",
    "blue",
    "red",
    "black",
    "white",
    "small",
    "large",
    "long",
    "short",
    "old",
    "new",
    "young",
    "early",
    "late",
    "quick",
    "slow",
    "bright",
    "dark",
    "warm",
    "cold",
    "quiet",
    "loud",
    "simple",
    "clear",
    "open",
    "close",
    "north",
    "south",
    "east",
    "west",
    "village",
    "church",
    "castle",
    "ship",
    "plane",
    "engine",
    "machine",
    "signal",
    "network",
    "message",
    "answer",
    "token",
    "model",
    "stream",
    "server",
    "client",
    "request",
    "response",
    "memory",
    "record",
    "report",
];

/// A small, fast, seedable generator (SplitMix64): the same seed gives the same words everywhere.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform draw in [0, 1).
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Why a prompt could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PromptError {
    #[error("the o200k_base tokenizer did not load")]
    Tokenizer,
    #[error("a prompt of {wanted} tokens is shorter than its {header} token header")]
    TooShort { wanted: u64, header: u64 },
    #[error("could not reach exactly {wanted} o200k tokens (got {got})")]
    Inexact { wanted: u64, got: u64 },
}

/// Which prompt a request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKey {
    /// The run's one shared prompt of this length.
    Shared,
    /// A prompt of its own: the cell index and the request's index in it (warm-up requests use
    /// cell `u32::MAX`).
    Unique { cell: u32, request: u32 },
}

/// The words of the corpus that are one o200k token each (with a leading space).
fn single_token_words() -> Result<Vec<&'static str>, PromptError> {
    let mut words = Vec::with_capacity(WORDS.len());
    for word in WORDS {
        if count_tokens(&format!(" {word}")).ok_or(PromptError::Tokenizer)? == 1 {
            words.push(*word);
        }
    }
    Ok(words)
}

/// Builds prompts; holds the corpus once.
#[derive(Debug, Clone)]
pub struct PromptBuilder {
    seed: u64,
    words: Vec<&'static str>,
}

impl PromptBuilder {
    pub fn new(seed: u64) -> Result<Self, PromptError> {
        Ok(PromptBuilder { seed, words: single_token_words()? })
    }

    /// The prompt for `key`, exactly `tokens` o200k_base tokens long.
    pub fn build(&self, tokens: u64, key: PromptKey) -> Result<String, PromptError> {
        let (header, word_seed) = match key {
            PromptKey::Shared => (format!("[shared {:016x}] Continue:", self.seed), self.seed),
            PromptKey::Unique { cell, request } => {
                let nonce =
                    self.seed ^ ((u64::from(cell) << 32) | u64::from(request)).wrapping_mul(0x2545_f491_4f6c_dd1d);
                (format!("[{:016x} {cell} {request}] Continue:", self.seed), nonce)
            }
        };
        let header_tokens = count_tokens(&header).ok_or(PromptError::Tokenizer)?;
        if header_tokens > tokens {
            return Err(PromptError::TooShort { wanted: tokens, header: header_tokens });
        }
        let mut rng = SplitMix64::new(word_seed);
        let mut text = header;
        let mut word_count = tokens - header_tokens;
        text.reserve(word_count as usize * 8);
        for _ in 0..word_count {
            self.push_word(&mut text, &mut rng);
        }
        // The count above holds for this corpus; check it, and correct if a tokenizer change
        // ever merged across words.
        for _ in 0..64 {
            let got = count_tokens(&text).ok_or(PromptError::Tokenizer)?;
            match got.cmp(&tokens) {
                std::cmp::Ordering::Equal => return Ok(text),
                std::cmp::Ordering::Less => {
                    self.push_word(&mut text, &mut rng);
                    word_count += 1;
                }
                std::cmp::Ordering::Greater => match text.rfind(' ') {
                    Some(cut) if word_count > 0 => {
                        text.truncate(cut);
                        word_count -= 1;
                    }
                    _ => return Err(PromptError::Inexact { wanted: tokens, got }),
                },
            }
        }
        let got = count_tokens(&text).ok_or(PromptError::Tokenizer)?;
        Err(PromptError::Inexact { wanted: tokens, got })
    }

    fn push_word(&self, text: &mut String, rng: &mut SplitMix64) {
        let word = self.words[(rng.next_u64() % self.words.len() as u64) as usize];
        text.push(' ');
        text.push_str(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_have_the_exact_o200k_length() {
        let builder = PromptBuilder::new(42).unwrap();
        for tokens in [16u64, 17, 64, 100, 512, 1000, 4096] {
            for key in [PromptKey::Shared, PromptKey::Unique { cell: 3, request: 7 }] {
                let text = builder.build(tokens, key).unwrap();
                assert_eq!(count_tokens(&text), Some(tokens), "{tokens} tokens, {key:?}");
            }
        }
    }

    #[test]
    fn the_corpus_is_large_enough() {
        assert!(single_token_words().unwrap().len() >= 150);
    }

    #[test]
    fn unique_prompts_differ_from_the_start_and_shared_ones_are_identical() {
        let builder = PromptBuilder::new(7).unwrap();
        let a = builder.build(256, PromptKey::Unique { cell: 0, request: 0 }).unwrap();
        let b = builder.build(256, PromptKey::Unique { cell: 0, request: 1 }).unwrap();
        let c = builder.build(256, PromptKey::Unique { cell: 1, request: 0 }).unwrap();
        assert_ne!(a, b);
        assert_ne!(a, c);
        // The nonce comes first: the prompts part within the first few characters.
        let common = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
        assert!(common < 24, "{common} common leading bytes");
        assert_eq!(builder.build(256, PromptKey::Shared).unwrap(), builder.build(256, PromptKey::Shared).unwrap());
        // Deterministic across builders with the same seed, different with another.
        assert_eq!(PromptBuilder::new(7).unwrap().build(256, PromptKey::Unique { cell: 0, request: 0 }).unwrap(), a);
        assert_ne!(
            PromptBuilder::new(8).unwrap().build(256, PromptKey::Shared).unwrap(),
            builder.build(256, PromptKey::Shared).unwrap()
        );
    }

    #[test]
    fn a_prompt_shorter_than_its_header_is_refused() {
        let builder = PromptBuilder::new(1).unwrap();
        assert!(matches!(builder.build(3, PromptKey::Shared), Err(PromptError::TooShort { wanted: 3, .. })));
    }
}
