//! Aggregates over request records: percentile tables, stall rate and goodput, grouped by route,
//! model or concurrency bucket, over a time window. `tokentap report` and the dashboard's summary
//! endpoint both use this module, so a number on the page and in a report is the same number.
//!
//! Pure: no IO except [`load`], which reads record files.
//!
//! - [`load`]: reads `records.jsonl` and its rotated siblings, keeping the last line per request id
//!   (a record is written again when a browser report joins it).
//! - [`goodput`]: the per-record verdict against the `[slo]` objectives.
//! - [`summary`]: filtering, grouping and the [`Report`] itself.
//! - [`markdown`], [`html`]: renderings of a [`Report`].
//! - [`row`]: the compact list row the dashboard shows per request.

pub mod goodput;
pub mod html;
pub mod load;
pub mod markdown;
pub mod row;
pub mod summary;

pub use goodput::{verdict, Verdict};
pub use load::{load_data_dir, load_files, records_files, LoadedRecords};
pub use row::ListRow;
pub use summary::{build_report, GroupKey, GroupSummary, Report, ReportOptions};

/// The distributions a report shows, in this order. The names are the record's field names.
pub const REPORT_METRICS: [&str; 5] = ["ttft_answer_ms", "time_to_first_paint_ms", "tpot_ms", "output_tps", "e2e_ms"];
