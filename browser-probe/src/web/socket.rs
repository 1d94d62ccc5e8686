//! The `window.WebSocket` wrapper: a tracked socket becomes a turn. A socket to a realtime
//! endpoint is a voice session (below); any other tracked socket (the app's own, relaying the
//! answer's text) is read like a fetch stream: each text message is one read, stamped on arrival
//! and kept to count its answer characters (`body_text`), and the socket's close ends the turn.
//!
//! A browser's `WebSocket` cannot send headers, so the trace context goes in the URL as the
//! `tokentap_traceparent` query parameter; tokentap reads it, continues the trace and never
//! forwards it. The probe then listens beside the app: `open`, `close`/`error` (the turn's
//! response and end) and `message`, of which it reads only the first and last 512 characters of each text message (its
//! `type` and a delta's `response_id`), parsing whole only the rare messages that name a response
//! or the session. It never reads a message for the app and never changes one.
//!
//! Tracked: sockets whose URL the app's `trackWebSocket(url)` predicate accepts, by default those
//! to the page's own host (where tokentap serves the page) whose path names a realtime endpoint
//! (`/v1/realtime`, `/openai/realtime`, …). A URL that already carries a valid
//! `tokentap_traceparent` keeps it: the app then knows the session's trace id.

use js_sys::{Array, Function, JsString, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{EventTarget, Url};

use super::fetch::new_ids;
use super::{body_text, get, now_ms, schedule_settle, send_reports, with_probe};
use crate::answer_text::TextFormat;
use crate::realtime::{classify, RealtimeSeen, ServerEventKind, HEAD_CHARS};
use crate::trace;
use crate::turn::RequestInfo;
use tokentap_probe_protocol::Transport;

/// The query parameter tokentap reads the trace context from (and strips).
const TRACEPARENT_QUERY: &str = "tokentap_traceparent";

/// Replaces `window.WebSocket` with a `Proxy` whose `construct` tracks the socket (once).
pub(super) fn install() {
    super::wrap_constructor("WebSocket", construct);
}

/// `new WebSocket(url, protocols)`: the original constructor, with the trace context in the URL
/// when the socket is tracked.
fn construct(target: Function, args: Array, new_target: Function) -> Result<JsValue, JsValue> {
    let Some((url, info)) = tracked(&args.get(0)) else {
        return Reflect::construct_with_new_target(&target, &args, &new_target);
    };
    let tracked_args = args.slice(0, args.length());
    tracked_args.set(0, url.into());
    // A URL the browser refuses throws here, before any turn exists.
    let socket = Reflect::construct_with_new_target(&target, &tracked_args, &new_target)?;
    // A socket to a realtime endpoint is a voice session; any other tracked socket relays the
    // answer's text (the app's own protocol), read like a fetch stream, one message per read.
    let realtime = names_path_realtime(&info.path);
    let (turn, evicted) = with_probe(|p| {
        let now = p.now_ms();
        let (id, evicted) = p.turns.start(info, now);
        if let Some(t) = p.turns.get_mut(id) {
            if realtime {
                t.realtime = Some(RealtimeSeen::default());
                t.audio_response = true;
            } else {
                t.response_path.transport = Some(Transport::WebSocket);
            }
        }
        (id, evicted)
    });
    if !realtime {
        body_text::start_messages(turn, TextFormat::Messages);
    }
    send_reports(evicted.into_iter().collect());
    listen(&socket, turn);
    Ok(socket)
}

/// The URL with the trace context, and the turn's request, when the socket is tracked.
fn tracked(url: &JsValue) -> Option<(String, RequestInfo)> {
    let predicate = with_probe(|p| p.track_websocket.clone());
    traced_url(url, |page, url| match &predicate {
        // The app's predicate runs without the probe borrowed; it may call mark().
        Some(f) => f.call1(&JsValue::NULL, &url.href().into()).is_ok_and(|v| v.is_truthy()),
        // Only realtime endpoints: a page's other sockets (a dev server's reload channel, the app's
        // own protocol) keep their URLs untouched.
        None => page.host().is_ok_and(|h| h == url.host()) && names_realtime(url),
    })
}

/// The socket's path names a realtime endpoint (`/v1/realtime`, `/openai/realtime`, …).
fn names_realtime(url: &Url) -> bool {
    names_path_realtime(&url.pathname())
}

/// (A byte search: `str::contains` would bring a substring searcher into the module.)
fn names_path_realtime(path: &str) -> bool {
    path.as_bytes().windows(8).any(|w| w == b"realtime")
}

/// For a stream the page opens by URL (a WebSocket, an EventSource), which cannot carry headers:
/// when `track(page, url)` accepts it, the URL with the trace context in the
/// `tokentap_traceparent` query parameter, and the turn's request. A URL that already carries a
/// valid one keeps it, so an app can name the trace itself.
pub(super) fn traced_url(
    url: &JsValue,
    track: impl FnOnce(&web_sys::Location, &Url) -> bool,
) -> Option<(String, RequestInfo)> {
    let window = with_probe(|p| p.window.clone());
    let page = window.location();
    let page_href = page.href().ok()?;
    let text: String = JsString::from(url.clone()).into();
    let url = Url::new_with_base(&text, &page_href).ok()?;
    if !track(&page, &url) {
        return None;
    }
    let search = url.search();
    let query = search.strip_prefix('?').unwrap_or(&search);
    let existing = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == TRACEPARENT_QUERY)
        .and_then(|(_, value)| trace::parse_traceparent(value));
    let (trace_id, span_id) = match existing {
        Some(ids) => ids,
        None => {
            let (trace_id, span_id) = new_ids(&window);
            let pair = format!("{TRACEPARENT_QUERY}={}", trace::format_traceparent(&trace_id, &span_id));
            url.set_search(&if query.is_empty() { pair } else { format!("{query}&{pair}") });
            (trace_id, span_id)
        }
    };
    let info = RequestInfo {
        trace_id,
        span_id,
        page_path: page.pathname().unwrap_or_default(),
        method: "GET".into(),
        path: url.pathname(),
    };
    Some((url.href(), info))
}

/// The probe's listeners on a tracked socket. They live as long as the socket.
fn listen(socket: &JsValue, turn: u32) {
    let target: &EventTarget = socket.unchecked_ref();
    let on_open = Closure::<dyn FnMut()>::new(move || {
        with_probe(|p| {
            let now = p.now_ms();
            if let Some(t) = p.turns.get_mut(turn) {
                t.record_response(now, 101);
            }
        });
    });
    let on_message = Closure::<dyn FnMut(JsValue)>::new(move |event: JsValue| on_message(turn, &event));
    let on_end = Closure::<dyn FnMut()>::new(move || {
        with_probe(|p| {
            let now = p.now_ms();
            if let Some(t) = p.turns.get_mut(turn) {
                t.record_end(now);
            }
        });
        schedule_settle();
    });
    let _ = target.add_event_listener_with_callback("open", on_open.as_ref().unchecked_ref());
    let _ = target.add_event_listener_with_callback("message", on_message.as_ref().unchecked_ref());
    let _ = target.add_event_listener_with_callback("close", on_end.as_ref().unchecked_ref());
    let _ = target.add_event_listener_with_callback("error", on_end.as_ref().unchecked_ref());
    on_open.forget();
    on_message.forget();
    on_end.forget();
}

fn on_message(turn: u32, event: &JsValue) {
    let t_ms = now_ms();
    let data = get(event, "data");
    if with_probe(|p| p.turns.get_mut(turn).is_some_and(|t| t.realtime.is_none())) {
        body_text::message_arrived(turn, t_ms, &data);
        return;
    }
    let (kind, id) = match data.dyn_ref::<JsString>() {
        Some(text) => {
            let length = text.length();
            let head: String = text.slice(0, HEAD_CHARS).into();
            let tail: Option<String> = (length > HEAD_CHARS).then(|| text.slice(length - HEAD_CHARS, length).into());
            let (kind, delta_response) = classify(&head, tail.as_deref());
            let id = if kind.names_an_id() { id_in(text, kind) } else { delta_response };
            (kind, id)
        }
        None => (ServerEventKind::Other, None),
    };
    with_probe(|p| {
        if let Some(realtime) = p.turns.get_mut(turn).and_then(|t| t.realtime.as_mut()) {
            realtime.message(t_ms, kind, id.as_deref());
        }
    });
}

/// The id a `session.created`, `response.created` or `response.done` names (`session.id`,
/// `response.id`), parsing the whole message.
fn id_in(text: &JsString, kind: ServerEventKind) -> Option<String> {
    let value = js_sys::JSON::parse(&String::from(text)).ok()?;
    let object = if kind == ServerEventKind::SessionCreated { "session" } else { "response" };
    get(&get(&value, object), "id").as_string()
}
