//! `tokentap-mock`: a mock LLM provider that streams the real wire formats (OpenAI Chat Completions
//! and Responses, Anthropic Messages, Gemini, Ollama NDJSON, OpenAI audio transcription and speech)
//! on a deterministic, absolute schedule, with per-request `x-mock-*` headers for stalls, errors,
//! resets and huge events.
//!
//! It is the only simulated part of tokentap's tests: the official SDKs must parse what it sends.
//!
//! Code map: [`config`] (flags) → `scenario` (per-request plan) → `request` + `conversation` (what
//! the body asks for, tool rounds so far) → `agent` (tool calls or the final answer) → `completion` +
//! `tool_call` (provider-neutral answer) → `formats/*` (wire shapes) → `timeline` + [`schedule`]
//! (when each event goes out) → `body` (one hyper frame per event) → `server` / `control` / `stats` /
//! `tls` (HTTP side). `endpoint` routes a request; `audio/*` answers the audio endpoints (speech to
//! text from a multipart upload, text to speech as PCM or WAV) on the same schedule and body;
//! [`realtime`] speaks the OpenAI Realtime protocol over WebSocket at `/v1/realtime`.
//!
//! **Architecture invariant:** every send time is `arrival + offset`, with offsets computed up front
//! by pure functions; nothing is timed relative to the previous send, and nothing reads the clock to
//! decide *what* to send, so identical requests give identical bytes. The one exception is agent mode,
//! whose ids are unique per response (a process-wide counter), as a tool loop needs.

mod agent;
mod audio;
mod body;
mod completion;
pub mod config;
mod control;
mod conversation;
mod endpoint;
mod formats;
mod random;
pub mod realtime;
mod request;
pub mod scenario;
pub mod schedule;
mod server;
mod shared;
pub mod stats;
mod timeline;
mod tls;
mod tool_call;
pub mod vocabulary;
mod wire;

pub use config::Scenario;
pub use config::{MockConfig, ReasoningField, REQUEST_HEADERS_HELP};
pub use server::{spawn_background, MockServer};
pub use stats::MockStats;
