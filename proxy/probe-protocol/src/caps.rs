//! The caps of a report: the probe keeps at most this much (and counts what it drops); the
//! ingest refuses a report with more.

/// Largest report body the probe sends (tokentap's `[probe] max_report_bytes` defaults to it).
pub const MAX_REPORT_BYTES: usize = 256 * 1024;
/// Chunk arrivals per report.
pub const MAX_CHUNKS: usize = 5000;
/// Paints per report.
pub const MAX_PAINTS: usize = 5000;
/// Marks (`user_send`, …) per report.
pub const MAX_MARKS: usize = 64;
/// Long animation frames per report.
pub const MAX_LONG_FRAMES: usize = 256;
/// Audio playbacks per report.
pub const MAX_AUDIO: usize = 16;
/// Longest mark name, `request.method` and `audio[].kind` (bytes).
pub const MAX_NAME_LEN: usize = 64;
/// Longest `fetch.content_encoding` and `fetch.via` (bytes, printable ASCII).
pub const MAX_HEADER_VALUE_LEN: usize = 128;
/// Realtime responses per report.
pub const MAX_REALTIME_RESPONSES: usize = 256;
/// Longest realtime `session_id` and `response_id` (bytes).
pub const MAX_ID_LEN: usize = 128;
/// Answers (audible stretches of received audio) and stretches of the user's speech per peer
/// connection, each.
pub const MAX_WEBRTC_ANSWERS: usize = 256;
/// Data channel events kept with their time per peer connection (a name is at most
/// [`MAX_NAME_LEN`] bytes).
pub const MAX_WEBRTC_EVENTS: usize = 512;
/// Other data channel event names counted per peer connection.
pub const MAX_WEBRTC_EVENT_NAMES: usize = 64;
