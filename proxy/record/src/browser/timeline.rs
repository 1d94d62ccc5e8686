//! The record's `browser` section: the browser's view of one request, joined from a probe report
//! (`join.rs` computes it).

use serde::{Deserialize, Serialize};
use tokentap_analysis::Distribution;

pub use crate::browser::arrival::{ArrivalAlignment, JoinedBy};
pub use crate::browser::byte_arrival::ByteArrival;
pub use crate::browser::report::{TextFormat, Transport};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrowserClock {
    /// Estimated tokentap clock − browser clock.
    pub offset_ms: f64,
    /// Every cross-clock value below is uncertain by this much.
    pub uncertainty_ms: f64,
    pub samples: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrowserMark {
    pub name: String,
    pub t_ms: f64,
}

/// Per proxy chunk (same index as `timeline.chunks`): when the page had it, when it was painted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BrowserChunkJoin {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_browser_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_paint_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrowserLongFrame {
    pub start_ms: f64,
    pub duration_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocking_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrowserAudio {
    pub kind: String,
    /// When the first sound left the output (ms since t0, tokentap's clock).
    pub audible_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_latency_ms: Option<f64>,
    /// When the playback ended or was stopped, when the page knew it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<f64>,
    /// Times the page's playback ran dry (observed, not predicted), and for how long in total.
    #[serde(default)]
    pub underruns: u64,
    #[serde(default)]
    pub starved_ms: f64,
    /// Stopped before its end (barge-in).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_audio_ms: Option<f64>,
}

/// The browser's part of a request, on tokentap's timeline (ms since t0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrowserTimeline {
    pub probe_span_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_path: Option<String>,
    /// Absent when the page could not estimate the clock offset (times then assume offset 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<BrowserClock>,
    pub marks: Vec<BrowserMark>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_start_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_end_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_paint_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_paint_ms: Option<f64>,
    /// From `user_send` (or, without that mark, from the fetch start) to the first painted answer text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_first_paint_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_first_paint_from: Option<String>,
    /// Per chunk: browser arrival − handoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_delay_ms: Option<Distribution>,
    /// Per answer event: paint − browser arrival.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub render_delay_ms: Option<Distribution>,
    pub chunks: Vec<BrowserChunkJoin>,
    pub long_frames: Vec<BrowserLongFrame>,
    pub audio: Vec<BrowserAudio>,
    /// Body bytes the page read.
    pub browser_bytes: u64,
    /// True when the page read exactly the bytes tokentap forwarded.
    pub bytes_match: bool,
    /// How `chunks[].t_browser_ms` were aligned: by bytes, by answer characters, or not at all.
    #[serde(default)]
    pub alignment: ArrivalAlignment,
    /// How well the page's answer characters agree with the record's (`min(r, 1/r)` of their
    /// ratio; 1 for bytes). Absent without an alignment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alignment_quality: Option<f64>,
    /// Every read of the page's response body, summarised, whatever its format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub byte_arrival: Option<ByteArrival>,
    /// How the report found this record.
    #[serde(default)]
    pub joined_by: JoinedBy,
    /// The page's request was not this record's request: an app server stood between the page
    /// and tokentap (its model call is this record).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub app_server: bool,
    /// The body format the probe decoded answer characters from, and their final count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_format: Option<TextFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser_chars: Option<u64>,
    /// The page's response's `Content-Encoding` and `Via`, as the page read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// The page's response's `Server`, as the page read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// How the page received the stream (`fetch`, `event_source`, `websocket`); absent for
    /// reports that did not say (`fetch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<Transport>,
    pub painted_chars: u64,
    pub answer_chars: u64,
    pub chunks_dropped: u64,
    pub paints_dropped: u64,
    #[serde(default)]
    pub marks_dropped: u64,
    #[serde(default)]
    pub long_frames_dropped: u64,
    /// A realtime session's responses as the page saw and played them (same order as
    /// `realtime.responses` of the record; a response the page never saw is absent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub realtime: Vec<BrowserRealtimeResponse>,
    /// A WebRTC peer connection whose offer this request carried: its voice turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webrtc: Option<super::webrtc_join::BrowserWebrtc>,
}

/// One realtime response in the page, on tokentap's timeline (ms since t0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrowserRealtimeResponse {
    pub response_id: String,
    /// Its index in the record's `realtime.responses`.
    pub index: usize,
    /// `response.created` / the first audio delta / `response.done` arrived in the page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_audio_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_ms: Option<f64>,
    /// First audio delta: in the page − handed to the client by tokentap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_audio_delivery_ms: Option<f64>,
    /// The page's playback of the response's audio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub playout: Option<BrowserAudio>,
    /// When its first sound was heard (the playback's first sample leaving the output device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heard_ms: Option<f64>,
    /// Heard − the first audio delta's arrival at tokentap (delivery, decoding, the app's
    /// scheduling, the output device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heard_after_first_audio_ms: Option<f64>,
    /// Heard − the arrival of `speech_stopped` at tokentap (the server's end-of-turn decision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_heard_from_speech_stopped_ms: Option<f64>,
    /// Heard − the estimated true end of speech: the user's whole wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voice_to_voice_ms: Option<f64>,
}
