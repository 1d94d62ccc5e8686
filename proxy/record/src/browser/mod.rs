//! The browser side of a request: reports from the browser probe and the record's `browser`
//! timeline. `join.rs` aligns a report with its record so that every chunk has upstream arrival →
//! handoff → browser arrival → paint; tokentap's ingest decides who may send reports.
//!
//! - `arrival`: when each proxy chunk's text reached the page (by bytes, or by answer characters
//!   when an app server re-encoded the stream) and how a report found its record.
//! - `byte_arrival`: when the page's response bytes arrived, whatever their format.
//! - `checks`: the bounds every reported value passes, and `ReportError`.
//! - `report`: the report schema (`tokentap.probe/1`) and its validation.
//! - `timeline`: the record's `browser` section.
//! - `webrtc_join`: a WebRTC peer connection the page held, joined to the record of the request
//!   that carried its offer: one voice turn per answer, the choppy-audio verdict.
//! - `webrtc_report`: a report's `webrtc` section (a peer connection whose offer the request
//!   carried).

pub mod arrival;
pub mod byte_arrival;
mod checks;
pub mod report;
pub mod timeline;
pub mod webrtc_join;
pub mod webrtc_report;

pub use byte_arrival::ByteArrival;
pub use report::{ProbeReport, ReportError};
pub use timeline::{BrowserRealtimeResponse, BrowserTimeline};
