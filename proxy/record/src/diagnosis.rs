//! Hop diagnosis: pure arithmetic over one record (or an ingress/egress chain) that fills the
//! record's `diagnosis` (`hops.rs` holds the types and thresholds).

use tokentap_analysis::{Distribution, EventClass};

use crate::hops::*;
use crate::schema::Record;
use crate::stamp::ChunkStamp;

/// One answer event placed in its chunk, with its time at every hop (ms since t0), indexed by
/// [`Hop::slot`].
struct Aligned {
    chars: u64,
    /// Cumulative answer characters up to and including this event (the alignment key).
    cum: u64,
    t_up: f64,
    at: [Option<f64>; 6],
    /// The latest moment the client certainly had not acknowledged the chunk yet (see
    /// [`certain_ack_wait`]).
    ack_not_before: Option<f64>,
}

/// ACK times are sampled (`ack.rs`): a chunk's `t_acked` is the first reading that saw it
/// acknowledged, so the real ACK lies between the reading before it and `t_acked`. The record
/// keeps that reading before as `t_ack_after_ns`, and holds at the ACK hop are measured to it:
/// only the wait that is certain counts. Records written before it was kept read every handoff:
/// there the reading before is the last handoff before `t_acked`, or one poll interval earlier
/// once the tail is being polled.
fn certain_ack_wait(chunks: &[ChunkStamp], k: usize) -> Option<f64> {
    let acked = chunks[k].t_acked_ns?;
    if let Some(after) = chunks[k].t_ack_after_ns {
        return Some(after.min(acked) as f64 / 1e6);
    }
    let before = chunks[k..].iter().filter_map(|c| c.t_handoff_ns).take_while(|&h| h < acked).last();
    let last_handoff = chunks.iter().rev().find_map(|c| c.t_handoff_ns);
    let not_before = match (before, last_handoff) {
        // Seen in the tail, which is polled every ACK_POLL after the last write.
        (Some(b), Some(last)) if b == last => b.max(acked.saturating_sub(crate::ack::ACK_POLL.as_nanos() as u64)),
        (Some(b), _) => b,
        (None, _) => acked,
    };
    Some(not_before as f64 / 1e6)
}

/// The record's answer events, each placed in its chunk. `None` without answer text.
fn align(record: &Record) -> Option<Vec<Aligned>> {
    let analysis = record.analysis.as_ref()?;
    if analysis.events.iter().all(|e| e.class != EventClass::Answer || e.chars == 0) {
        return None;
    }
    let chunks = &record.timeline.chunks;
    let browser = record.browser.as_ref();
    let mut aligned = Vec::with_capacity(analysis.events.len());
    let mut cursor = 0;
    for e in analysis.events.iter().filter(|e| e.class == EventClass::Answer && e.chars > 0) {
        while cursor < chunks.len() && chunks[cursor].offset + u64::from(chunks[cursor].len) < e.end_offset {
            cursor += 1;
        }
        let Some(chunk) = chunks.get(cursor) else { break };
        let page = browser.and_then(|b| b.chunks.get(cursor));
        let mut at = [None; 6];
        at[Hop::Handoff.slot()] = chunk.t_handoff_ns.map(|t| t as f64 / 1e6);
        at[Hop::ClientAck.slot()] = chunk.t_acked_ns.map(|t| t as f64 / 1e6);
        at[Hop::BrowserArrival.slot()] = page.and_then(|p| p.t_browser_ms);
        at[Hop::Paint.slot()] = page.and_then(|p| p.t_paint_ms);
        aligned.push(Aligned {
            chars: e.chars,
            cum: e.answer_chars_cum,
            t_up: chunk.t_up_ns as f64 / 1e6,
            at,
            ack_not_before: certain_ack_wait(chunks, cursor),
        });
    }
    Some(aligned)
}

/// Diagnoses a record. `None` when the response carried no answer text (errors, tool calls
/// only, no response).
pub fn diagnose(record: &Record) -> Option<Diagnosis> {
    let aligned = align(record)?;
    Some(judge(record, aligned, &Hop::ALL, None))
}

/// Diagnoses a chain: `ingress` (browser → tokentap → app) joined with `egress` (app → tokentap →
/// provider) of the same user turn. The ingress record's answer events are aligned with the
/// egress record's by cumulative answer characters: each ingress event takes the times of the
/// egress event that completed the same text. Upstream arrival is then the provider's (egress
/// `t_up`), and the hops run egress handoff → app (ingress `t_up`) → handoff → client ACK →
/// browser arrival → paint, all on the ingress record's t0 (both records come from one
/// tokentap, so their t0 wall clocks differ by the time between the two requests). `None` when
/// either record has no answer text.
pub fn diagnose_chain(ingress: &Record, egress: &Record) -> Option<Diagnosis> {
    let rows = align(ingress)?;
    let upstream = align(egress)?;
    let offset_ms = (i128::from(egress.timeline.t0_unix_ns) - i128::from(ingress.timeline.t0_unix_ns)) as f64 / 1e6;
    let mut aligned = Vec::with_capacity(rows.len());
    let mut cursor = 0;
    for mut row in rows {
        while cursor < upstream.len() && upstream[cursor].cum < row.cum {
            cursor += 1;
        }
        // Text the app added beyond the provider's has no upstream time: left out.
        let Some(source) = upstream.get(cursor) else { break };
        row.at[Hop::App.slot()] = Some(row.t_up);
        row.at[Hop::EgressHandoff.slot()] = source.at[Hop::Handoff.slot()].map(|t| t + offset_ms);
        row.t_up = source.t_up + offset_ms;
        aligned.push(row);
    }
    Some(judge(ingress, aligned, &Hop::CHAIN, Some(egress)))
}

/// Per-hop delays and the verdict over aligned events, for the given hops in order.
fn judge(record: &Record, aligned: Vec<Aligned>, order: &[Hop], egress: Option<&Record>) -> Diagnosis {
    let browser = record.browser.as_ref();
    let uncertainty = browser.and_then(|b| b.clock.as_ref()).map(|c| c.uncertainty_ms).unwrap_or(0.0);
    let long_frames: Vec<(f64, f64)> = browser
        .map(|b| b.long_frames.iter().map(|f| (f.start_ms, f.start_ms + f.duration_ms)).collect())
        .unwrap_or_default();
    let mut unobserved = Vec::new();
    let mut hops = Vec::new();
    for &hop in order {
        let index = hop.slot();
        if aligned.iter().all(|a| a.at[index].is_none()) {
            let reason = match (hop, egress) {
                (Hop::EgressHandoff, Some(e)) => format!("no handoff stamps in the egress record {}", e.request_id),
                (Hop::App, _) => "no arrival stamps in the ingress record".into(),
                _ => unobserved_reason(record, hop),
            };
            unobserved.push(Unobserved { hop, reason });
            continue;
        }
        // The browser arrival is the one hop whose previous hop is on the other clock.
        let threshold = if hop == Hop::BrowserArrival { HOLD_MS + uncertainty } else { HOLD_MS };
        let frames: &[(f64, f64)] = if matches!(hop, Hop::BrowserArrival | Hop::Paint) { &long_frames } else { &[] };
        hops.push(hop_delay(hop, index, &aligned, threshold, frames));
    }

    let answer_chars: u64 = aligned.iter().map(|a| a.chars).sum();
    let backlog = record
        .timeline
        .client_delivery
        .as_ref()
        .filter(|d| d.available || d.backlog_max_bytes > 0)
        .map(|d| d.backlog_max_bytes);
    let (kind, hop, verdict, evidence) = verdict(&aligned, &hops, &unobserved, backlog, browser);
    let waits = browser.and_then(|_| crate::waits::waits(record));
    Diagnosis { kind, verdict, hop, events: aligned.len() as u64, answer_chars, hops, unobserved, evidence, waits }
}

fn unobserved_reason(record: &Record, hop: Hop) -> String {
    match hop {
        Hop::Handoff => "no handoff stamps".into(),
        Hop::EgressHandoff | Hop::App => "not a joined chain".into(),
        Hop::ClientAck => match &record.timeline.client_delivery {
            Some(d) if !d.available => d.reason.clone().unwrap_or_else(|| "no ACK data".into()),
            _ => "no ACK data".into(),
        },
        Hop::BrowserArrival | Hop::Paint if record.browser.is_none() => "no browser probe report".into(),
        Hop::BrowserArrival => "the probe saw no chunk arrivals".into(),
        Hop::Paint => "the probe saw no paints".into(),
    }
}

fn hop_delay(hop: Hop, index: usize, aligned: &[Aligned], threshold: f64, long_frames: &[(f64, f64)]) -> HopDelay {
    // (release time, added delay, chars) per event seen at this hop.
    let mut seen: Vec<(f64, f64, f64, u64)> = Vec::with_capacity(aligned.len());
    seen.extend(aligned.iter().filter_map(|a| {
        let t = a.at[index]?;
        // The browser arrival is compared with the handoff: sampled ACK times are late by up
        // to one chunk gap, and the browser hop is about what happens after tokentap.
        let earlier = if hop == Hop::BrowserArrival { &a.at[..=Hop::Handoff.slot()] } else { &a.at[..index] };
        let previous = earlier.iter().rev().find_map(|t| *t).unwrap_or(a.t_up);
        let held_until = if hop == Hop::ClientAck { a.ack_not_before.unwrap_or(t) } else { t };
        Some((t, t - a.t_up, held_until - previous, a.chars))
    }));
    let baseline = seen.iter().map(|s| s.2).fold(f64::INFINITY, f64::min);
    let total_chars: u64 = seen.iter().map(|s| s.3).sum();
    let held = |s: &(f64, f64, f64, u64)| s.2 - baseline >= threshold;

    let mut held_chars = 0;
    let mut held_holds = Vec::new();
    let mut in_long_frames = 0;
    for s in seen.iter().filter(|s| held(s)) {
        held_chars += s.3;
        held_holds.push(s.2 - baseline);
        // Released during (or just after) a long frame, and held no longer than that frame lasted:
        // a long task can explain this hold. A hold much longer than the frame (a buffering hop
        // that happens to release while the page is busy) is not blamed on the page.
        let hold = s.2 - baseline;
        if long_frames.iter().any(|&(start, end)| {
            start <= s.0 && s.0 <= end + LONG_FRAME_SLACK_MS && hold <= (end - start) + LONG_FRAME_SLACK_MS
        }) {
            in_long_frames += s.3;
        }
    }

    // Releases: consecutive events (in upstream order) released within BURST_GAP_MS of each other.
    let mut bursts = 0;
    let mut largest: Option<Burst> = None;
    // (release time, held characters) of each burst, in order.
    let mut releases: Vec<(f64, u64)> = Vec::new();
    // Held characters in the stream's final release at this hop.
    let mut last_release_held = 0;
    let mut i = 0;
    while i < seen.len() {
        let mut j = i + 1;
        while j < seen.len() && (seen[j].0 - seen[j - 1].0).abs() <= BURST_GAP_MS {
            j += 1;
        }
        let release = &seen[i..j];
        if release.iter().any(held) {
            bursts += 1;
            let burst = Burst {
                chars: release.iter().map(|s| s.3).sum(),
                hold_ms: release.iter().map(|s| s.2 - baseline).fold(0.0, f64::max),
                t_ms: release.iter().map(|s| s.0).fold(f64::NEG_INFINITY, f64::max),
            };
            let held_in_release: u64 = release.iter().filter(|s| held(s)).map(|s| s.3).sum();
            releases.push((burst.t_ms, held_in_release));
            if j == seen.len() {
                last_release_held = held_in_release;
            }
            if largest.as_ref().is_none_or(|l| burst.chars > l.chars) {
                largest = Some(burst);
            }
        }
        i = j;
    }
    let (pattern, burst_interval_ms) = release_pattern(&releases, held_chars, last_release_held);

    let held_fraction = if total_chars > 0 { held_chars as f64 / total_chars as f64 } else { 0.0 };
    let delays: Vec<f64> = seen.iter().map(|s| s.1).collect();
    let added: Vec<f64> = seen.iter().map(|s| s.2).collect();
    HopDelay {
        hop,
        events: seen.len() as u64,
        delay_ms: Distribution::from_samples(&delays).expect("a hop with samples"),
        added_ms: Distribution::from_samples(&added).expect("a hop with samples"),
        hold_threshold_ms: threshold,
        held_chars,
        held_fraction,
        held_p50_ms: Distribution::from_samples(&held_holds).map(|d| d.p50),
        hold_max_ms: seen.iter().map(|s| s.2 - baseline).fold(0.0, f64::max),
        bursts,
        largest_burst: largest,
        pattern,
        burst_interval_ms,
        held_chars_in_long_frames: in_long_frames,
        rebuffers: seen.len() >= 2 && held_fraction >= HELD_FRACTION,
    }
}

/// How a hop's bursts came out: at the end, on a timer, or whenever a buffer filled; with the
/// median interval between bursts.
fn release_pattern(
    releases: &[(f64, u64)],
    held_chars: u64,
    last_release_held: u64,
) -> (Option<ReleasePattern>, Option<f64>) {
    if releases.is_empty() || held_chars == 0 {
        return (None, None);
    }
    let intervals: Vec<f64> = releases.windows(2).map(|w| w[1].0 - w[0].0).collect();
    let interval = Distribution::from_samples(&intervals);
    if last_release_held as f64 >= AT_END_FRACTION * held_chars as f64 {
        return (Some(ReleasePattern::AtEnd), interval.map(|d| d.p50));
    }
    let Some(d) = interval else { return (Some(ReleasePattern::WhenFull), None) };
    let min = intervals.iter().copied().fold(f64::INFINITY, f64::min);
    let periodic = releases.len() >= 3 && d.p50 > 0.0 && d.max - min <= PERIODIC_SPREAD * d.p50;
    (Some(if periodic { ReleasePattern::Periodic } else { ReleasePattern::WhenFull }), Some(d.p50))
}

type Verdict = (VerdictKind, Option<Hop>, String, Option<Evidence>);

fn verdict(
    aligned: &[Aligned],
    hops: &[HopDelay],
    unobserved: &[Unobserved],
    backlog: Option<u64>,
    browser: Option<&crate::browser::BrowserTimeline>,
) -> Verdict {
    if aligned.len() < 2 {
        let n = aligned.len();
        return (
            VerdictKind::InsufficientData,
            None,
            format!("not enough data: {n} aligned answer event{}, nothing to compare", if n == 1 { "" } else { "s" }),
            None,
        );
    }
    let Some(first) = hops.iter().find(|h| h.rebuffers) else {
        if let Some(steady) = steady_backlog(hops, backlog) {
            return steady;
        }
        let seen: Vec<&str> = hops.iter().map(|h| h.hop.as_str()).collect();
        let mut text = format!("no re-buffering (hops observed: {})", seen.join(", "));
        if !unobserved.is_empty() {
            let missing: Vec<String> = unobserved.iter().map(|u| format!("{}: {}", u.hop.as_str(), u.reason)).collect();
            text.push_str(&format!("; not observed: {}", missing.join("; ")));
        }
        return (VerdictKind::NoRebuffering, None, text, None);
    };
    let held = format!(
        "{:.0}% of text held a median {} in {} burst{}",
        first.held_fraction * 100.0,
        format_ms(first.held_p50_ms.unwrap_or(0.0)),
        first.bursts,
        if first.bursts == 1 { "" } else { "s" }
    );
    let largest = first
        .largest_burst
        .as_ref()
        .map(|b| format!("; largest burst {} characters held up to {}", b.chars, format_ms(b.hold_ms)))
        .unwrap_or_default();
    let in_long_frames =
        first.held_chars > 0 && first.held_chars_in_long_frames as f64 >= LONG_FRAME_FRACTION * first.held_chars as f64;
    let (kind, text) = match first.hop {
        Hop::Handoff | Hop::ClientAck if backlog.is_some_and(|b| b >= BACKLOG_BYTES) => (
            VerdictKind::ClientBacklog,
            format!("after tokentap's handoff: client/kernel backlog up to {}; {held} — the client reads slower than the text arrives", format_bytes(backlog.unwrap_or(0))),
        ),
        Hop::EgressHandoff => (
            VerdictKind::AtHandoff,
            format!("at tokentap's egress handoff (tokentap → app): {held} — tokentap or back-pressure from the app's connection"),
        ),
        Hop::App => (
            VerdictKind::InApp,
            format!("in the app (between tokentap's egress handoff and its ingress arrival): {held} — the app buffers the stream"),
        ),
        Hop::Handoff => (VerdictKind::AtHandoff, format!("at tokentap's handoff: {held} — tokentap or back-pressure from the client connection")),
        Hop::ClientAck => (
            VerdictKind::ClientBacklog,
            format!("after tokentap's handoff: client/kernel backlog up to {}; {held}", format_bytes(backlog.unwrap_or(0))),
        ),
        Hop::BrowserArrival | Hop::Paint if in_long_frames => (
            VerdictKind::BrowserMainThread,
            format!(
                "in the browser: {} delayed by long tasks; {held}",
                if first.hop == Hop::Paint { "paint" } else { "reading and paint" }
            ),
        ),
        Hop::BrowserArrival => {
            let (kind, text, evidence) = culprit::after_handoff(first, browser, &held);
            return (kind, Some(first.hop), format!("{text}{largest}"), Some(evidence));
        }
        // "Paint delayed" needs the text's arrival in the page before the paint; without it the
        // hold may lie anywhere after tokentap's handoff.
        Hop::Paint if !hops.iter().any(|h| h.hop == Hop::BrowserArrival) => {
            let text_started = aligned.first().map_or(0.0, |a| a.t_up);
            let (kind, hop, text, evidence) = culprit::arrival_unobserved(browser, &held, text_started);
            return (kind, hop, format!("{text}{largest}"), evidence);
        }
        Hop::Paint => (VerdictKind::BrowserPaint, format!("in the browser: paint delayed (no long tasks seen); {held}")),
    };
    (kind, Some(first.hop), format!("{text}{largest}"), None)
}

/// A client far behind from its first text on: every event waited about as long at the client
/// ACK, so none is held beyond the hop's smallest wait, yet the client left at least
/// [`BACKLOG_BYTES`] unacknowledged and the median event waited at least [`HOLD_MS`] there (the
/// certain wait: see [`certain_ack_wait`]). The backlog is the evidence that the wait is the
/// client's: an answer's text never needs that much in flight.
fn steady_backlog(hops: &[HopDelay], backlog: Option<u64>) -> Option<Verdict> {
    let backlog = backlog.filter(|&b| b >= BACKLOG_BYTES)?;
    let ack = hops.iter().find(|h| h.hop == Hop::ClientAck && h.added_ms.p50 >= HOLD_MS)?;
    let text = format!(
        "after tokentap's handoff: client/kernel backlog up to {}; text waited a median {} (up to {}) for the client, \
         from the first text on — the client reads slower than the text arrives",
        format_bytes(backlog),
        format_ms(ack.added_ms.p50),
        format_ms(ack.added_ms.max)
    );
    Some((VerdictKind::ClientBacklog, Some(Hop::ClientAck), text, None))
}

mod culprit;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod app_server_tests;
