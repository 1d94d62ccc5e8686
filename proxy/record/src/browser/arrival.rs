//! When each proxy chunk's answer text reached the page, and how the report was found for the
//! record.
//!
//! When the page read tokentap's own response (its request is the record's request and it read
//! exactly the bytes tokentap forwarded), a proxy chunk reached the page when the page had read
//! its last byte: **bytes** align. When an app server sits between the page and tokentap, the
//! page reads the app's re-encoding of the answer (its own SSE, the AI SDK UI message stream,
//! compressed or not), so bytes mean nothing on the other side. The probe then reports, per
//! chunk arrival, the answer characters decoded so far, and a proxy chunk reached the page when
//! the page had the answer characters that chunk completed: **answer characters** align. When
//! the body's format is not one the probe knows, the probe infers which JSON string values carry
//! the answer (those whose values change from event to event, not ids, types or timestamps) and
//! counts those: **inferred** characters align, scaled like known ones, and never presented as
//! exact. The alignment's quality is how well the page's total characters agree with the
//! record's (1 when equal).

use serde::{Deserialize, Serialize};

use crate::browser::report::{BrowserChunk, ProbeReport};

/// How browser arrivals were aligned with the record's chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalAlignment {
    /// Cumulative body bytes: the page read tokentap's response itself.
    #[default]
    Bytes,
    /// Cumulative answer characters: the page read another body (an app server's), and the
    /// probe decoded its answer text.
    AnswerChars,
    /// Cumulative answer characters the probe inferred: the page read a format the probe has no
    /// reader for, and it counted the JSON string values (or text) that looked like the answer.
    Inferred,
    /// Neither: the page read another body and the probe could not decode its format. Browser
    /// arrivals are unknown; paints still align by characters.
    None,
}

/// How tokentap found the record a report belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinedBy {
    /// The record's parent span is the probe's span: the page's request went through tokentap.
    #[default]
    ProbeSpan,
    /// The same W3C trace id, another parent: the app server propagated the page's
    /// `traceparent` to its model call.
    Trace,
    /// The app server copied the page's trace id into the explicit page-trace header.
    Header,
    /// No id joined them: the only record whose time and answer text match the report's.
    Inferred,
}

/// What the alignment needs of the record.
pub(crate) struct RecordSide<'r> {
    pub parent_span_id: Option<&'r str>,
    pub path: &'r str,
    pub body_bytes: u64,
}

/// The page's arrivals, ready to be looked up per proxy chunk.
pub(crate) struct Arrivals<'a> {
    chunks: &'a [BrowserChunk],
    pub alignment: ArrivalAlignment,
    /// Browser answer characters per record answer character (the app may reformat the text).
    scale: f64,
    /// The page's request is not the record's request: an app server stands between.
    pub app_server: bool,
    /// How well the page's characters agree with the record's: `min(r, 1/r)` of their ratio `r`
    /// (1 for bytes). `None` without an alignment.
    pub quality: Option<f64>,
}

impl<'a> Arrivals<'a> {
    /// Chooses the alignment for `report` against the record's request (`answer_chars`: the
    /// record's answer characters).
    pub(crate) fn new(record: RecordSide<'_>, report: &'a ProbeReport, answer_chars: u64) -> Self {
        let chunks: &[BrowserChunk] = report.fetch.as_ref().map(|f| f.chunks.as_slice()).unwrap_or(&[]);
        let browser_bytes = chunks.last().map_or(0, |c| c.bytes);
        let same_request = record.parent_span_id == Some(report.span_id.as_str())
            && report.request.as_ref().and_then(|r| r.path.as_deref()).is_none_or(|p| same_path(p, record.path));
        let browser_chars = chunks.iter().rev().find_map(|c| c.chars).unwrap_or(0);
        let inferred = report.fetch.as_ref().is_some_and(|f| f.text_inferred);
        let alignment = if same_request && browser_bytes == record.body_bytes {
            ArrivalAlignment::Bytes
        } else if browser_chars > 0 && answer_chars > 0 && inferred {
            ArrivalAlignment::Inferred
        } else if browser_chars > 0 && answer_chars > 0 {
            ArrivalAlignment::AnswerChars
        } else if same_request {
            // The page stopped reading early (or read more): its bytes are still tokentap's.
            ArrivalAlignment::Bytes
        } else {
            ArrivalAlignment::None
        };
        let scale =
            if answer_chars > 0 && browser_chars > 0 { browser_chars as f64 / answer_chars as f64 } else { 1.0 };
        let quality = match alignment {
            ArrivalAlignment::Bytes => Some(1.0),
            ArrivalAlignment::None => None,
            ArrivalAlignment::AnswerChars | ArrivalAlignment::Inferred => Some(scale.min(1.0 / scale)),
        };
        Arrivals { chunks, alignment, scale, app_server: !same_request, quality }
    }

    /// When the page had the text of the proxy chunk ending at body offset `end`, after which
    /// the answer had `answer_chars` characters (browser clock). `None` when unknown; with
    /// character alignment, also for a chunk that completed no answer text.
    pub(crate) fn of(&self, end: u64, answer_chars: u64, new_text: bool) -> Option<f64> {
        match self.alignment {
            ArrivalAlignment::Bytes => self.chunks.iter().find(|c| c.bytes >= end).map(|c| c.t_ms),
            ArrivalAlignment::AnswerChars | ArrivalAlignment::Inferred if new_text && answer_chars > 0 => {
                let wanted = ((answer_chars as f64) * self.scale).round().max(1.0) as u64;
                self.chunks.iter().find(|c| c.chars.is_some_and(|n| n >= wanted)).map(|c| c.t_ms)
            }
            _ => None,
        }
    }
}

/// The record's path (which may carry a redacted query) names the page's request path.
fn same_path(page: &str, record: &str) -> bool {
    record.split('?').next() == Some(page)
}

/// The header an app server that does not propagate `traceparent` to its model call can set on
/// that call instead: the page's `traceparent` (or just its 32-digit trace id). A probe report
/// for that trace then joins the call's record (`JoinedBy::Header`).
pub const PAGE_TRACE_HEADER: &str = "x-tokentap-page-trace";

/// The page's trace id from a [`PAGE_TRACE_HEADER`] value: a `traceparent`, or a trace id alone.
pub fn page_trace_id(value: &str) -> Option<&str> {
    let value = value.trim();
    let id = match value.split('-').collect::<Vec<_>>().as_slice() {
        [id] => *id,
        [_, id, _, _, ..] => *id,
        _ => return None,
    };
    let hex = id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (hex && id.bytes().any(|b| b != b'0')).then_some(id)
}

/// The page's trace id a record's request named in [`PAGE_TRACE_HEADER`], if any.
pub fn page_trace_of(request_headers: &[(String, String)]) -> Option<&str> {
    request_headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(PAGE_TRACE_HEADER))
        .and_then(|(_, v)| page_trace_id(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_trace_header_takes_a_traceparent_or_a_trace_id() {
        let id = "0af7651916cd43dd8448eb211c80319c";
        assert_eq!(page_trace_id(id), Some(id));
        assert_eq!(page_trace_id(&format!(" 00-{id}-b7ad6b7169203331-01 ")), Some(id));
        for bad in ["", "xyz", "0AF7651916CD43DD8448EB211C80319C", "00000000000000000000000000000000", "00-abc-01"] {
            assert_eq!(page_trace_id(bad), None, "{bad}");
        }
        let headers = vec![("X-Tokentap-Page-Trace".to_string(), id.to_string())];
        assert_eq!(page_trace_of(&headers), Some(id));
    }
}
