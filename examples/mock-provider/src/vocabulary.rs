//! The words the mock "generates". Each token is one common English word with a leading space, which
//! the o200k and cl100k tokenizers encode as a single token, so token counts are predictable.
//! The words depend only on the seed, so a test can compute the expected text with [`answer_text`].

use crate::random::SplitMix64;

/// Common words that are single tokens (with a leading space) in the OpenAI tokenizers.
pub const VOCABULARY: [&str; 64] = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not", "this",
    "are", "or", "from", "at", "which", "but", "have", "an", "they", "you", "were", "there", "would", "their", "we",
    "been", "has", "when", "who", "will", "more", "if", "out", "so", "what", "up", "about", "into", "than", "them",
    "can", "only", "other", "new", "some", "could", "time", "these", "two", "may", "then", "do", "first", "any",
    "like", "now", "over",
];

/// Which stream of words: reasoning and answer differ for the same seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WordStream {
    /// The answer text.
    Answer,
    /// The reasoning ("thinking") text.
    Reasoning,
    /// Values inside generated tool arguments.
    ToolArguments,
}

/// `count` tokens, each `" word"`.
pub fn tokens(seed: u64, stream: WordStream, count: u32) -> Vec<String> {
    let tag = match stream {
        WordStream::Answer => 0x616e_7377_6572,    // "answer"
        WordStream::Reasoning => 0x7265_6173_6f6e, // "reason"
        WordStream::ToolArguments => 0x746f_6f6c,  // "tool"
    };
    let mut rng = SplitMix64::new(seed ^ tag);
    (0..count).map(|_| format!(" {}", VOCABULARY[rng.below(VOCABULARY.len())])).collect()
}

/// The full answer text the mock streams for `seed` and `count` tokens.
pub fn answer_text(seed: u64, count: u32) -> String {
    tokens(seed, WordStream::Answer, count).concat()
}

/// The full reasoning text the mock streams for `seed` and `count` tokens.
pub fn reasoning_text(seed: u64, count: u32) -> String {
    tokens(seed, WordStream::Reasoning, count).concat()
}

/// Groups tokens into content events of `per_chunk` tokens each.
pub(crate) fn chunks(tokens: &[String], per_chunk: u32) -> Vec<String> {
    tokens.chunks(per_chunk.max(1) as usize).map(<[String]>::concat).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_distinct_streams() {
        assert_eq!(answer_text(1, 10), answer_text(1, 10));
        assert_ne!(answer_text(1, 10), reasoning_text(1, 10));
        assert_eq!(tokens(3, WordStream::Answer, 5).len(), 5);
        assert!(tokens(3, WordStream::Answer, 5).iter().all(|t| t.starts_with(' ')));
    }

    #[test]
    fn chunking_keeps_text() {
        let t = tokens(0, WordStream::Answer, 7);
        let c = chunks(&t, 3);
        assert_eq!(c.len(), 3);
        assert_eq!(c.concat(), t.concat());
    }
}
