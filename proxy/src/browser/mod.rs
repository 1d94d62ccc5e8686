//! The browser side of a request: reports from the browser probe, checked at ingest and joined
//! to the request's record so that every chunk has upstream arrival → handoff → browser arrival →
//! paint.
//!
//! - `report`: the report schema (`tokentap.probe/1`) and its validation.
//! - `ingest`: who may send reports (origins, recent trace ids, a per-client rate limit).
//! - `join`: pure arithmetic from a record and a report to a [`BrowserTimeline`].

pub mod ingest;
pub mod join;
pub mod report;

pub use join::{join, BrowserTimeline};
pub use report::{ProbeReport, ReportError};
