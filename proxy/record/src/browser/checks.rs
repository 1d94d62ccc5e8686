//! The checks a report's values pass (times, durations, counts, names), and the error that
//! refuses a report.

use tokentap_probe_protocol::caps::{MAX_HEADER_VALUE_LEN, MAX_NAME_LEN};
use tokentap_probe_protocol::SCHEMA;

/// Largest browser time accepted (ms since the Unix epoch, about the year 2286).
pub const MAX_TIME_MS: f64 = 1e13;
/// All browser times of one report lie within this span (one hour), and every duration is at most it.
pub const MAX_SPAN_MS: f64 = 3_600_000.0;
/// Largest clock offset accepted (± one year) between the browser's clock and tokentap's.
pub const MAX_CLOCK_OFFSET_MS: f64 = 365.0 * 86_400_000.0;
/// Largest count accepted (bytes, characters, dropped entries, clock samples).
pub const MAX_COUNT: u64 = 1 << 40;
/// Longest `page_path` and `request.path`.
pub const MAX_PATH_LEN: usize = 2048;

/// Why a report was refused; the message goes back to the sender.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ReportError {
    #[error("report is not valid JSON for schema {SCHEMA}: {0}")]
    Malformed(String),
    #[error("unsupported schema {0:?}; expected {SCHEMA:?}")]
    Schema(String),
    #[error("{field} is invalid: {reason}")]
    Invalid { field: &'static str, reason: String },
}

pub(super) fn invalid(field: &'static str, reason: impl Into<String>) -> ReportError {
    ReportError::Invalid { field, reason: reason.into() }
}

/// A browser time: finite, non-negative and at most [`MAX_TIME_MS`].
pub(super) fn time(field: &'static str, v: f64) -> Result<f64, ReportError> {
    if v.is_finite() && (0.0..=MAX_TIME_MS).contains(&v) {
        Ok(v)
    } else {
        Err(invalid(field, format!("{v} is not a time between 0 and {MAX_TIME_MS} ms")))
    }
}

/// A duration: finite, non-negative and at most [`MAX_SPAN_MS`].
pub(super) fn duration(field: &'static str, v: f64) -> Result<(), ReportError> {
    if v.is_finite() && (0.0..=MAX_SPAN_MS).contains(&v) {
        Ok(())
    } else {
        Err(invalid(field, format!("{v} is not a duration between 0 and {MAX_SPAN_MS} ms")))
    }
}

pub(super) fn count(field: &'static str, v: u64) -> Result<(), ReportError> {
    if v <= MAX_COUNT {
        Ok(())
    } else {
        Err(invalid(field, format!("{v} is larger than {MAX_COUNT}")))
    }
}

pub(super) fn name(field: &'static str, v: &str) -> Result<(), ReportError> {
    if v.is_empty() || v.len() > MAX_NAME_LEN || v.chars().any(char::is_control) {
        Err(invalid(field, format!("1 to {MAX_NAME_LEN} bytes without control characters")))
    } else {
        Ok(())
    }
}

/// A response header value the page read: 1 to [`MAX_HEADER_VALUE_LEN`] printable ASCII bytes.
pub(super) fn header_value(field: &'static str, v: &str) -> Result<(), ReportError> {
    if v.is_empty() || v.len() > MAX_HEADER_VALUE_LEN || !v.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        Err(invalid(field, format!("1 to {MAX_HEADER_VALUE_LEN} printable ASCII bytes")))
    } else {
        Ok(())
    }
}

/// The earliest and latest browser time seen, to bound the report's span.
#[derive(Default)]
pub(super) struct Span(Option<(f64, f64)>);

impl Span {
    pub(super) fn time(&mut self, field: &'static str, v: f64) -> Result<(), ReportError> {
        let v = time(field, v)?;
        let (lo, hi) = self.0.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v)));
        if hi - lo > MAX_SPAN_MS {
            return Err(invalid(field, format!("{v} is more than {MAX_SPAN_MS} ms from the report's other times")));
        }
        self.0 = Some((lo, hi));
        Ok(())
    }
}
