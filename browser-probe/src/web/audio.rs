//! When audio actually becomes audible, when it runs dry, and when it stops.
//!
//! An AudioContext says which context time is leaving the output device at which
//! `performance.now()` (`getOutputTimestamp()`): the output latency is already in that pair
//! (Chromium subtracts the playout delay from the position). The probe polls it once per frame
//! until the output clock has passed the app's first sound, then maps that context time to
//! wall-clock time. It reports `outputLatency` alongside, without adding it. Buffers the app
//! schedules (`audioScheduled`) give the playback's gaps and its end. A media element only says
//! when playback started (`playing`); the probe adds the output latency of a tracked AudioContext
//! if there is one, else reports the latency as unknown; `waiting`, `ended` and `pause` give its
//! underruns, its end and an early stop.
//!
//! Every call may name the `Response` whose audio is playing (the one the probe's `fetch` returned);
//! its turn then gets the playback even when a later request (the next sentence) is already open.

use js_sys::{Function, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{AudioContext, HtmlMediaElement};

use super::{get, now_ms, schedule_settle, with_probe, Target};
use crate::turn::{AudioKind, AudioStart};

/// How long a playback's first sound is awaited before giving up (a minute).
const MAX_AUDIBLE_WAIT_MS: f64 = 60_000.0;
/// Playbacks whose first sound is awaited at once; a page starting more gets no audible time for
/// the extra ones (each watch holds a context handle and a few numbers).
pub(super) const MAX_AUDIBLE_WATCHES: usize = 256;
/// The element property that remembers which turn a media element is playing for.
const ELEMENT_TURN: &str = "__tokentapTurn";
/// The element property set once the probe listens to it.
const ELEMENT_OBSERVED: &str = "__tokentapObserved";

/// A playback whose first sound has not been seen leaving the output yet: the context it plays
/// on, the context time of that sound (`None`: whatever plays first), where it goes, and until
/// when it is awaited.
///
/// One animation-frame loop reads every watch while there are any. They are also read at once
/// whenever the probe is about to stop or report playbacks (`stopAudio`, `flush`, the settle
/// timer): a late frame must not let a turn be reported without a first sound that had already
/// left the output.
pub(super) struct AudibleWatch {
    context: AudioContext,
    start: Option<f64>,
    at: Target,
    until_ms: f64,
}

pub(super) fn track_audio_context(context: AudioContext, start_context_time: Option<f64>, at: Target) {
    let frame_armed = with_probe(|p| {
        if p.audible_watches.len() < MAX_AUDIBLE_WATCHES {
            let until_ms = p.now_ms() + MAX_AUDIBLE_WAIT_MS;
            p.audible_watches.push(AudibleWatch { context, start: start_context_time, at, until_ms });
        }
        p.audible_frame_armed
    });
    if !frame_armed {
        on_frame();
    }
}

/// The context's output clock: (context time, performance time) of the sample leaving the device.
fn output_timestamp(context: &AudioContext) -> Option<(f64, f64)> {
    let timestamp = Reflect::get(context, &"getOutputTimestamp".into())
        .ok()
        .and_then(|f| f.dyn_into::<Function>().ok())
        .and_then(|f| f.call0(context).ok())?;
    let context_time = get(&timestamp, "contextTime").as_f64()?;
    let performance_time = get(&timestamp, "performanceTime").as_f64()?;
    Some((context_time, performance_time))
}

/// One frame: reads the watches, and comes back next frame while some are left.
fn on_frame() {
    let left = read_audible_now();
    let window = with_probe(|p| {
        p.audible_frame_armed = left;
        p.window.clone()
    });
    if left {
        let next = Closure::once_into_js(on_frame);
        let _ = window.request_animation_frame(next.unchecked_ref());
    }
}

/// Reads every watched playback's output clock now: those whose first sound has left the output
/// get it (when it left, on the wall clock), those awaited too long are dropped. Whether any are
/// left.
pub(super) fn read_audible_now() -> bool {
    let watches = with_probe(|p| std::mem::take(&mut p.audible_watches));
    if watches.is_empty() {
        return false;
    }
    let mut waiting = Vec::with_capacity(watches.len());
    for watch in watches {
        let (context_time, performance_time) = output_timestamp(&watch.context).unwrap_or((0.0, 0.0));
        let running = get(&watch.context, "state").as_string().as_deref() == Some("running");
        let threshold = watch.start.unwrap_or(0.0);
        if !(running && performance_time > 0.0 && context_time > threshold) {
            if now_ms() < watch.until_ms {
                waiting.push(watch);
            }
            continue;
        }
        let latency_ms = get(&watch.context, "outputLatency").as_f64().map(|s| s * 1000.0);
        with_probe(|p| {
            // Where the first sound's context time falls on the performance timeline. That is
            // when it left the output device: `performanceTime` already includes the output
            // latency, so adding `outputLatency` again would count it twice.
            let at_ms = match watch.start {
                Some(_) => performance_time + (threshold.max(0.0) - context_time) * 1000.0,
                None => performance_time,
            };
            let audible_ms = p.time_origin + at_ms;
            p.audio_output_latency_ms = latency_ms.or(p.audio_output_latency_ms);
            let (turn, response) = watch.at;
            p.turns.audio(
                AudioStart { kind: AudioKind::AudioContext, audible_ms, output_latency_ms: latency_ms },
                turn,
                response,
            );
        });
        schedule_settle();
    }
    let left = !waiting.is_empty();
    // Nothing above calls app code, so no watch was added meanwhile.
    with_probe(|p| p.audible_watches = waiting);
    left
}

/// The app scheduled a buffer of `duration` seconds at context time `when`. The first one of a
/// turn starts its playback (and the watch for when it is heard).
pub(super) fn scheduled(context: AudioContext, when: f64, duration: f64, at: Target) {
    let (turn, response) = at;
    let (clock, current) = (output_timestamp(&context), get(&context, "currentTime").as_f64().unwrap_or(0.0));
    let first = with_probe(|p| {
        let origin = p.time_origin;
        let now = p.now_ms();
        let latency_ms = get(&context, "outputLatency").as_f64().unwrap_or(0.0) * 1000.0;
        // Context seconds to wall ms: through the output clock when it runs, else from now.
        let to_wall = move |s: f64| match clock {
            Some((context_time, performance_time)) if performance_time > 0.0 => {
                origin + performance_time + (s - context_time) * 1000.0
            }
            _ => now + (s - current) * 1000.0 + latency_ms,
        };
        let Some(playout) = p.turns.turn_or_newest(turn).and_then(|t| t.playout_for(AudioKind::AudioContext, response))
        else {
            return false;
        };
        let first = playout.is_unscheduled() && playout.audible_ms.is_none();
        playout.schedule(when, duration, to_wall);
        first
    });
    if first {
        track_audio_context(context, Some(when), at);
    }
    schedule_settle();
}

/// The app stopped the turn's playback (barge-in, or its own stop button): in a realtime session,
/// the named response's, else every playback still going.
pub(super) fn stopped(at: Target, named_response: bool) {
    // What had already been heard when the app stopped it counts as heard, whatever the frames.
    read_audible_now();
    let (turn, response) = at;
    with_probe(|p| {
        let now = p.now_ms();
        let Some(t) = p.turns.turn_or_newest(turn) else { return };
        if named_response {
            if let Some(playout) = t.playout_for(AudioKind::AudioContext, response).filter(|a| !a.is_stopped()) {
                playout.stopped(now);
            }
            return;
        }
        for playout in t.playouts_mut().filter(|a| !a.is_stopped()) {
            playout.stopped(now);
        }
    });
    schedule_settle();
}

/// What a media element event means for its playback.
#[derive(Clone, Copy)]
enum MediaEvent {
    Playing,
    Waiting,
    Ended,
    Pause,
}

pub(super) fn observe_media_element(element: HtmlMediaElement, turn: Option<u32>) {
    let value = turn.map_or(JsValue::UNDEFINED, |t| JsValue::from_f64(f64::from(t)));
    let _ = Reflect::set(&element, &ELEMENT_TURN.into(), &value);
    if get(&element, ELEMENT_OBSERVED).is_truthy() {
        return;
    }
    let _ = Reflect::set(&element, &ELEMENT_OBSERVED.into(), &JsValue::TRUE);
    for (name, event) in [
        ("playing", MediaEvent::Playing),
        ("waiting", MediaEvent::Waiting),
        ("ended", MediaEvent::Ended),
        ("pause", MediaEvent::Pause),
    ] {
        let target = element.clone();
        let listener = Closure::<dyn FnMut()>::new(move || on_media_event(&target, event));
        let _ = element.add_event_listener_with_callback(name, listener.as_ref().unchecked_ref());
        listener.forget();
    }
}

fn on_media_event(element: &HtmlMediaElement, event: MediaEvent) {
    let named = get(element, ELEMENT_TURN).as_f64().map(|t| t as u32);
    let resolved = with_probe(|p| {
        let now = p.now_ms();
        let latency_ms = p.audio_output_latency_ms;
        let turn = p.turns.turn_or_newest(named)?;
        let id = turn.id;
        let playout = turn.playout_for(AudioKind::MediaElement, None)?;
        match event {
            MediaEvent::Playing if playout.audible_ms.is_none() => {
                playout.heard(now + latency_ms.unwrap_or(0.0), latency_ms);
            }
            MediaEvent::Playing => playout.resumed(now),
            MediaEvent::Waiting => playout.waiting(now),
            MediaEvent::Ended => playout.ended(now),
            // `pause` also comes just before `ended` at the end of the media.
            MediaEvent::Pause if element.ended() => playout.ended(now),
            MediaEvent::Pause => playout.stopped(now),
        }
        Some(id)
    });
    // Later events of this playback go to the same turn, even once another request is open.
    if named.is_none() {
        if let Some(id) = resolved {
            let _ = Reflect::set(element, &ELEMENT_TURN.into(), &JsValue::from_f64(f64::from(id)));
        }
    }
    schedule_settle();
}
