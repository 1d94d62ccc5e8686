//! tokentap's analysis core: it turns the bytes of one upstream response (as they arrived, chunk by
//! chunk, with their arrival times) into the numbers that explain where a user's wait went: time to
//! first token per class, inter-token gaps, tokens per second, stalls, provider usage.
//!
//! Code map:
//! - [`sse`] and [`ndjson`]: incremental framers. They never hold more than one bounded event.
//! - `format`: decides framing (SSE, NDJSON, whole JSON, audio, binary) and the provider dialect.
//! - `classify/*`: one module per provider dialect that maps a frame to event classes.
//! - `timeline`: per-event bookkeeping (first stamps, gaps, stalls, the capped event list).
//! - `metrics`, [`distribution`], `tokens`: the arithmetic of docs/metrics.md.
//! - `analyzer`: the public [`StreamAnalyzer`] gluing the above together.
//! - `request`: [`analyze_request`], the request-side facts (model, stream flag, prompt size).
//! - [`server_timing`]: what inference servers report about their own time (queue, prefill,
//!   decode), from the body (llama.cpp, Ollama, Groq, Cerebras) and from response headers (TGI,
//!   OpenAI).
//! - [`audio`]: speech audio (formats, WAV, the onset rule, predicted playout) and the
//!   speech-to-text and text-to-speech analyzers.
//! - [`realtime`]: realtime voice sessions over WebSocket (frames, permessage-deflate, OpenAI
//!   Realtime events, the session and its responses).
//! - [`names`]: `named_enum!`, one name per enum variant for serde and `as_str`.
//! - [`mcp`]: MCP exchanges over Streamable HTTP (JSON-RPC in both directions, JSON or SSE
//!   answers, batches): operations paired by id with their start, first progress and end.
//! - [`conversation`]: what a request's conversation looks like for linking agent steps (last
//!   input, tool results, keyed prefix hashes).
//!
//! **Architecture invariant:** this crate does no IO, no networking and no telemetry export; it is
//! plain functions over bytes and nanosecond stamps so that it builds and tests in seconds and can be
//! fuzzed. The proxy owns clocks and sockets and hands stamps in.
//!
//! **Architecture invariant:** the output never contains request or response text, only counts,
//! timings, identifiers, tool names and error messages.

mod analysis;
mod analyzer;
pub mod audio;
mod classify;
#[cfg(feature = "parser-comparison")]
#[doc(hidden)]
pub use classify::parser_comparison;
pub mod conversation;
pub mod distribution;
mod event;
mod findings;
mod format;
pub mod mcp;
mod metrics;
pub mod names;
pub mod ndjson;
pub mod realtime;
mod request;
pub mod server_timing;
pub mod sse;
mod timeline;
mod tokens;

pub use analysis::{
    AnalysisFlags, EventStamp, OutputTokens, ProviderUsage, Stall, StallSummary, StreamAnalysis, StreamError,
    StreamMetrics, ToolCallSummary,
};
pub use analyzer::{AnalysisLimits, RequestTiming, StreamAnalyzer, StreamContext};
pub use conversation::LastInput;
pub use distribution::{percentile, Distribution};
pub use event::{EventClass, EventCounts};
pub use format::{is_event_stream_type, Dialect, StreamFormat};
pub use request::{analyze_request, RequestInfo, SpeechRequest, TranscriptionRequest, SPEECH_TO_TEXT, TEXT_TO_SPEECH};
pub use server_timing::{ServerMark, ServerTiming, ServerTimingSource};
pub use tokens::{count_tokens, load_encoding};
