//! When the observed answer text reaches the screen, and which frames were long.
//!
//! No browser API reports every paint of streamed text, so the probe approximates it: a
//! MutationObserver sees the DOM change, `requestAnimationFrame` finds the frame that will render
//! it, and a task posted from inside that rAF callback runs right after the frame's rendering
//! steps. That task's time is the paint stamp; the text length read in the rAF callback (just
//! before rendering) is what the frame showed. Several mutations before one frame make one paint.

use js_sys::{Array, Object, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{Element, MessageChannel, MutationObserver, MutationObserverInit, PerformanceEntry, PerformanceObserver};

use super::{get, with_probe};
use crate::turn::{LongFrame, Paint};

/// The observer and its callbacks, made on the first `observe()` and kept for the page's life.
#[derive(Default)]
pub(super) struct PaintState {
    element: Option<Element>,
    observer: Option<MutationObserver>,
    channel: Option<MessageChannel>,
    on_mutation: Option<Closure<dyn FnMut()>>,
    on_frame: Option<Closure<dyn FnMut()>>,
    on_post_frame: Option<Closure<dyn FnMut()>>,
    frame_requested: bool,
    /// Characters read in rAF callbacks whose post-frame task has not run yet, oldest first.
    frames_in_flight: Vec<u64>,
}

pub(super) fn observe(element: Element) {
    with_probe(|p| {
        let state = &mut p.paint;
        if state.observer.is_none() {
            let on_mutation = Closure::<dyn FnMut()>::new(on_mutation);
            let on_frame = Closure::<dyn FnMut()>::new(on_frame);
            let on_post_frame = Closure::<dyn FnMut()>::new(on_post_frame);
            let Ok(observer) = MutationObserver::new(on_mutation.as_ref().unchecked_ref()) else { return };
            let Ok(channel) = MessageChannel::new() else { return };
            channel.port1().set_onmessage(Some(on_post_frame.as_ref().unchecked_ref()));
            state.observer = Some(observer);
            state.channel = Some(channel);
            state.on_mutation = Some(on_mutation);
            state.on_frame = Some(on_frame);
            state.on_post_frame = Some(on_post_frame);
        }
        let Some(observer) = &state.observer else { return };
        observer.disconnect();
        let options = MutationObserverInit::new();
        options.set_child_list(true);
        options.set_character_data(true);
        options.set_subtree(true);
        let _ = observer.observe_with_options(&element, &options);
        state.element = Some(element);
    });
}

fn on_mutation() {
    with_probe(|p| {
        if p.paint.frame_requested {
            return;
        }
        if let Some(on_frame) = &p.paint.on_frame {
            p.paint.frame_requested = p.window.request_animation_frame(on_frame.as_ref().unchecked_ref()).is_ok();
        }
    });
}

/// Inside the frame that will render the change: read what it will show, then post the task that
/// runs after rendering.
fn on_frame() {
    with_probe(|p| {
        let state = &mut p.paint;
        state.frame_requested = false;
        let chars = state.element.as_ref().and_then(|e| e.text_content()).map_or(0, |t| t.chars().count() as u64);
        if let Some(channel) = &state.channel {
            if channel.port2().post_message(&JsValue::UNDEFINED).is_ok() {
                state.frames_in_flight.push(chars);
            }
        }
    });
}

fn on_post_frame() {
    with_probe(|p| {
        let t_ms = p.now_ms();
        if p.paint.frames_in_flight.is_empty() {
            return;
        }
        let chars = p.paint.frames_in_flight.remove(0);
        p.turns.paint(Paint { t_ms, chars, presentation_ms: None });
    });
}

/// Long animation frames (Chromium 123+), or long tasks where those are not exposed, go to the
/// turns they overlap.
pub(super) fn watch_long_frames() {
    let supported = Reflect::get(&js_sys::global(), &"PerformanceObserver".into())
        .map(|ctor| get(&ctor, "supportedEntryTypes"))
        .ok()
        .and_then(|v| v.dyn_into::<Array>().ok())
        .unwrap_or_default();
    let entry_type = if supported.includes(&"long-animation-frame".into(), 0) {
        "long-animation-frame"
    } else if supported.includes(&"longtask".into(), 0) {
        "longtask"
    } else {
        return;
    };
    let callback = Closure::<dyn FnMut(JsValue)>::new(|list: JsValue| {
        let Ok(get_entries) = Reflect::get(&list, &"getEntries".into()).and_then(|f| f.dyn_into::<js_sys::Function>())
        else {
            return;
        };
        let Ok(entries) = get_entries.call0(&list) else { return };
        let entries: Array = entries.unchecked_into();
        with_probe(|p| {
            for entry in entries.iter() {
                let entry: PerformanceEntry = entry.unchecked_into();
                let duration_ms = entry.duration();
                // LoAF has blockingDuration; for a long task, the part beyond 50 ms blocks input.
                let blocking_ms = get(&entry, "blockingDuration").as_f64().unwrap_or((duration_ms - 50.0).max(0.0));
                let frame = LongFrame { start_ms: p.time_origin + entry.start_time(), duration_ms, blocking_ms };
                p.turns.long_frame(frame);
            }
        });
    });
    let Ok(observer) = PerformanceObserver::new(callback.as_ref().unchecked_ref()) else { return };
    let options = Object::new();
    let _ = Reflect::set(&options, &"type".into(), &entry_type.into());
    observer.observe(options.unchecked_ref());
    callback.forget();
}
