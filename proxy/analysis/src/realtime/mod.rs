//! Realtime voice sessions over WebSocket (OpenAI Realtime): RFC 6455 framing ([`frame`]),
//! permessage-deflate ([`deflate`]), the client and server events under GA and beta names
//! ([`event`]), and the session with its responses ([`session`]): user speech on the audio
//! clock mapped to wall time, time to first audio, transcripts, audio against real time, tool
//! calls and interruptions.
//!
//! Everything here runs on the record worker over the bytes the proxy kept with their stamps;
//! the forwarding path never parses. Malformed frames, unknown events and hostile sizes are
//! counted, never fatal, and every buffer is capped in bytes.

pub mod deflate;
pub mod event;
pub mod frame;
pub mod session;

pub use deflate::DeflateParams;
pub use event::{EventKind, RealtimeAudioFormat, RealtimeUsage, ResponseStatus, TurnDetection, TurnDetectionKind};
pub use frame::FrameError;
pub use session::{
    Direction, RealtimeAnalyzer, RealtimeContext, RealtimeLimits, RealtimeResponse, RealtimeSession, RealtimeToolCall,
    ResponseTrigger, SessionEnd, REALTIME_VERSION,
};

#[cfg(test)]
mod tests;
