//! The browser side of a request: reports from the browser probe and the record's `browser`
//! timeline. `join.rs` aligns a report with its record so that every chunk has upstream arrival →
//! handoff → browser arrival → paint; tokentap's ingest decides who may send reports.
//!
//! - `arrival`: when each proxy chunk's text reached the page (by bytes, or by answer characters
//!   when an app server re-encoded the stream) and how a report found its record.
//! - `byte_arrival`: when the page's response bytes arrived, whatever their format.
//! - `report`: the report schema (`tokentap.probe/1`) and its validation.
//! - `timeline`: the record's `browser` section.

pub mod arrival;
pub mod byte_arrival;
pub mod report;
pub mod timeline;

pub use byte_arrival::ByteArrival;
pub use report::{ProbeReport, ReportError};
pub use timeline::{BrowserRealtimeResponse, BrowserTimeline};
