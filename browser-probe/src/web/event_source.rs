//! The `window.EventSource` wrapper: a tracked event stream becomes a turn, read like a fetch
//! stream whose reads are the events the browser dispatched.
//!
//! Tracked: the URLs the app's `trackFetch(url)` predicate accepts (by default, same-origin
//! ones). An `EventSource` cannot send headers, so the trace context goes in the URL's
//! `tokentap_traceparent` query parameter (the app server reads it there and continues the
//! trace). The probe listens beside the app: `open` (the response), every event type the app
//! listens to (`message`, and each type the app passes to `addEventListener`: the probe adds its
//! own listener for that type first, once, so its stamp comes before the app's handler runs), and the
//! end: the app's `close()` or the first `error` (the server ended the stream; the browser's
//! reconnection would be another stream, not this turn). Each event's `data` is one read, stamped
//! on arrival and kept to count its answer characters (`body_text`). An `EventSource` shows the
//! page no response headers: `content_encoding`, `via` and `server` stay unknown.

use js_sys::{Array, Function, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::EventTarget;

use super::fetch::end_turn;
use super::socket::traced_url;
use super::{body_text, get, now_ms, send_reports, with_probe};
use crate::answer_text::TextFormat;
use tokentap_probe_protocol::Transport;

/// Replaces `window.EventSource` with a `Proxy` whose `construct` tracks the stream (once).
pub(super) fn install() {
    super::wrap_constructor("EventSource", construct);
}

fn construct(target: Function, args: Array, new_target: Function) -> Result<JsValue, JsValue> {
    let predicate = with_probe(|p| p.track_fetch.clone());
    let tracked = traced_url(&args.get(0), |page, url| match &predicate {
        // The app's predicate runs without the probe borrowed; it may call mark().
        Some(f) => f.call1(&JsValue::NULL, &url.href().into()).is_ok_and(|v| v.is_truthy()),
        None => page.origin().is_ok_and(|o| o == url.origin()),
    });
    let Some((url, info)) = tracked else {
        return Reflect::construct_with_new_target(&target, &args, &new_target);
    };
    let tracked_args = args.slice(0, args.length());
    tracked_args.set(0, url.into());
    let source = Reflect::construct_with_new_target(&target, &tracked_args, &new_target)?;
    let (turn, evicted) = with_probe(|p| {
        let now = p.now_ms();
        let (id, evicted) = p.turns.start(info, now);
        if let Some(t) = p.turns.get_mut(id) {
            t.response_path.transport = Some(Transport::EventSource);
        }
        (id, evicted)
    });
    body_text::start_messages(turn, TextFormat::Sse);
    send_reports(evicted.into_iter().collect());
    listen(&source, turn);
    Ok(source)
}

/// The probe's listeners, and the instance's `addEventListener` and `close` wrapped so the probe
/// hears every event type the app listens to, and the app's close.
fn listen(source: &JsValue, turn: u32) {
    let target: &EventTarget = source.unchecked_ref();
    let on_open = Closure::<dyn FnMut()>::new(move || {
        with_probe(|p| {
            let now = p.now_ms();
            if let Some(t) = p.turns.get_mut(turn) {
                t.record_response(now, 200);
            }
        });
    });
    let on_event: Function = Closure::<dyn FnMut(JsValue)>::new(move |event: JsValue| {
        body_text::message_arrived(turn, now_ms(), &get(&event, "data"))
    })
    .into_js_value()
    .unchecked_into();
    let on_end: Function = Closure::<dyn FnMut()>::new(move || end_turn(turn)).into_js_value().unchecked_into();
    let _ = target.add_event_listener_with_callback("open", on_open.as_ref().unchecked_ref());
    let _ = target.add_event_listener_with_callback("message", &on_event);
    let _ = target.add_event_listener_with_callback("error", &on_end);
    on_open.forget();

    let add = get(source, "addEventListener").unchecked_into::<Function>();
    let this = source.clone();
    // The browser adds one listener once per type: no list of the types already heard is needed
    // (and `open`/`error` events carry no data, so the probe's listener ignores them).
    let wrapped_add = Closure::<dyn FnMut(JsValue, JsValue, JsValue) -> Result<JsValue, JsValue>>::new(
        move |kind: JsValue, listener: JsValue, options: JsValue| {
            let _ = add.call2(&this, &kind, &on_event);
            add.call3(&this, &kind, &listener, &options)
        },
    );
    let _ = Reflect::set(source, &"addEventListener".into(), &wrapped_add.into_js_value());
    let close = get(source, "close").unchecked_into::<Function>();
    let this = source.clone();
    let wrapped_close = Closure::<dyn FnMut() -> Result<JsValue, JsValue>>::new(move || {
        end_turn(turn);
        close.call0(&this)
    });
    let _ = Reflect::set(source, &"close".into(), &wrapped_close.into_js_value());
}
