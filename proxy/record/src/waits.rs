//! Where each answer chunk's text waited on its way to the screen, once a browser report joined:
//! **upstream** (the provider: the gap since the previous answer chunk reached tokentap, or since
//! the request went upstream), **tokentap** (upstream arrival → handoff), **after the handoff**
//! (handoff → browser arrival: the app server when one stands between the page and tokentap, else
//! the network and any proxy) and **the browser** (arrival → paint).
//!
//! A constant wait is latency, so each segment's **hold** is its wait minus that segment's
//! smallest wait over the chunks (as for hops, `hops.rs`). A chunk's text **waited in** the
//! segment with the largest hold, when that hold reaches [`HOLD_MS`] (plus the clock estimate's
//! uncertainty on the segment that crosses clocks). The types are in `hops.rs`.

use tokentap_analysis::{Distribution, EventClass};

use crate::hops::HOLD_MS;
pub use crate::hops::{ChunkWait, Segment, SegmentShare, Waits, MAX_LISTED_CHUNKS};
use crate::schema::Record;

/// Reads one segment's wait of a chunk.
type WaitOf = fn(&ChunkWait) -> Option<f64>;

/// Every answer chunk's waits, in chunk order (needs `record.browser`; `None` without answer text).
pub fn chunk_waits(record: &Record) -> Option<(Segment, Vec<ChunkWait>)> {
    let browser = record.browser.as_ref()?;
    let analysis = record.analysis.as_ref()?;
    let after = if browser.app_server { Segment::AppServer } else { Segment::BetweenProxyAndBrowser };
    let mut answer_ends = analysis.events.iter().filter(|e| e.class == EventClass::Answer && e.chars > 0).peekable();
    let mut previous_up = record.timeline.t_upstream_sent_ns.map(|t| t as f64 / 1e6);
    let mut rows = Vec::new();
    let mut chars = 0;
    for (k, chunk) in record.timeline.chunks.iter().enumerate() {
        let end = chunk.offset + u64::from(chunk.len);
        let mut completed = false;
        while let Some(e) = answer_ends.next_if(|e| e.end_offset <= end) {
            chars = e.answer_chars_cum;
            completed = true;
        }
        if !completed {
            continue;
        }
        let up = chunk.t_up_ns as f64 / 1e6;
        let handoff = chunk.t_handoff_ns.map(|t| t as f64 / 1e6);
        let page = browser.chunks.get(k);
        let arrival = page.and_then(|p| p.t_browser_ms);
        let paint = page.and_then(|p| p.t_paint_ms);
        rows.push(ChunkWait {
            chunk: k as u32,
            answer_chars: chars,
            upstream_ms: previous_up.map_or(up, |p| up - p),
            tokentap_ms: handoff.map(|h| h - up),
            after_handoff_ms: handoff.zip(arrival).map(|(h, a)| a - h),
            browser_ms: arrival.zip(paint).map(|(a, p)| p - a),
            waited_in: None,
        });
        previous_up = Some(up);
    }
    if rows.is_empty() {
        return None;
    }
    let uncertainty = browser.clock.as_ref().map_or(0.0, |c| c.uncertainty_ms);
    let segments: [(Segment, WaitOf, f64); 4] = [
        (Segment::Upstream, |w| Some(w.upstream_ms), HOLD_MS),
        (Segment::Tokentap, |w| w.tokentap_ms, HOLD_MS),
        (after, |w| w.after_handoff_ms, HOLD_MS + uncertainty),
        (Segment::Browser, |w| w.browser_ms, HOLD_MS),
    ];
    let baselines: Vec<f64> =
        segments.iter().map(|(_, get, _)| rows.iter().filter_map(get).fold(f64::INFINITY, f64::min)).collect();
    for row in &mut rows {
        let mut best: Option<(Segment, f64)> = None;
        for ((segment, get, threshold), baseline) in segments.iter().zip(&baselines) {
            let Some(hold) = get(row).map(|v| v - baseline) else { continue };
            if hold >= *threshold && best.is_none_or(|(_, b)| hold > b) {
                best = Some((*segment, hold));
            }
        }
        row.waited_in = best.map(|(s, _)| s);
    }
    Some((after, rows))
}

/// The summary the diagnosis carries.
pub fn waits(record: &Record) -> Option<Waits> {
    let (after, rows) = chunk_waits(record)?;
    let dist = |get: fn(&ChunkWait) -> Option<f64>| {
        Distribution::from_samples(&rows.iter().filter_map(get).collect::<Vec<_>>())
    };
    let mut waited: Vec<SegmentShare> = Vec::new();
    let mut previous_chars = 0;
    for row in &rows {
        let chars = row.answer_chars - previous_chars;
        previous_chars = row.answer_chars;
        let Some(segment) = row.waited_in else { continue };
        match waited.iter_mut().find(|s| s.segment == segment) {
            Some(s) => {
                s.chunks += 1;
                s.chars += chars;
            }
            None => waited.push(SegmentShare { segment, chunks: 1, chars }),
        }
    }
    let listed: Vec<ChunkWait> = rows.iter().filter(|r| r.waited_in.is_some()).cloned().collect();
    let chunks_not_listed = listed.len().saturating_sub(MAX_LISTED_CHUNKS) as u64;
    Some(Waits {
        after_handoff: after,
        upstream_ms: dist(|w| Some(w.upstream_ms))?,
        tokentap_ms: dist(|w| w.tokentap_ms),
        after_handoff_ms: dist(|w| w.after_handoff_ms),
        browser_ms: dist(|w| w.browser_ms),
        waited,
        chunks: listed.into_iter().take(MAX_LISTED_CHUNKS).collect(),
        chunks_not_listed,
    })
}
