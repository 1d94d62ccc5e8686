//! Aggregates over request records: percentile tables, stall rate and goodput, grouped by route,
//! model or concurrency bucket, over a time window. `tokentap report` and the dashboard's summary
//! endpoint both use this module, so a number on the page and in a report is the same number.
//!
//! Pure: no network IO; [`load`] reads record files (the journal).
//!
//! - [`load`]: reads `records.jsonl` and its rotated siblings, keeping the last line per request id
//!   (a record is written again when a browser report joins it).
//! - [`summary`]: filtering, grouping and the [`Report`] itself.
//! - [`markdown`], [`html`]: renderings of a [`Report`].
//! - [`row`]: the compact list row the dashboard shows per request.
//! - [`explain`]: the text `tokentap explain` prints for one record.
//! - [`one_line`]: the one-line summary `tokentap demo` prints per record.
//! - [`mcp`]: MCP operations per method and tool (count, errors, duration percentiles).
//! - [`realtime`]: realtime sessions' responses (time to first audio, heard in the browser).
//! - [`webrtc`]: WebRTC sessions' answers as the page measured them (voice to ear, jitter buffer).
//! - [`turns`]: turn percentiles over `turns.jsonl` and the text `tokentap explain` prints for a turn.

pub mod explain;
pub mod html;
pub mod load;
pub mod markdown;
pub mod mcp;
pub mod one_line;
pub mod realtime;
pub mod row;
pub mod summary;
pub mod turns;
pub mod webrtc;

#[cfg(test)]
mod snapshots;

pub use explain::explain;
pub use load::{for_each_line, journal_files, load_data_dir, load_files, records_files, LoadedRecords};
pub use row::ListRow;
pub use summary::{build_report, GroupKey, GroupSummary, Report, ReportOptions, REPORT_METRICS};
pub use tokentap_record::goodput::{verdict, Verdict};
