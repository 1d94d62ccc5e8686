//! The report of one turn, as tokentap's ingest expects it (`tokentap.probe/1`).
//!
//! The JSON is written by hand: serde and float formatting would be most of the wasm module.
//! Times are written with 3 decimals (µs; the browser's clock is coarser anyway). Unknown values
//! are `null`; the counts of what did not fit (`marks_dropped`, `long_frames_dropped`,
//! `audio_dropped`) are written only when something was dropped.

use crate::clock::ClockEstimate;
use crate::playout::Playout;
use crate::realtime::RealtimeSeen;
use crate::turn::Turn;
use crate::webrtc::{Delays, WebRtcSeen};

/// The schema name and the largest report body (a bigger report is thinned, see
/// [`report_json`]): the protocol's.
pub use tokentap_probe_protocol::{caps::MAX_REPORT_BYTES, SCHEMA};

/// The JSON report of `turn`, at most [`MAX_REPORT_BYTES`] long.
///
/// When the full report is too big, the longer of the chunk and paint lists is thinned: every
/// other entry between the first and the last is removed and counted as dropped, until it fits.
/// First and last entries survive, so first/last paint and end-to-end byte counts stay exact.
pub fn report_json(turn: &Turn, clock: Option<&ClockEstimate>, now_ms: f64) -> String {
    let json = write_report(turn, clock, now_ms);
    if json.len() <= MAX_REPORT_BYTES {
        return json;
    }
    let mut thinned = turn.clone();
    loop {
        if thinned.chunks.len() >= thinned.paints.len() {
            thinned.chunks_dropped += thin(&mut thinned.chunks);
        } else {
            thinned.paints_dropped += thin(&mut thinned.paints);
        }
        let json = write_report(&thinned, clock, now_ms);
        if json.len() <= MAX_REPORT_BYTES || (thinned.chunks.len() <= 2 && thinned.paints.len() <= 2) {
            return json;
        }
    }
}

/// Removes every other entry except the first and last; returns how many went.
fn thin<T: Copy>(list: &mut Vec<T>) -> u64 {
    let n = list.len();
    if n <= 2 {
        return 0;
    }
    let kept: Vec<T> =
        list.iter().enumerate().filter(|&(i, _)| i == 0 || i == n - 1 || i % 2 == 0).map(|(_, &x)| x).collect();
    let removed = (n - kept.len()) as u64;
    *list = kept;
    removed
}

fn write_report(turn: &Turn, clock: Option<&ClockEstimate>, now_ms: f64) -> String {
    let mut w = Json(String::with_capacity(256 + 40 * (turn.chunks.len() + turn.paints.len())));
    let r = &turn.request;
    w.raw("{\"schema\":");
    w.string(SCHEMA);
    w.raw(",\"trace_id\":");
    w.string(&r.trace_id);
    w.raw(",\"span_id\":");
    w.string(&r.span_id);
    w.raw(",\"page_path\":");
    w.string(&r.page_path);
    w.raw(",\"request\":{\"method\":");
    w.string(&r.method);
    w.raw(",\"path\":");
    w.string(&r.path);
    w.raw(",\"status\":");
    match turn.status {
        Some(status) => w.uint(u64::from(status)),
        None => w.raw("null"),
    }
    w.raw("},\"clock\":");
    match clock {
        Some(c) => {
            w.raw("{\"offset_ms\":");
            w.number(c.offset_ms);
            w.raw(",\"uncertainty_ms\":");
            w.number(c.uncertainty_ms);
            w.raw(",\"samples\":");
            w.uint(u64::from(c.samples));
            w.raw("}");
        }
        None => w.raw("null"),
    }
    w.raw(",\"marks\":[");
    for (i, m) in turn.marks.iter().enumerate() {
        w.comma(i);
        w.raw("{\"name\":");
        w.string(&m.name);
        w.raw(",\"t_ms\":");
        w.number(m.t_ms);
        w.raw("}");
    }
    w.raw("]");
    w.dropped("marks_dropped", turn.marks_dropped);
    w.raw(",\"fetch\":{\"start_ms\":");
    w.number(turn.start_ms);
    w.raw(",\"response_ms\":");
    w.opt_number(turn.response_ms);
    w.raw(",\"end_ms\":");
    w.opt_number(turn.end_ms);
    w.raw(",\"chunks\":[");
    for (i, c) in turn.chunks.iter().enumerate() {
        w.comma(i);
        w.raw("{\"t_ms\":");
        w.number(c.t_ms);
        w.raw(",\"bytes\":");
        w.uint(c.bytes);
        if let Some(chars) = c.chars {
            w.raw(",\"chars\":");
            w.uint(chars);
        }
        w.raw("}");
    }
    w.raw("],\"chunks_dropped\":");
    w.uint(turn.chunks_dropped);
    let path = &turn.response_path;
    if let Some(format) = path.text_format {
        w.raw(",\"text_format\":");
        w.string(format.as_str());
    }
    if path.text_inferred {
        w.raw(",\"text_inferred\":true");
    }
    if let Some(transport) = path.transport {
        w.raw(",\"transport\":");
        w.string(transport.as_str());
    }
    for (key, value) in [("content_encoding", &path.content_encoding), ("via", &path.via), ("server", &path.server)] {
        if let Some(v) = value {
            w.raw(",\"");
            w.raw(key);
            w.raw("\":");
            w.string(v);
        }
    }
    w.raw("},\"paints\":[");
    for (i, p) in turn.paints.iter().enumerate() {
        w.comma(i);
        w.raw("{\"t_ms\":");
        w.number(p.t_ms);
        w.raw(",\"chars\":");
        w.uint(p.chars);
        w.raw(",\"presentation_ms\":");
        w.opt_number(p.presentation_ms);
        w.raw("}");
    }
    w.raw("],\"paints_dropped\":");
    w.uint(turn.paints_dropped);
    w.raw(",\"long_frames\":[");
    for (i, f) in turn.long_frames.iter().enumerate() {
        w.comma(i);
        w.raw("{\"start_ms\":");
        w.number(f.start_ms);
        w.raw(",\"duration_ms\":");
        w.number(f.duration_ms);
        w.raw(",\"blocking_ms\":");
        w.number(f.blocking_ms);
        w.raw("}");
    }
    w.raw("]");
    w.dropped("long_frames_dropped", turn.long_frames_dropped);
    w.raw(",\"audio\":[");
    // A playback never heard (scheduled on a suspended context, stopped before its first sound)
    // has no start to report.
    for (i, (a, audible_ms)) in turn.audio.iter().filter_map(|a| Some((a, a.audible_ms?))).enumerate() {
        w.comma(i);
        write_playout(&mut w, a, audible_ms, now_ms);
    }
    w.raw("]");
    w.dropped("audio_dropped", turn.audio_dropped);
    if let Some(realtime) = &turn.realtime {
        write_realtime(&mut w, realtime, now_ms);
    }
    if let Some(webrtc) = &turn.webrtc {
        write_webrtc(&mut w, webrtc);
    }
    w.raw("}");
    w.0
}

/// Writes `,"key":value` for each pair.
fn fields(w: &mut Json, pairs: &[(&str, Option<f64>)]) {
    for (key, value) in pairs {
        w.raw(",\"");
        w.raw(key);
        w.raw("\":");
        w.opt_number(*value);
    }
}

fn delays(w: &mut Json, d: &Delays) {
    fields(
        w,
        &[
            ("jitter_buffer_ms", d.jitter_buffer_ms),
            ("jitter_buffer_target_ms", d.jitter_buffer_target_ms),
            ("playout_delay_ms", d.playout_ms),
        ],
    );
}

/// The `webrtc` section: a peer connection's received audio, the user's speech and the data
/// channel's events.
fn write_webrtc(w: &mut Json, s: &WebRtcSeen) {
    let last = s.last.unwrap_or_default();
    w.raw(",\"webrtc\":{\"connected_ms\":");
    w.opt_number(s.connected_ms);
    fields(
        w,
        &[
            ("closed_ms", s.closed_ms),
            ("first_packet_ms", s.first_packet_ms),
            ("rtt_ms", s.rtt_ms),
            ("jitter_ms", s.last.map(|l| l.jitter_s * 1000.0)),
            ("packets_received", Some(last.packets_received)),
            ("packets_lost", Some(last.packets_lost)),
            ("samples_received", Some(last.samples_received)),
            ("concealed_samples", Some(last.concealed_samples)),
            ("silent_concealed_samples", Some(last.silent_concealed_samples)),
            ("concealment_events", Some(last.concealment_events)),
        ],
    );
    delays(w, &s.session_delays());
    for (key, tap) in [("mic_tap", s.mic_tap), ("remote_tap", s.remote_tap)] {
        if let Some(tap) = tap {
            w.raw(",\"");
            w.raw(key);
            w.raw("\":");
            w.string(tap.as_str());
        }
    }
    w.raw(",\"answers\":[");
    for (i, a) in s.answers.iter().enumerate() {
        w.comma(i);
        w.raw("{\"delivered_ms\":");
        w.number(a.delivered_ms);
        w.raw(",\"method\":");
        w.string(a.method.as_str());
        delays(w, &a.delays);
        fields(
            w,
            &[
                ("estimate_ms", a.estimate_ms),
                ("end_ms", a.end_ms),
                ("samples", Some(a.samples)),
                ("concealed_samples", Some(a.concealed)),
                ("concealment_events", Some(a.concealment_events)),
                ("barge_in_ms", a.barge_in_ms),
            ],
        );
        w.raw("}");
    }
    w.raw("]");
    w.dropped("answers_dropped", s.answers_dropped);
    w.raw(",\"speech\":[");
    for (i, sp) in s.speech.iter().enumerate() {
        w.comma(i);
        w.raw("{\"start_ms\":");
        w.number(sp.start_ms);
        w.raw(",\"end_ms\":");
        w.opt_number(sp.end_ms);
        w.raw(",\"source\":");
        w.string(sp.source.as_str());
        w.raw("}");
    }
    w.raw("]");
    w.dropped("speech_dropped", s.speech_dropped);
    w.raw(",\"events\":[");
    for (i, e) in s.events.iter().enumerate() {
        w.comma(i);
        w.raw("{\"name\":");
        w.string(&e.name);
        w.raw(",\"t_ms\":");
        w.number(e.t_ms);
        w.raw("}");
    }
    w.raw("],\"event_counts\":[");
    for (i, (name, count)) in s.event_counts.iter().enumerate() {
        w.comma(i);
        w.raw("{\"name\":");
        w.string(name);
        w.raw(",\"count\":");
        w.uint(*count);
        w.raw("}");
    }
    w.raw("]");
    w.dropped("events_dropped", s.events_dropped);
    w.raw("}");
}

/// One heard playback (an `audio` entry).
fn write_playout(w: &mut Json, a: &Playout, audible_ms: f64, now_ms: f64) {
    w.raw("{\"kind\":");
    w.string(a.kind.as_str());
    w.raw(",\"audible_ms\":");
    w.number(audible_ms);
    w.raw(",\"output_latency_ms\":");
    w.opt_number(a.output_latency_ms);
    w.raw(",\"end_ms\":");
    w.opt_number(a.end_ms(now_ms));
    w.raw(",\"underruns\":");
    w.uint(u64::from(a.underruns));
    w.raw(",\"starved_ms\":");
    w.number(a.starved_ms);
    w.raw(",\"interrupted\":");
    w.raw(if a.interrupted_ms.is_some() { "true" } else { "false" });
    if a.scheduled_audio_ms > 0.0 {
        w.raw(",\"scheduled_audio_ms\":");
        w.number(a.scheduled_audio_ms);
    }
    w.raw("}");
}

/// The `realtime` section: the session's responses as the page saw them.
fn write_realtime(w: &mut Json, realtime: &RealtimeSeen, now_ms: f64) {
    w.raw(",\"realtime\":{\"session_id\":");
    match &realtime.session_id {
        Some(id) => w.string(id),
        None => w.raw("null"),
    }
    w.raw(",\"messages\":");
    w.uint(realtime.messages);
    w.raw(",\"responses_dropped\":");
    w.uint(realtime.responses_dropped);
    w.raw(",\"responses\":[");
    for (i, r) in realtime.responses.iter().enumerate() {
        w.comma(i);
        w.raw("{\"response_id\":");
        w.string(&r.response_id);
        w.raw(",\"created_ms\":");
        w.opt_number(r.created_ms);
        w.raw(",\"first_audio_ms\":");
        w.opt_number(r.first_audio_ms);
        w.raw(",\"done_ms\":");
        w.opt_number(r.done_ms);
        w.raw(",\"audio_deltas\":");
        w.uint(r.audio_deltas);
        w.raw(",\"audio\":");
        match r.playout.as_ref().and_then(|a| Some((a, a.audible_ms?))) {
            Some((a, audible_ms)) => write_playout(w, a, audible_ms, now_ms),
            None => w.raw("null"),
        }
        w.raw("}");
    }
    w.raw("]}");
}

/// A minimal JSON writer.
struct Json(String);

impl Json {
    fn raw(&mut self, s: &str) {
        self.0.push_str(s);
    }

    fn comma(&mut self, index: usize) {
        if index > 0 {
            self.0.push(',');
        }
    }

    fn uint(&mut self, n: u64) {
        // Integer formatting is small; the float formatter is not, so numbers go through here.
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut n = n;
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for &d in &digits[i..] {
            self.0.push(d as char);
        }
    }

    /// A number rounded to 3 decimals, without trailing zeros; non-finite numbers are `null`.
    fn number(&mut self, x: f64) {
        if !x.is_finite() || x.abs() >= 9.0e12 {
            // Beyond ±9e12 ms (year 2255) thousandths no longer fit exactly in an f64.
            self.0.push_str("null");
            return;
        }
        let thousandths = (x * 1000.0).round();
        if thousandths < 0.0 {
            self.0.push('-');
        }
        let thousandths = thousandths.abs() as u64;
        self.uint(thousandths / 1000);
        let frac = thousandths % 1000;
        if frac != 0 {
            let digits = [b'0' + (frac / 100) as u8, b'0' + (frac / 10 % 10) as u8, b'0' + (frac % 10) as u8];
            let len = digits.iter().rposition(|&d| d != b'0').map_or(0, |i| i + 1);
            self.0.push('.');
            for &d in &digits[..len] {
                self.0.push(d as char);
            }
        }
    }

    fn opt_number(&mut self, x: Option<f64>) {
        match x {
            Some(x) => self.number(x),
            None => self.0.push_str("null"),
        }
    }

    fn dropped(&mut self, key: &str, count: u64) {
        if count > 0 {
            self.0.push_str(",\"");
            self.0.push_str(key);
            self.0.push_str("\":");
            self.uint(count);
        }
    }

    fn string(&mut self, s: &str) {
        self.0.push('"');
        for c in s.chars() {
            match c {
                '"' => self.0.push_str("\\\""),
                '\\' => self.0.push_str("\\\\"),
                '\n' => self.0.push_str("\\n"),
                '\r' => self.0.push_str("\\r"),
                '\t' => self.0.push_str("\\t"),
                c if u32::from(c) < 0x20 => {
                    self.0.push_str("\\u00");
                    self.0.push(char::from_digit(u32::from(c) >> 4, 16).unwrap_or('0'));
                    self.0.push(char::from_digit(u32::from(c) & 15, 16).unwrap_or('0'));
                }
                c => self.0.push(c),
            }
        }
        self.0.push('"');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::turn::{AudioKind, AudioStart, LongFrame, Mark, Paint, RequestInfo, MAX_CHUNKS, MAX_PAINTS};

    fn turn() -> Turn {
        let mut t = Turn::new(
            0,
            RequestInfo {
                trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
                span_id: "b7ad6b7169203331".into(),
                page_path: "/_tokentap/demo/".into(),
                method: "POST".into(),
                path: "/v1/chat/completions".into(),
            },
            1795938039800.5,
        );
        t.record_mark(Mark { name: "user_send\n\"x\"".into(), t_ms: 1795938039799.25 });
        t.record_response(1795938039810.0, 200);
        t.record_chunk(1795938039820.125, 312);
        t.record_chunk(1795938039830.0, 100);
        t.record_end(1795938039840.0);
        t.record_paint(Paint { t_ms: 1795938039825.0, chars: 17, presentation_ms: None });
        t.record_long_frame(LongFrame { start_ms: 1795938039821.0, duration_ms: 60.0, blocking_ms: 10.0 });
        t.record_audio(
            AudioStart { kind: AudioKind::AudioContext, audible_ms: 1795938039900.0, output_latency_ms: Some(12.5) },
            None,
        );
        t
    }

    #[test]
    fn writes_answer_characters_and_the_response_path_when_known() {
        let mut t = turn();
        t.set_chars(&[(312, 4), (412, 9)]);
        t.response_path = crate::turn::ResponsePath {
            content_encoding: Some("gzip".into()),
            via: None,
            server: None,
            text_format: Some(crate::answer_text::TextFormat::Sse),
            text_inferred: false,
            transport: None,
        };
        let json = report_json(&t, None, 1795938041000.0);
        assert!(
            json.contains(concat!(
                r#""chunks":[{"t_ms":1795938039820.125,"bytes":312,"chars":4},{"t_ms":1795938039830,"bytes":412,"chars":9}],"#,
                r#""chunks_dropped":0,"text_format":"sse","content_encoding":"gzip"},"#
            )),
            "{json}"
        );
    }

    #[test]
    fn writes_a_realtime_session_with_each_response_and_its_playback() {
        use crate::realtime::{RealtimeSeen, ServerEventKind};
        let mut t = Turn::new(
            1,
            RequestInfo {
                trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
                span_id: "b7ad6b7169203331".into(),
                page_path: "/voice/".into(),
                method: "GET".into(),
                path: "/v1/realtime".into(),
            },
            1000.0,
        );
        let mut seen = RealtimeSeen::default();
        seen.message(1010.0, ServerEventKind::SessionCreated, Some("sess_1"));
        seen.message(2000.0, ServerEventKind::ResponseCreated, Some("resp_1"));
        seen.message(2300.5, ServerEventKind::AudioDelta, Some("resp_1"));
        seen.message(2400.0, ServerEventKind::ResponseCreated, Some("resp_2"));
        t.realtime = Some(seen);
        t.record_response(1005.0, 101);
        // Audio scheduled now goes to resp_1 (the last with audio), heard 40 ms after its first delta.
        t.record_audio(AudioStart { kind: AudioKind::AudioContext, audible_ms: 2340.5, output_latency_ms: None }, None);
        t.record_end(5000.0);
        let json = report_json(&t, None, 6000.0);
        let tail = json.split(",\"realtime\":").nth(1).expect("a realtime section");
        assert_eq!(
            tail,
            concat!(
                r#"{"session_id":"sess_1","messages":4,"responses_dropped":0,"responses":["#,
                r#"{"response_id":"resp_1","created_ms":2000,"first_audio_ms":2300.5,"done_ms":null,"audio_deltas":1,"#,
                r#""audio":{"kind":"audio_context","audible_ms":2340.5,"output_latency_ms":null,"end_ms":null,"#,
                r#""underruns":0,"starved_ms":0,"interrupted":false}},"#,
                r#"{"response_id":"resp_2","created_ms":2400,"first_audio_ms":null,"done_ms":null,"audio_deltas":0,"audio":null}]}}"#,
            )
        );
        assert!(t.audio.is_empty(), "a session's playbacks are per response");
    }

    #[test]
    fn writes_the_schema() {
        let clock = ClockEstimate { offset_ms: -0.12, uncertainty_ms: 0.3, samples: 5 };
        let mut t = turn();
        // A second playback, scheduled on the context, stopped early by the user.
        t.audio.push(crate::playout::Playout::new(AudioKind::MediaElement));
        let media = t.audio.last_mut().unwrap();
        media.heard(1795938040000.0, None);
        media.waiting(1795938040100.0);
        media.resumed(1795938040150.0);
        media.stopped(1795938040300.0);
        let json = report_json(&t, Some(&clock), 1795938041000.0);
        assert_eq!(
            json,
            concat!(
                r#"{"schema":"tokentap.probe/1","trace_id":"0af7651916cd43dd8448eb211c80319c","span_id":"b7ad6b7169203331","#,
                r#""page_path":"/_tokentap/demo/","request":{"method":"POST","path":"/v1/chat/completions","status":200},"#,
                r#""clock":{"offset_ms":-0.12,"uncertainty_ms":0.3,"samples":5},"#,
                r#""marks":[{"name":"user_send\n\"x\"","t_ms":1795938039799.25}],"#,
                r#""fetch":{"start_ms":1795938039800.5,"response_ms":1795938039810,"end_ms":1795938039840,"#,
                r#""chunks":[{"t_ms":1795938039820.125,"bytes":312},{"t_ms":1795938039830,"bytes":412}],"chunks_dropped":0},"#,
                r#""paints":[{"t_ms":1795938039825,"chars":17,"presentation_ms":null}],"paints_dropped":0,"#,
                r#""long_frames":[{"start_ms":1795938039821,"duration_ms":60,"blocking_ms":10}],"#,
                r#""audio":[{"kind":"audio_context","audible_ms":1795938039900,"output_latency_ms":12.5,"end_ms":null,"#,
                r#""underruns":0,"starved_ms":0,"interrupted":false},"#,
                r#"{"kind":"media_element","audible_ms":1795938040000,"output_latency_ms":null,"#,
                r#""end_ms":1795938040300,"underruns":1,"starved_ms":50,"interrupted":true}]}"#,
            )
        );
    }

    #[test]
    fn numbers() {
        let mut w = Json(String::new());
        for x in [0.0, 0.0004, 0.001, 0.05, -1.5, 12.34567, 1e3, f64::NAN] {
            w.number(x);
            w.raw(" ");
        }
        assert_eq!(w.0, "0 0 0.001 0.05 -1.5 12.346 1000 null ");
    }

    #[test]
    fn oversized_reports_are_thinned_keeping_first_and_last() {
        let mut t = turn();
        t.paints.clear();
        for i in 0..MAX_CHUNKS {
            t.record_chunk(1795938040000.0 + i as f64 * 0.123, 1000);
        }
        for i in 0..MAX_PAINTS {
            t.record_paint(Paint {
                t_ms: 1795938040000.0 + i as f64 * 0.321,
                chars: i as u64,
                presentation_ms: Some(1795938040001.5),
            });
        }
        let json = report_json(&t, None, 0.0);
        assert!(json.len() <= MAX_REPORT_BYTES, "{} bytes", json.len());
        let last_bytes = format!("\"bytes\":{}", t.bytes);
        assert!(json.contains(&last_bytes), "the last chunk survives");
        assert!(json.contains(&format!("\"chars\":{}", MAX_PAINTS - 1)), "the last paint survives");
        assert!(json.contains("\"chunks_dropped\":") && !json.contains("\"chunks_dropped\":0"));
    }
}
