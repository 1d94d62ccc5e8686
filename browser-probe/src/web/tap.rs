//! The `AudioWorklet` tap: the probe's ear on a peer connection's audio tracks. The microphone
//! track's samples go through an energy voice-activity detector (the user's speech, to the
//! sample), the remote track's through the same detector (the answers' first audible samples).
//!
//! The tap itself is `tapTrack` in `js/probe.js`, handed to `init`: one `AudioContext` of the
//! probe's own for every tap, made with the first and closed with the last; its worklet (loaded
//! from a `blob:` URL) runs on the audio thread: RMS over 10 ms windows, a window over
//! [`AUDIBLE_RMS`] (−40 dBFS) is audible; a stretch starts at the first sample over the threshold
//! in its first audible window and ends at the last such sample of its last one, once a hangover
//! of quiet windows confirmed it ([`SPEECH_HANGOVER_MS`] on the microphone, [`ANSWER_GAP_MS`] on
//! the answers). It keeps a few numbers, no buffers, and posts only the transitions; the main
//! thread maps their context times to wall-clock time on arrival (now − the audio between them).
//!
//! When the page has no `AudioWorklet` (not a secure context), the module does not load (a content
//! security policy refusing `blob:` scripts) or the context does not start (autoplay policy), the
//! tap says so and the readings' estimates stay in charge.

use std::cell::RefCell;

use js_sys::{Array, Function};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::webrtc::{TapState, WebRtcSeen, ANSWER_GAP_MS, AUDIBLE_RMS, SPEECH_HANGOVER_MS};

/// Which track of a connection a tap listens to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Mic,
    Remote,
}

/// Hands a tap's news to the measurements of the connection at `pc`.
pub(super) type Report = fn(&JsValue, &mut dyn FnMut(&mut WebRtcSeen));

#[derive(Default)]
struct Taps {
    /// `probe.js`'s `tapTrack(track, level, hangoverMs, heard)`.
    tap_track: Option<Function>,
    /// The running taps' connections and the functions that stop them.
    running: Vec<(JsValue, Function)>,
}

thread_local! {
    static TAPS: RefCell<Taps> = RefCell::new(Taps::default());
}

/// What `init` was given to tap tracks with (anything but a function: no taps).
pub(super) fn set_tap_track(f: JsValue) {
    TAPS.with(|t| t.borrow_mut().tap_track = f.dyn_into().ok());
}

fn set_state(pc: &JsValue, side: Side, state: TapState, report: Report) {
    report(pc, &mut |s| match side {
        Side::Mic => s.mic_tap = Some(state),
        Side::Remote => s.remote_tap = Some(state),
    });
}

/// Taps `track`, the `side` track of `pc`, in the background; the connection's measurements learn
/// how it went (`mic_tap`, `remote_tap`) and then hear its transitions.
pub(super) fn start(pc: JsValue, track: JsValue, side: Side, report: Report) {
    let Some(tap_track) = TAPS.with(|t| t.borrow().tap_track.clone()) else {
        set_state(&pc, side, TapState::Unavailable, report);
        return;
    };
    let watched = pc.clone();
    let heard = Closure::<dyn FnMut(f64, f64)>::new(move |audible: f64, t_ms: f64| {
        report(&watched, &mut |s| match side {
            Side::Mic => s.tap_speech(t_ms, audible == 1.0),
            Side::Remote => s.tap_audible(t_ms, audible == 1.0),
        });
    })
    .into_js_value();
    let hangover = if side == Side::Mic { SPEECH_HANGOVER_MS } else { ANSWER_GAP_MS };
    let args: Array = [track, AUDIBLE_RMS.into(), hangover.into(), heard].iter().collect();
    let Ok(outcome) = tap_track.apply(&JsValue::NULL, &args) else {
        set_state(&pc, side, TapState::Blocked, report);
        return;
    };
    let done = Closure::once_into_js(move |outcome: JsValue| {
        let state = match outcome.as_string().as_deref() {
            Some("unavailable") => TapState::Unavailable,
            Some("suspended") => TapState::Suspended,
            Some(_) => TapState::Blocked,
            None => match outcome.clone().dyn_into::<Function>() {
                Ok(stop) => {
                    TAPS.with(|t| t.borrow_mut().running.push((pc.clone(), stop)));
                    TapState::Running
                }
                Err(_) => TapState::Blocked,
            },
        };
        set_state(&pc, side, state, report);
    });
    if let Ok(then) = super::get(&outcome, "then").dyn_into::<Function>() {
        let _ = then.call1(&outcome, &done);
    }
}

/// The connection at `pc` is over: its taps stop (the context closes with the last one).
pub(super) fn stop(pc: &JsValue) {
    let stopped: Vec<Function> = TAPS.with(|t| {
        let mut t = t.borrow_mut();
        let (stopped, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut t.running).into_iter().partition(|(p, _)| p == pc);
        t.running = kept;
        stopped.into_iter().map(|(_, stop)| stop).collect()
    });
    for stop in stopped {
        let _ = stop.call0(&JsValue::NULL);
    }
}
