//! Realtime voice sessions over WebSocket (OpenAI Realtime): RFC 6455 framing ([`frame`]),
//! permessage-deflate ([`deflate`]), the client and server events under GA and beta names
//! ([`event`]), and the session with its responses ([`session`]): user speech on the audio
//! clock mapped to wall time, time to first audio, transcripts, audio against real time, tool
//! calls and interruptions.
//!
//! Everything here runs on the record worker over the bytes the proxy kept with their stamps;
//! the forwarding path never parses. Malformed frames, unknown events and hostile sizes are
//! counted, never fatal, and every buffer is capped in bytes.

mod analyzer;
pub mod deflate;
pub mod event;
pub mod frame;
mod response;
pub mod session;

pub use analyzer::RealtimeAnalyzer;
pub use deflate::DeflateParams;
pub use event::{EventKind, RealtimeAudioFormat, RealtimeUsage, ResponseStatus, TurnDetection, TurnDetectionKind};
pub use frame::FrameError;
pub use session::{
    Direction, RealtimeContext, RealtimeLimits, RealtimeResponse, RealtimeSession, RealtimeToolCall, ResponseTrigger,
    SessionEnd, REALTIME_VERSION,
};

/// Nanoseconds since t0 as milliseconds.
fn ms(t_ns: u64) -> f64 {
    t_ns as f64 / 1e6
}

#[cfg(test)]
mod tests;
