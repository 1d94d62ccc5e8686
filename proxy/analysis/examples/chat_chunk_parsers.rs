//! The Chat Completions chunk parsers side by side, for instruction counts under callgrind:
//!
//! ```sh
//! cargo build --release -p tokentap-analysis --features parser-comparison --example chat_chunk_parsers
//! for p in none fast serde_json sonic_rs; do
//!   valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$p \
//!     target/release/examples/chat_chunk_parsers $p 2>&1 | grep -E "Collected|chunks"
//! done
//! ```
//!
//! `none` builds the corpus and parses nothing: subtract it from the others. The corpus is the
//! analysis benchmark's OpenAI stream (one `chat.completion.chunk` per token) and the same stream
//! as llama.cpp's server sends it (a `reasoning_content` phase first, `timings` on the last chunk).

use std::process::ExitCode;

use tokentap_analysis::parser_comparison::{parse_stream, ChunkParser};

const WORDS: &[&str] = &[
    " the",
    " model",
    " streams",
    " tokens",
    " to",
    " a",
    " browser",
    ",",
    " and",
    " every",
    " gap",
    " between",
    " them",
    " is",
    " time",
    " the",
    " user",
    " waits",
    ".",
    " Latency",
    " matters",
    " \\\"quoted\\\"",
    " caf\u{e9}",
];

const TOKENS: usize = 2_000;
const STREAMS: usize = 10;

fn openai(tokens: usize) -> Vec<String> {
    let head = r#"{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_eb9dce56a8","choices":[{"index":0,"delta":{"#;
    let mut chunks = vec![format!(
        r#"{head}"role":"assistant","content":"","refusal":null}},"logprobs":null,"finish_reason":null}}]}}"#
    )];
    for i in 0..tokens {
        let word = WORDS[i % WORDS.len()];
        chunks.push(format!(r#"{head}"content":"{word}"}},"logprobs":null,"finish_reason":null}}]}}"#));
    }
    chunks.push(r#"{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_eb9dce56a8","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":2000,"total_tokens":2020}}"#.to_string());
    chunks
}

fn llamacpp(tokens: usize) -> Vec<String> {
    let mut chunks = Vec::new();
    for i in 0..tokens {
        let word = WORDS[i % WORDS.len()];
        let field = if i < tokens / 4 { "reasoning_content" } else { "content" };
        chunks.push(format!(
            r#"{{"choices":[{{"finish_reason":null,"index":0,"delta":{{"{field}":"{word}"}}}}],"created":1741570283,"id":"chatcmpl-7Qn2","model":"SmolLM2-135M","system_fingerprint":"b6000-1b2c3d","object":"chat.completion.chunk"}}"#
        ));
    }
    chunks.push(r#"{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1741570283,"id":"chatcmpl-7Qn2","model":"SmolLM2-135M","object":"chat.completion.chunk","usage":{"completion_tokens":2000,"prompt_tokens":20,"total_tokens":2020},"timings":{"prompt_n":20,"prompt_ms":12.5,"predicted_n":2000,"predicted_ms":9000.0}}"#.to_string());
    chunks
}

fn main() -> ExitCode {
    let parser = match std::env::args().nth(1).as_deref() {
        Some("none") => None,
        Some("fast") => Some(ChunkParser::Fast),
        Some("serde_json") => Some(ChunkParser::SerdeJson),
        Some("sonic_rs") => Some(ChunkParser::SonicRs),
        _ => {
            eprintln!("usage: chat_chunk_parsers none|fast|serde_json|sonic_rs");
            return ExitCode::from(2);
        }
    };
    let streams = [openai(TOKENS), llamacpp(TOKENS)];
    let mut chunks = 0;
    let mut answer = 0;
    for stream in &streams {
        let data: Vec<&str> = stream.iter().map(String::as_str).collect();
        chunks += data.len() * STREAMS;
        for _ in 0..STREAMS {
            if let Some(parser) = parser {
                match parse_stream(parser, std::hint::black_box(&data)) {
                    Some(n) => answer += n,
                    None => {
                        eprintln!("{parser:?} refused a chunk");
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
    }
    println!("{chunks} chunks, {answer} answer bytes");
    ExitCode::SUCCESS
}
