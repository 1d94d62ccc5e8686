//! Everything that touches the browser, and the JS API (`init`, `observe`, `mark`, `trackAudio`,
//! `audioScheduled`, `stopAudio`, `observeMedia`, `flush`).
//!
//! All state lives in one `Probe` behind a thread-local `RefCell` (a page has one thread). Every
//! callback borrows it briefly and never calls back into app code while holding it: the app's
//! `trackFetch` predicate may itself call `mark()`.
//!
//! - `fetch`: the `window.fetch` wrapper and the body stream that stamps each chunk.
//! - `paint`: `observe()` (MutationObserver → rAF → post-frame task) and long animation frames.
//! - `audio`: `trackAudio()` and `observeMedia()`.
//! - `send`: `sendBeacon`, with a `fetch` fallback.
//! - `body_text`: the body chunks kept per turn and counted for answer characters at report time.
//! - `event_source`: the `window.EventSource` wrapper: a tracked event stream gets a trace context
//!   in its URL and becomes a turn whose events are its reads.
//! - `socket`: the `window.WebSocket` wrapper: a tracked socket gets a trace context in its URL and
//!   becomes a turn: a realtime session whose responses the probe follows, or the app's own socket
//!   relaying the answer's text, whose messages are its reads.
//! - `peer`: the `window.RTCPeerConnection` wrapper: a peer connection joins the turn of the request
//!   that carried its offer, and its received audio, the user's speech and its data channels'
//!   events are read on one timer until it closes.
//! - `tap`: the `AudioWorklet` tap on a peer connection's microphone and remote audio tracks (the
//!   user's speech and the answers' onsets from the samples).

mod audio;
mod body_text;
mod event_source;
mod fetch;
mod paint;
mod peer;
mod send;
mod socket;
mod tap;

use std::cell::RefCell;

use js_sys::{Array, Function, Object, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use crate::clock::{self, ClockEstimate, ClockSample, CLOCK_SAMPLES};
use crate::turn::{Mark, Turn, Turns, MAX_MARK_NAME_BYTES};

const DEFAULT_ENDPOINT: &str = "/_tokentap/v1/probe";
const DEFAULT_CLOCK_URL: &str = "/_tokentap/v1/clock";

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn performance_now() -> f64;
}

struct Probe {
    window: web_sys::Window,
    time_origin: f64,
    endpoint: String,
    /// The page's own `fetch`, before the wrapper replaced it.
    original_fetch: Option<Function>,
    /// The app's `trackFetch(url)` predicate; `None` tracks same-origin requests.
    track_fetch: Option<Function>,
    /// The app's `trackWebSocket(url)` predicate; `None` tracks sockets to the page's host whose
    /// path contains `realtime`.
    track_websocket: Option<Function>,
    turns: Turns,
    clock: Option<ClockEstimate>,
    settle_timer: Option<i32>,
    /// The settle timer's callback, made once.
    on_settle_timer: Option<Closure<dyn FnMut()>>,
    paint: paint::PaintState,
    /// Output latency of the last tracked AudioContext, used for media elements too.
    audio_output_latency_ms: Option<f64>,
    /// The responses the probe's `fetch` returned → their turn ids (so audio calls can name one).
    responses: js_sys::WeakMap,
    /// Playbacks whose first sound is awaited (at most [`audio::MAX_AUDIBLE_WATCHES`]).
    audible_watches: Vec<audio::AudibleWatch>,
    /// Whether an animation frame will read them.
    audible_frame_armed: bool,
}

thread_local! {
    static PROBE: RefCell<Probe> = RefCell::new(Probe::new());
}

impl Probe {
    fn new() -> Probe {
        let window: web_sys::Window = js_sys::global().unchecked_into();
        let time_origin = window.performance().map_or(0.0, |p| p.time_origin());
        Probe {
            window,
            time_origin,
            endpoint: DEFAULT_ENDPOINT.to_string(),
            original_fetch: None,
            track_fetch: None,
            track_websocket: None,
            turns: Turns::default(),
            clock: None,
            settle_timer: None,
            on_settle_timer: None,
            paint: paint::PaintState::default(),
            audio_output_latency_ms: None,
            responses: js_sys::WeakMap::new(),
            audible_watches: Vec::new(),
            audible_frame_armed: false,
        }
    }

    fn now_ms(&self) -> f64 {
        self.time_origin + performance_now()
    }

    /// The page's `fetch`, unwrapped (for the probe's own requests).
    fn fetch_fn(&self) -> Function {
        self.original_fetch.clone().unwrap_or_else(|| {
            Reflect::get(&self.window, &"fetch".into())
                .map(JsCast::unchecked_into)
                .unwrap_or_else(|_| Function::new_no_args(""))
        })
    }
}

/// Runs `f` with the probe state borrowed.
fn with_probe<R>(f: impl FnOnce(&mut Probe) -> R) -> R {
    PROBE.with(|p| f(&mut p.borrow_mut()))
}

/// Wall-clock milliseconds as the browser sees them.
fn now_ms() -> f64 {
    with_probe(|p| p.now_ms())
}

fn get(target: &JsValue, key: &str) -> JsValue {
    Reflect::get(target, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

/// The probe's side of an app's `new X(...)`: the original constructor, the arguments and
/// `new.target` (the constructor itself unless the app subclassed it).
type Construct = fn(Function, Array, Function) -> Result<JsValue, JsValue>;

/// Replaces `window[name]` with a `Proxy` whose `construct` is `construct` (nothing when the page
/// has no such constructor). Everything else (static members, `instanceof`) goes to the original.
fn wrap_constructor(name: &str, construct: Construct) {
    let window = with_probe(|p| p.window.clone());
    let original = get(&window, name);
    if !original.is_function() {
        return;
    }
    let handler = Object::new();
    let trap = Closure::<dyn FnMut(Function, Array, JsValue) -> Result<JsValue, JsValue>>::new(
        move |target: Function, args: Array, new_target: JsValue| {
            let new_target = new_target.dyn_into().unwrap_or_else(|_| target.clone());
            construct(target, args, new_target)
        },
    );
    let _ = Reflect::set(&handler, &"construct".into(), trap.as_ref());
    trap.forget();
    let _ = Reflect::set(&window, &name.into(), &js_sys::Proxy::new(&original, &handler));
}

/// Starts the probe: wraps `fetch`, `EventSource` and `WebSocket`, watches long frames, reports on `pagehide`, and measures the
/// clock offset to tokentap. Options: `endpoint`, `clockUrl` (`null` skips the clock), `trackFetch`,
/// `trackWebSocket`.
/// The promise resolves when the clock round trips are done; tracking starts at once.
/// `tap_track` is `probe.js`'s `tapTrack`, the `AudioWorklet` tap on peer connections' audio
/// tracks (`tap`); without it the probe estimates from `getStats()` alone.
#[wasm_bindgen]
pub fn init(options: JsValue, tap_track: JsValue) -> Promise {
    let endpoint = get(&options, "endpoint").as_string();
    let track_fetch = get(&options, "trackFetch").dyn_into::<Function>().ok();
    let track_websocket = get(&options, "trackWebSocket").dyn_into::<Function>().ok();
    let clock_url = match get(&options, "clockUrl") {
        v if v.is_undefined() => Some(DEFAULT_CLOCK_URL.to_string()),
        v => v.as_string(),
    };
    let first_time = with_probe(|p| {
        if let Some(endpoint) = endpoint {
            p.endpoint = endpoint;
        }
        p.track_fetch = track_fetch;
        p.track_websocket = track_websocket;
        p.original_fetch.is_none()
    });
    if first_time {
        tap::set_tap_track(tap_track);
        fetch::install();
        event_source::install();
        socket::install();
        peer::install();
        paint::watch_long_frames();
        let on_pagehide = Closure::<dyn FnMut()>::new(flush);
        let window = with_probe(|p| p.window.clone());
        let _ = window.add_event_listener_with_callback("pagehide", on_pagehide.as_ref().unchecked_ref());
        on_pagehide.forget();
    }
    wasm_bindgen_futures::future_to_promise(async move {
        if let Some(url) = clock_url {
            let estimate = measure_clock(&url).await;
            with_probe(|p| p.clock = estimate);
        }
        Ok(JsValue::UNDEFINED)
    })
}

/// Round trips to tokentap's clock endpoint; the shortest one gives the offset.
async fn measure_clock(url: &str) -> Option<ClockEstimate> {
    let (fetch, window) = with_probe(|p| (p.fetch_fn(), JsValue::from(p.window.clone())));
    let options = Object::new();
    let _ = Reflect::set(&options, &"cache".into(), &"no-store".into());
    let mut samples = Vec::new();
    for _ in 0..CLOCK_SAMPLES {
        let sent_ms = now_ms();
        let Ok(promise) = fetch.call2(&window, &url.into(), &options) else { break };
        let Ok(response) = JsFuture::from(Promise::from(promise)).await else { break };
        let response: web_sys::Response = response.unchecked_into();
        if !response.ok() {
            break;
        }
        let Ok(json) = response.json() else { break };
        let Ok(body) = JsFuture::from(json).await else { break };
        let received_ms = now_ms();
        let Some(server_ms) = get(&body, "server_time_ms").as_f64() else { break };
        samples.push(ClockSample { sent_ms, server_ms, received_ms });
    }
    clock::estimate(&samples)
}

/// Text paints of `element` (the element that shows the answer) belong to the current turn.
/// Observing another element replaces the previous one.
#[wasm_bindgen]
pub fn observe(element: web_sys::Element) {
    paint::observe(element);
}

/// A user-level moment (`user_send`, `user_speech_end`, …). `t_ms` defaults to now. Made while a
/// tracked stream is open, it belongs to that turn; made between streams, to the next one.
#[wasm_bindgen]
pub fn mark(name: String, t_ms: Option<f64>) {
    let mut name = name;
    if name.len() > MAX_MARK_NAME_BYTES {
        let mut cut = MAX_MARK_NAME_BYTES;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
    }
    with_probe(|p| {
        let t_ms = t_ms.unwrap_or_else(|| p.now_ms());
        p.turns.mark(Mark { name, t_ms });
    });
}

/// Where a playback goes: a turn (`None`: the newest) and, in a realtime session, a response.
type Target = (Option<u32>, Option<usize>);

/// The turn of a response the probe's `fetch` returned, if it is one.
fn turn_of(response: &JsValue) -> Option<u32> {
    let response = response.dyn_ref::<web_sys::Response>()?;
    with_probe(|p| p.responses.get(response).as_f64()).map(|id| id as u32)
}

/// What the app's `response` argument names: a `Response` the probe's `fetch` returned (its turn),
/// a realtime response id (`None` when no tracked session has it), or nothing (the newest turn).
/// In a realtime session the response is fixed now, so the next response does not take it.
fn target_of(response: &JsValue) -> Option<Target> {
    if let Some(id) = response.as_string() {
        return with_probe(|p| p.turns.locate(None, Some(&id))).map(|(turn, index)| (Some(turn), index));
    }
    let turn = turn_of(response);
    let index = with_probe(|p| p.turns.turn_or_newest(turn).and_then(|t| t.realtime.as_ref()?.response_index(None)));
    Some((turn, index))
}

/// When audio played through `context` becomes audible. `start_context_time` is the context time
/// the app scheduled its first sound at; without it, the moment the output clock starts moving.
/// `response` names the fetch whose answer this is (default: the newest unreported one), or a
/// realtime response by its id (`response.id`; default: the one whose audio came last).
#[wasm_bindgen(js_name = trackAudio)]
pub fn track_audio(context: web_sys::AudioContext, start_context_time: Option<f64>, response: JsValue) {
    if let Some(at) = target_of(&response) {
        audio::track_audio_context(context, start_context_time, at);
    }
}

/// The app scheduled a buffer of `duration` seconds at context time `when` (what it passed to
/// `AudioBufferSourceNode.start`) for `response`'s answer. The first buffer starts the playback
/// and the watch for when it is heard; a buffer starting after the end of the ones before is an
/// underrun (the listener heard silence); the last end is the playback's end.
/// In a realtime session `response` may be the response id the audio deltas carry.
#[wasm_bindgen(js_name = audioScheduled)]
pub fn audio_scheduled(context: web_sys::AudioContext, when: f64, duration: f64, response: JsValue) {
    if let Some(at) = target_of(&response) {
        audio::scheduled(context, when, duration, at);
    }
}

/// The app stopped playing `response`'s answer (barge-in): before the scheduled end, the playback
/// is reported as interrupted.
/// In a realtime session a response id stops that response's playback only.
#[wasm_bindgen(js_name = stopAudio)]
pub fn stop_audio(response: JsValue) {
    if let Some(at) = target_of(&response) {
        audio::stopped(at, response.is_string());
    }
}

/// When an `<audio>`/`<video>` element starts playing (its `playing` event, plus the output
/// latency when a tracked AudioContext told us), runs dry (`waiting` … `playing`), ends, or is
/// paused before its end (interrupted). `response` names the fetch whose answer it plays.
#[wasm_bindgen(js_name = observeMedia)]
pub fn observe_media(element: web_sys::HtmlMediaElement, response: JsValue) {
    audio::observe_media_element(element, turn_of(&response));
}

/// Sends the reports of every turn not reported yet, including streams still open.
#[wasm_bindgen]
pub fn flush() {
    audio::read_audible_now();
    let turns = with_probe(|p| p.turns.take_all());
    send_reports(turns);
}

fn send_reports(mut turns: Vec<Turn>) {
    if turns.is_empty() {
        return;
    }
    for turn in &mut turns {
        body_text::count(turn);
    }
    let (endpoint, clock, fetch, now) = with_probe(|p| (p.endpoint.clone(), p.clock, p.fetch_fn(), p.now_ms()));
    for turn in &turns {
        send::send_report(&endpoint, &crate::report::report_json(turn, clock.as_ref(), now), &fetch);
    }
}

/// Re-arms the settle timer for the earliest turn that can settle; reports settled turns.
fn schedule_settle() {
    let window = with_probe(|p| {
        if let Some(handle) = p.settle_timer.take() {
            p.window.clear_timeout_with_handle(handle);
        }
        p.window.clone()
    });
    let Some(deadline) = with_probe(|p| p.turns.next_deadline()) else { return };
    let delay = (deadline - now_ms()).ceil().max(0.0) as i32 + 1;
    let handle = with_probe(|p| {
        let callback = p.on_settle_timer.get_or_insert_with(|| Closure::<dyn FnMut()>::new(on_settle_timer));
        window.set_timeout_with_callback_and_timeout_and_arguments_0(callback.as_ref().unchecked_ref(), delay).ok()
    });
    with_probe(|p| p.settle_timer = handle);
}

fn on_settle_timer() {
    audio::read_audible_now();
    let settled = with_probe(|p| {
        p.settle_timer = None;
        let now = p.now_ms();
        p.turns.take_settled(now)
    });
    send_reports(settled);
    schedule_settle();
}
