//! The text `tokentap explain` prints: for a request, the verdict, a table per hop and a strip of
//! when each tenth of the answer got to each hop; for a turn, its totals, steps, tool runs and
//! critical path.

use std::fmt::Write as _;

use tokentap_analysis::EventClass;
use tokentap_record::hops::{format_bytes, format_ms, Diagnosis, Hop};
use tokentap_record::turn::{SegmentKind, TurnRecord};
use tokentap_record::Record;

use crate::markdown::number;

mod audio;
mod realtime;

/// What `explain` says of a record with no answer text to follow through the hops: a failure, a
/// non-streaming answer of something other than text (embeddings, images), an empty answer.
fn without_answer_text(out: &mut String, record: &Record) {
    let w = out;
    let t0 = |ns: Option<u64>| ns.map_or_else(|| "–".to_owned(), |ns| number(ns as f64 / 1e6));
    let _ = writeln!(
        w,
        "status {}, upstream sent {} ms, response headers {} ms, end {} ms (since the request arrived); {} body bytes in {} chunks",
        record.status.map_or("none".to_owned(), |s| s.to_string()),
        t0(record.timeline.t_upstream_sent_ns),
        t0(record.timeline.t_upstream_headers_ns),
        t0(record.timeline.t_end_ns),
        record.timeline.body_bytes,
        record.timeline.chunk_count
    );
    if let Some(e) = &record.error {
        let _ = writeln!(w, "error ({} side): {}: {}", e.side.as_str(), plain(&e.kind), plain(&e.message));
    }
    let look = match (&record.error, record.timeline.t_upstream_headers_ns, record.timeline.t_end_ns) {
        (Some(e), _, _) => format!("the error above ({} side)", e.side.as_str()),
        (None, Some(h), Some(end)) if end > h => format!(
            "the server's answer: headers after {} ms, the body {} ms more; there is no answer text to follow through the hops (not a text stream)",
            number(h as f64 / 1e6),
            number((end - h) as f64 / 1e6)
        ),
        _ => "the status and outcome above: there is no answer text to follow through the hops".to_owned(),
    };
    let _ = writeln!(w, "\nlook at: {look}");
}

/// A compact text timeline per hop, for `tokentap explain`.
pub fn explain(record: &Record, diagnosis: Option<&Diagnosis>) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "request {}  {} {}  route {}  outcome {}\n",
        record.request_id,
        record.method,
        record.path,
        record.route,
        record.outcome.as_str()
    ));
    if let Some(turn) = &record.turn {
        let part = match turn.link {
            tokentap_record::TurnLink::Voice => "a voice request".to_owned(),
            _ => format!("step {}", turn.step),
        };
        out.push_str(&format!(
            "{part} of turn {} (`tokentap explain {}` shows the whole turn)\n",
            plain(&turn.turn_id),
            plain(&turn.turn_id)
        ));
    }
    if let Some(session) = &record.realtime {
        realtime::explain_session(&mut out, record, session);
        return out;
    }
    if let Some(speech) = &record.speech {
        audio::explain_speech(&mut out, speech);
        return out;
    }
    if let Some(transcription) = &record.transcription {
        audio::explain_transcription(&mut out, record, transcription);
        if diagnosis.is_none() {
            return out;
        }
        out.push('\n');
    }
    let Some(d) = diagnosis else {
        without_answer_text(&mut out, record);
        return out;
    };
    out.push_str(&format!("verdict: {}\n", d.verdict));
    out.push_str(&format!("aligned {} answer events, {} characters\n\n", d.events, d.answer_chars));
    out.push_str("hop              delay vs upstream (ms)        added (ms)   held   bursts  largest burst\n");
    out.push_str("                 p50      p99      max          p50\n");
    for h in &d.hops {
        let burst = h
            .largest_burst
            .as_ref()
            .map(|b| format!("{} chars, {}", b.chars, format_ms(b.hold_ms)))
            .unwrap_or_else(|| "-".into());
        out.push_str(&format!(
            "{:<16} {:>8.1} {:>8.1} {:>8.1}     {:>8.1}   {:>4.0}%   {:>6}  {}{}\n",
            h.hop.as_str(),
            h.delay_ms.p50,
            h.delay_ms.p99,
            h.delay_ms.max,
            h.added_ms.p50,
            h.held_fraction * 100.0,
            h.bursts,
            burst,
            if h.rebuffers { "  <- re-buffers" } else { "" }
        ));
    }
    for u in &d.unobserved {
        out.push_str(&format!("{:<16} not observed: {}\n", u.hop.as_str(), u.reason));
    }
    if let Some(delivery) = &record.timeline.client_delivery {
        out.push_str(&format!("client backlog high-water mark: {}\n", format_bytes(delivery.backlog_max_bytes)));
    }
    if let Some(b) = &record.browser {
        if let Some(c) = &b.clock {
            out.push_str(&format!("browser clock uncertainty: ±{:.1} ms\n", c.uncertainty_ms));
        }
        if !b.long_frames.is_empty() {
            let longest = b.long_frames.iter().map(|f| f.duration_ms).fold(0.0, f64::max);
            out.push_str(&format!("long animation frames: {} (longest {})\n", b.long_frames.len(), format_ms(longest)));
        }
    }
    out.push_str(&timeline_strip(record, d));
    out
}

/// One line per hop: when each tenth of the answer's characters got there (ms since t0).
fn timeline_strip(record: &Record, d: &Diagnosis) -> String {
    let Some(analysis) = &record.analysis else { return String::new() };
    let events: Vec<_> = analysis.events.iter().filter(|e| e.class == EventClass::Answer && e.chars > 0).collect();
    if events.len() < 2 {
        return String::new();
    }
    let chunks = &record.timeline.chunks;
    let chunk_of = |end: u64| chunks.iter().position(|c| c.offset + u64::from(c.len) >= end);
    let total = events.last().map(|e| e.answer_chars_cum).unwrap_or(0).max(1);
    let mut out = String::from("\nwhen each 10% of the answer text got there (ms since t0):\n");
    let deciles: Vec<_> = (1..=10)
        .filter_map(|k| {
            events.iter().find(|e| e.answer_chars_cum * 10 >= total * k).map(|e| (e, chunk_of(e.end_offset)))
        })
        .collect();
    let mut line = |name: &str, at: &dyn Fn(usize, f64) -> Option<f64>| {
        out.push_str(&format!("{name:<16}"));
        for (e, chunk) in &deciles {
            match chunk.and_then(|c| at(c, e.t_ms)) {
                Some(t) => out.push_str(&format!(" {t:>7.0}")),
                None => out.push_str("       -"),
            }
        }
        out.push('\n');
    };
    line("upstream", &|_, t| Some(t));
    let observed = |h: Hop| d.hops.iter().any(|x| x.hop == h);
    if observed(Hop::Handoff) {
        line("handoff", &|c, _| chunks[c].t_handoff_ns.map(|t| t as f64 / 1e6));
    }
    if observed(Hop::ClientAck) {
        line("client_ack", &|c, _| chunks[c].t_acked_ns.map(|t| t as f64 / 1e6));
    }
    if let Some(b) = &record.browser {
        if observed(Hop::BrowserArrival) {
            line("browser_arrival", &|c, _| b.chunks.get(c).and_then(|x| x.t_browser_ms));
        }
        if observed(Hop::Paint) {
            line("paint", &|c, _| b.chunks.get(c).and_then(|x| x.t_paint_ms));
        }
    }
    out
}

/// A value for the terminal: control characters (an app's header value could hold some) shown as
/// `?`.
pub(crate) fn plain(value: &str) -> String {
    value.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// What `tokentap explain <turn id>` prints: the totals, the steps and tool runs in time order, and
/// the critical path.
pub fn explain_turn(turn: &TurnRecord) -> String {
    let mut out = String::new();
    let w = &mut out;
    let t = &turn.totals;
    let _ = writeln!(
        w,
        "turn {} ({}), conversation {}",
        plain(&turn.turn_id),
        turn.status.as_str(),
        plain(&turn.conversation_id)
    );
    let _ = writeln!(w, "started {} on route {}; trace {}", turn.started_at, plain(&turn.route), turn.trace_id);
    let share = |ms: f64| if t.e2e_ms > 0.0 { format!(" ({:.0}%)", 100.0 * ms / t.e2e_ms) } else { String::new() };
    if let Some(v) = &turn.voice {
        // A voice turn's wait is the voice chain; the model calls are one part of it.
        let headline = match (v.voice_to_voice_ms, v.first_audible_ms) {
            (Some(v2v), _) => format!("voice to voice {} ms (end of speech → answer heard in the browser)", number(v2v)),
            (None, Some(audible)) => format!(
                "voice to first audible sample {} ms (the wire, from the transcription request's start; voice to voice needs the browser probe)",
                number(audible)
            ),
            (None, None) => "voice turn: no audible answer yet".to_owned(),
        };
        let _ = writeln!(w, "\n{headline}");
        let _ = writeln!(
            w,
            "the model part of it: {} ms from the first model call's start to the answer's end ({} steps, {} tool calls)",
            number(t.e2e_ms),
            t.steps,
            t.tool_calls
        );
    } else {
        let _ = writeln!(
            w,
            "\nend to end {} ms: model {} ms{}, tools {} ms{}, client {} ms{}",
            number(t.e2e_ms),
            number(t.model_ms),
            share(t.model_ms),
            number(t.tool_ms),
            share(t.tool_ms),
            number(t.client_ms),
            share(t.client_ms)
        );
    }
    if turn.voice.is_none() {
        let _ = writeln!(w, "{} steps, {} tool calls ({} unanswered)", t.steps, t.tool_calls, t.unanswered_tool_calls);
    }
    let _ = writeln!(w, "\nsteps (ms since the turn started):");
    for s in &turn.steps {
        let first = match (s.ttft_answer_ms, s.ttft_tool_ms) {
            (Some(a), _) => format!("first answer +{} ms", number(a)),
            (None, Some(tool)) => format!("first tool call +{} ms", number(tool)),
            _ => "no output".to_owned(),
        };
        let _ = writeln!(
            w,
            "  {:>2}. {:>9} → {:>9}  {}  {}, {} tool calls, linked by {}, request {}",
            s.step,
            number(s.start_ms),
            number(s.end_ms),
            s.outcome.as_str(),
            first,
            s.tool_calls,
            s.link.as_str(),
            s.request_id
        );
    }
    if !turn.tool_runs.is_empty() {
        let _ = writeln!(w, "\ntool runs (ready = the call complete at the client; result = the request carrying it):");
        for r in &turn.tool_runs {
            let name = plain(r.name.as_deref().unwrap_or("?"));
            let id = plain(r.call_id.as_deref().unwrap_or("no id"));
            match (r.result_ms, r.duration_ms, r.result_step) {
                (Some(result), Some(d), Some(step)) => {
                    let _ = writeln!(
                        w,
                        "  {name} [{id}] from step {}: ready {} → result {} (step {step}) = {} ms",
                        r.step,
                        number(r.ready_ms),
                        number(result),
                        number(d)
                    );
                    if let Some(m) = &r.mcp {
                        let by: Vec<String> = m
                            .joined_by
                            .iter()
                            .map(|b| {
                                serde_json::to_value(b)
                                    .ok()
                                    .and_then(|v| v.as_str().map(str::to_owned))
                                    .unwrap_or_default()
                            })
                            .collect();
                        let _ = writeln!(
                            w,
                            "    over MCP (tools/call {} [{}], request {}): harness {} + tool server {} + harness {} ms (joined by {})",
                            plain(&m.tool),
                            plain(&m.jsonrpc_id),
                            plain(&m.request_id),
                            number(m.harness_before_ms),
                            number(m.server_ms),
                            number(m.harness_after_ms),
                            by.join(", ")
                        );
                    }
                }
                _ => {
                    let _ = writeln!(
                        w,
                        "  {name} [{id}] from step {}: ready {}, never answered",
                        r.step,
                        number(r.ready_ms)
                    );
                }
            }
        }
    }
    let _ = writeln!(w, "\ncritical path:");
    for seg in &turn.critical_path {
        let what = match seg.kind {
            SegmentKind::Model => format!("model (step {})", seg.step.unwrap_or(0)),
            SegmentKind::Tool => format!("tools {}", seg.call_ids.join(", ")),
            SegmentKind::Client => "client".to_owned(),
        };
        let _ = writeln!(w, "  {:>9} → {:>9}  {what}", number(seg.start_ms), number(seg.end_ms));
    }
    if let Some(v) = &turn.voice {
        explain_voice(w, v);
    }
    out
}

/// The voice part: the transcription, the speech requests and the chain of waits.
fn explain_voice(w: &mut String, v: &tokentap_record::turn::TurnVoice) {
    use tokentap_record::turn::voice::VoiceSegmentKind as K;
    let _ = writeln!(
        w,
        "
voice (ms since the transcription request started, else the turn):"
    );
    let opt = |x: Option<f64>| x.map_or("?".to_owned(), number);
    if let Some(t) = &v.transcription {
        let _ = writeln!(
            w,
            "  transcription {}: upload done {}, first delta {}, transcript done {}, audio {} ms, joined by {}",
            t.request_id,
            opt(t.upload_end_ms),
            opt(t.first_delta_ms),
            opt(t.transcript_done_ms),
            opt(t.upload_audio_ms),
            serde_json::to_value(t.link).ok().and_then(|l| l.as_str().map(str::to_owned)).unwrap_or_default()
        );
    }
    for s in &v.speech {
        let _ = writeln!(
            w,
            "  speech {}: sent {}, first byte {}, first audible {} (leading silence {}), {} ms of audio, {} predicted underruns",
            s.request_id,
            number(s.start_ms),
            opt(s.first_audio_ms),
            opt(s.first_audible_ms),
            opt(s.leading_silence_ms),
            opt(s.audio_ms),
            s.predicted_underruns.map_or("?".to_owned(), |n| n.to_string())
        );
        if let Some(p) = &s.playout {
            let _ = writeln!(
                w,
                "    in the browser: playing {}, heard {}, {} underruns ({} ms starved){}",
                number(p.started_ms),
                number(p.heard_ms),
                p.underruns,
                number(p.starved_ms),
                if p.interrupted { ", interrupted" } else { "" }
            );
        }
    }
    if !v.segments.is_empty() {
        let _ = writeln!(w, "  the wait, in order:");
        for seg in &v.segments {
            let what = match seg.kind {
                K::AfterSpeech => "after the end of speech (the app's detection and sending)",
                K::Upload => "upload",
                K::Transcription => "transcription",
                K::ToModel => "to the model call (the app)",
                K::FirstToken => "to the first answer token",
                K::ToSpeech => "to the first speech request (the app)",
                K::SpeechFirstByte => "to the first audio byte",
                K::LeadingSilence => "to the first audible sample",
                K::Playout => "to the answer heard in the browser (delivery, decoding, output)",
            };
            let _ = writeln!(
                w,
                "    {:>9} → {:>9}  {:>8} ms  {what}",
                number(seg.start_ms),
                number(seg.end_ms),
                number(seg.end_ms - seg.start_ms)
            );
        }
    }
    if let Some(ms) = v.first_audible_ms {
        let _ = writeln!(w, "  voice to first audible sample (wire): {} ms", number(ms));
    }
    if let Some(ms) = v.voice_to_voice_ms {
        let _ = writeln!(w, "  voice to voice (end of speech → heard in the browser): {} ms", number(ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokentap_record::diagnosis::diagnose;
    use tokentap_record::fixtures::{smooth_browser, stream_record as record};

    #[test]
    fn explain_prints_the_verdict_and_every_hop() {
        let r = smooth_browser(record(20));
        let d = diagnose(&r);
        let text = explain(&r, d.as_ref());
        assert!(text.contains("verdict: no re-buffering"), "{text}");
        for name in ["handoff", "client_ack", "browser_arrival", "paint", "upstream"] {
            assert!(text.contains(name), "{name}: {text}");
        }
    }
}
