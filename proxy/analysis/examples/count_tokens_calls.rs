//! `count_tokens` on a short English answer, called N times after the encoding is loaded: the
//! instructions per call are the difference of two callgrind runs with N and 2N calls divided by N
//! (loading o200k costs far more than the calls, and is the same in both runs). A second argument
//! names a file whose text is counted instead.
//!
//! ```text
//! cargo build --release -p tokentap-analysis --example count_tokens_calls
//! for n in 1000 2000; do valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \
//!   target/release/examples/count_tokens_calls $n 2>&1 | grep Collected; done
//! ```

use std::hint::black_box;

/// About 250 bytes of an ordinary English answer: words, a contraction, digits, punctuation.
const ANSWER: &str = "Sure! The quickest way to check your Rust version is to run `rustc --version` in a \
terminal. If it's older than 1.88, update it with rustup, which takes about 2 minutes. You'll then \
be able to build the project, run its 340 tests, and try the examples.";

fn main() {
    let calls: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(1000);
    let text = match std::env::args().nth(2) {
        Some(path) => std::fs::read_to_string(path).expect("a readable UTF-8 file"),
        None => ANSWER.to_owned(),
    };
    assert!(tokentap_analysis::load_encoding(), "o200k failed to load");
    let mut tokens = 0;
    for _ in 0..calls {
        tokens += black_box(tokentap_analysis::count_tokens(black_box(&text))).unwrap_or(0);
    }
    println!("{} bytes, {} tokens a call, {calls} calls", text.len(), tokens / calls as u64);
}
