//! `tokentap explain` for a realtime (WebSocket) session: per response, the chain of waits from
//! the user's end of speech (or the client's `response.create`) to the first audio delta, and to
//! the audio heard in the browser when the probe saw the page, with the largest wait named.

use std::fmt::Write as _;

use serde::Serialize;
use tokentap_analysis::realtime::{RealtimeResponse, RealtimeSession, ResponseTrigger};
use tokentap_record::browser::timeline::BrowserRealtimeResponse;
use tokentap_record::Record;

use crate::markdown::number;

/// An enum's serialized name (`server_vad`, `completed`, …).
fn name_of(value: &impl Serialize) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_else(|| "other".into())
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_owned(), number)
}

/// One wait of a response: its name and its length.
struct Wait {
    what: &'static str,
    ms: f64,
}

/// The waits of `r` in order, each between two instants both known.
fn waits(r: &RealtimeResponse, page: Option<&BrowserRealtimeResponse>) -> Vec<Wait> {
    let user = r.user.as_ref();
    let mut out = Vec::new();
    let mut push = |what: &'static str, from: Option<f64>, to: Option<f64>| {
        if let (Some(from), Some(to)) = (from, to) {
            out.push(Wait { what, ms: to - from });
        }
    };
    let end = user.and_then(|u| u.speech_end_estimated_ms);
    let stopped = user.and_then(|u| u.speech_stopped_ms);
    push("the server's end-of-turn decision (end of speech → speech_stopped)", end, stopped);
    let before_created = stopped.or(r.create_sent_ms);
    let label = if stopped.is_some() {
        "speech_stopped → response.created"
    } else {
        "the client's response.create → response.created"
    };
    push(label, before_created, Some(r.created_ms));
    push("the server: response.created → first audio delta", Some(r.created_ms), r.first_audio_ms);
    let heard = page.and_then(|p| p.heard_ms);
    push("delivery and playback: first audio delta at tokentap → heard in the browser", r.first_audio_ms, heard);
    out
}

/// Appends the session's explanation to `out`.
pub(super) fn explain_session(out: &mut String, record: &Record, s: &RealtimeSession) {
    let w = out;
    let _ = writeln!(
        w,
        "realtime session (WebSocket): model {}, {} responses, {} ms long, ended {}",
        s.model.as_deref().map_or("?".to_owned(), super::plain),
        s.responses.len(),
        number(s.duration_ms),
        name_of(&s.end).replace('_', " ")
    );
    if let Some(td) = &s.turn_detection {
        let _ = writeln!(
            w,
            "turn detection: {}{}",
            name_of(&td.kind).replace('_', " "),
            td.silence_duration_ms.map_or(String::new(), |ms| format!(" (silence {} ms)", number(ms)))
        );
    }
    let _ = writeln!(
        w,
        "audio sent {} ms in {} appends; messages client → server {}, server → client {}; errors {}",
        number(s.input_audio_ms),
        s.appends,
        s.client.frames.messages,
        s.server.frames.messages,
        s.errors.len()
    );
    let page: Vec<&BrowserRealtimeResponse> =
        record.browser.as_ref().map(|b| b.realtime.iter().collect()).unwrap_or_default();
    if page.is_empty() {
        let _ = writeln!(
            w,
            "the browser probe did not report this session: times below are tokentap's (the wire), not what was heard"
        );
    }
    if s.responses.is_empty() {
        let _ =
            writeln!(w, "\nno response in this session: nothing was asked of the model, or the session ended first");
        return;
    }
    let _ = writeln!(w, "\nper response (ms since the WebSocket opened):");
    let mut worst: Option<(usize, Wait)> = None;
    for (i, r) in s.responses.iter().enumerate() {
        let seen = page.iter().copied().find(|p| p.index == i);
        let _ = writeln!(
            w,
            "  {}. {} (started by {}), {}",
            i + 1,
            r.response_id.as_deref().map_or("(no id)".to_owned(), super::plain),
            match r.trigger {
                ResponseTrigger::ServerVad => "the server's turn detection",
                ResponseTrigger::Client => "the client's response.create",
                ResponseTrigger::Unknown => "unknown",
            },
            r.status.as_ref().map_or("not done".to_owned(), name_of)
        );
        if let Some(u) = &r.user {
            let _ = writeln!(
                w,
                "     user speech: started {}, ended {} (estimated), speech_stopped {}",
                ms(u.speech_start_estimated_ms.or(u.speech_started_ms)),
                ms(u.speech_end_estimated_ms),
                ms(u.speech_stopped_ms)
            );
        }
        let _ = writeln!(
            w,
            "     response.created {}, first audio delta {}, first text {}, done {}",
            number(r.created_ms),
            ms(r.first_audio_ms),
            ms(r.first_text_ms.or(r.first_audio_transcript_ms)),
            ms(r.done_ms)
        );
        if let Some(p) = seen {
            let _ = writeln!(
                w,
                "     in the browser: first audio delta {}, first audio heard {}{}",
                ms(p.first_audio_ms),
                ms(p.heard_ms),
                p.voice_to_voice_ms.map_or(String::new(), |v| format!(", voice to voice {} ms", number(v)))
            );
        }
        let _ = writeln!(
            w,
            "     audio {} ms in {} deltas{}{}",
            number(r.audio_ms),
            r.audio_deltas,
            r.real_time_factor.map_or(String::new(), |f| format!(", real-time factor {f:.2}")),
            r.predicted.as_ref().map_or(String::new(), |p| format!(", {} predicted underruns", p.underruns))
        );
        for c in &r.tool_calls {
            let _ = writeln!(
                w,
                "     tool call {}: ready {}, output sent {}, next response asked for {}{}",
                c.name.as_deref().map_or("?".to_owned(), super::plain),
                number(c.ready_ms),
                ms(c.output_sent_ms),
                ms(c.next_response_requested_ms),
                c.tool_gap_ms.map_or(String::new(), |g| format!(" ({} ms of tool and client work)", number(g)))
            );
        }
        let x = &r.interruption;
        if !x.is_empty() {
            let _ = writeln!(
                w,
                "     interrupted: user spoke at {}, cancel sent {}, truncated at {} ms of its audio",
                ms(x.speech_started_ms),
                ms(x.cancel_sent_ms),
                ms(x.truncated_at_audio_ms)
            );
        }
        let list = waits(r, seen);
        if !list.is_empty() {
            let _ = writeln!(w, "     the wait, in order:");
            for wait in &list {
                let _ = writeln!(w, "       {:>8} ms  {}", number(wait.ms), wait.what);
            }
        }
        if let Some(largest) = list.into_iter().max_by(|a, b| a.ms.total_cmp(&b.ms)) {
            if worst.as_ref().is_none_or(|(_, w)| largest.ms > w.ms) {
                worst = Some((i, largest));
            }
        }
    }
    match worst {
        Some((i, wait)) => {
            let _ = writeln!(w, "\nlook at: {} ({} ms, response {})", wait.what, number(wait.ms), i + 1);
        }
        None => {
            let _ = writeln!(w, "\nlook at: no response produced audio; see the errors and the responses' status");
        }
    }
}
