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

use super::{get, schedule_settle, with_probe, Target};
use crate::turn::{AudioKind, AudioStart};

/// Frames to poll before giving up (about a minute at 60 Hz).
const MAX_POLLS: u32 = 3600;
/// The element property that remembers which turn a media element is playing for.
const ELEMENT_TURN: &str = "__tokentapTurn";
/// The element property set once the probe listens to it.
const ELEMENT_OBSERVED: &str = "__tokentapObserved";

pub(super) fn track_audio_context(context: AudioContext, start_context_time: Option<f64>, at: Target) {
    poll(context, start_context_time, at, 0);
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

fn poll(context: AudioContext, start: Option<f64>, at: Target, polls: u32) {
    if polls >= MAX_POLLS {
        return;
    }
    let (context_time, performance_time) = output_timestamp(&context).unwrap_or((0.0, 0.0));
    let running = get(&context, "state").as_string().as_deref() == Some("running");
    let threshold = start.unwrap_or(0.0);
    if running && performance_time > 0.0 && context_time > threshold {
        let latency_ms = get(&context, "outputLatency").as_f64().map(|s| s * 1000.0);
        with_probe(|p| {
            // Where the first sound's context time falls on the performance timeline. That is
            // when it left the output device: `performanceTime` already includes the output
            // latency, so adding `outputLatency` again would count it twice.
            let at_ms = performance_time + (threshold.max(0.0) - context_time) * 1000.0;
            let at_ms = if start.is_some() { at_ms } else { performance_time };
            let audible_ms = p.time_origin + at_ms;
            p.audio_output_latency_ms = latency_ms.or(p.audio_output_latency_ms);
            let (turn, response) = at;
            p.turns.audio(
                AudioStart { kind: AudioKind::AudioContext, audible_ms, output_latency_ms: latency_ms },
                turn,
                response,
            );
        });
        schedule_settle();
        return;
    }
    let window = with_probe(|p| p.window.clone());
    let next = Closure::once_into_js(move || poll(context, start, at, polls + 1));
    let _ = window.request_animation_frame(next.unchecked_ref());
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
