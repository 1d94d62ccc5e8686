//! When audio actually becomes audible.
//!
//! An AudioContext says which context time is leaving the output device at which
//! `performance.now()` (`getOutputTimestamp()`): the output latency is already in that pair
//! (Chromium subtracts the playout delay from the position). The probe polls it once per frame
//! until the output clock has passed the app's first sound, then maps that context time to
//! wall-clock time. It reports `outputLatency` alongside, without adding it. A media element only
//! says when playback started (`playing`); the probe adds the output latency of a tracked
//! AudioContext if there is one, else reports the latency as unknown.

use js_sys::{Function, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{AudioContext, HtmlMediaElement};

use super::{get, with_probe};
use crate::turn::{AudioKind, AudioStart};

/// Frames to poll before giving up (about a minute at 60 Hz).
const MAX_POLLS: u32 = 3600;

pub(super) fn track_audio_context(context: AudioContext, start_context_time: Option<f64>) {
    poll(context, start_context_time, 0);
}

fn poll(context: AudioContext, start: Option<f64>, polls: u32) {
    if polls >= MAX_POLLS {
        return;
    }
    let timestamp = Reflect::get(&context, &"getOutputTimestamp".into())
        .ok()
        .and_then(|f| f.dyn_into::<Function>().ok())
        .and_then(|f| f.call0(&context).ok());
    let context_time = timestamp.as_ref().and_then(|t| get(t, "contextTime").as_f64()).unwrap_or(0.0);
    let performance_time = timestamp.as_ref().and_then(|t| get(t, "performanceTime").as_f64()).unwrap_or(0.0);
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
            p.turns.audio(AudioStart { kind: AudioKind::AudioContext, audible_ms, output_latency_ms: latency_ms });
        });
        return;
    }
    let window = with_probe(|p| p.window.clone());
    let next = Closure::once_into_js(move || poll(context, start, polls + 1));
    let _ = window.request_animation_frame(next.unchecked_ref());
}

pub(super) fn observe_media_element(element: HtmlMediaElement) {
    let on_playing = Closure::<dyn FnMut()>::new(|| {
        with_probe(|p| {
            let latency_ms = p.audio_output_latency_ms;
            let audible_ms = p.now_ms() + latency_ms.unwrap_or(0.0);
            p.turns.audio(AudioStart { kind: AudioKind::MediaElement, audible_ms, output_latency_ms: latency_ms });
        });
    });
    let _ = element.add_event_listener_with_callback("playing", on_playing.as_ref().unchecked_ref());
    on_playing.forget();
}
