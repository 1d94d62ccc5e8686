//! tokentap's browser probe: what happens to a streamed answer after tokentap handed it off.
//!
//! The probe runs in the page (compiled to `wasm32-unknown-unknown`, shipped as an ES module that
//! tokentap serves at `/_tokentap/probe/`). For every tracked streamed `fetch` (a **turn**) it
//! stamps request start, response headers, every body chunk's arrival with cumulative bytes and
//! the end of the stream; it stamps when the observed answer element's text is painted, with
//! cumulative characters; it records marks (`user_send`, …), long animation frames and when audio
//! became audible. When the turn's paints have settled it sends one JSON report
//! (`tokentap.probe/1`) to tokentap, which joins it to the proxy's record of the same trace.
//!
//! Code map:
//! - [`answer_text`]: answer characters in the body the page reads (SSE, NDJSON, the AI SDK's
//!   streams, plain text), counted per chunk arrival when an app server re-encodes the stream.
//! - [`playout`]: one answer's audio playback (heard, ran dry, stopped early).
//! - [`realtime`]: a realtime voice session over a `WebSocket`: each response's events as the page
//!   received them, and its own playback.
//! - [`turn`]: one turn's measurements, their caps, and the set of turns not yet reported
//!   (which turn a paint, mark or long frame belongs to, and when a turn has settled).
//! - [`report`]: the report's JSON, written by hand (no serde: it keeps the wasm small) and thinned
//!   to the body size cap. The schema name, the caps, the enumerated names and the id checks are
//!   `tokentap-probe-protocol`'s, shared with tokentap's ingest (`tokentap-record`), whose tests
//!   parse reports this writer produced.
//! - [`trace`]: W3C trace ids and `traceparent`.
//! - [`clock`]: the browser-to-proxy clock offset from round trips.
//! - `web` (wasm32 only): everything that touches the browser — the `fetch` wrapper, the paint
//!   observer, audio, sending, and the exported JS API.
//!
//! Architecture invariant: only `web` knows about the browser. Everything else is plain Rust that
//! builds and is unit-tested on the native target.
//!
//! All times are wall-clock milliseconds since the Unix epoch as the browser sees them
//! (`performance.timeOrigin + performance.now()`), so they compare directly with tokentap's
//! records on the same machine; across machines the report carries the clock offset estimate.

pub mod answer_text;
pub mod clock;
pub mod playout;
pub mod realtime;
pub mod report;
pub mod trace;
pub mod turn;
pub mod webrtc;

/// The browser side and the exported JS API (wasm32 only; see README.md for its use).
#[cfg(target_arch = "wasm32")]
pub mod web;
