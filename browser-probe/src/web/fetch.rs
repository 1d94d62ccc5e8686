//! The `window.fetch` wrapper: a tracked request gets a `traceparent` and becomes a turn; its
//! response body is handed to the app through a stream that stamps every chunk on the way.
//!
//! The app still reads the body exactly once: the probe's stream pulls from the original body's
//! reader and enqueues the very same chunk objects, so nothing is copied or read twice. Untracked
//! requests go to the original `fetch` untouched.

use js_sys::{Function, Object, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::{future_to_promise, JsFuture};
use web_sys::{
    Headers, ReadableStream, ReadableStreamDefaultController, ReadableStreamDefaultReader, Request, Response,
    ResponseInit, Url,
};

use super::{body_text, get, now_ms, schedule_settle, send_reports, with_probe};
use crate::answer_text::format_from_headers;
use crate::trace;
use crate::turn::{RequestInfo, ResponsePath};

/// Replaces `window.fetch` with the tracking wrapper (once).
pub(super) fn install() {
    let window = with_probe(|p| p.window.clone());
    let Ok(original) = Reflect::get(&window, &"fetch".into()) else { return };
    let Ok(original) = original.dyn_into::<Function>() else { return };
    with_probe(|p| p.original_fetch = Some(original));
    let wrapper = Closure::<dyn FnMut(JsValue, JsValue) -> Promise>::new(tracked_fetch);
    let _ = Reflect::set(&window, &"fetch".into(), wrapper.as_ref());
    wrapper.forget();
}

fn tracked_fetch(input: JsValue, init: JsValue) -> Promise {
    let (window, original, predicate) = with_probe(|p| (p.window.clone(), p.fetch_fn(), p.track_fetch.clone()));
    let page = window.location();
    let page_href = page.href().unwrap_or_default();
    let request = input.dyn_ref::<Request>();
    let url_text = match request {
        Some(r) => r.url(),
        None => js_sys::JsString::from(input.clone()).into(),
    };
    let url = Url::new_with_base(&url_text, &page_href).ok();
    let tracked = match (&url, &predicate) {
        (None, _) => false,
        // The app's predicate runs without the probe borrowed; it may call mark().
        (Some(u), Some(f)) => f.call1(&JsValue::NULL, &u.href().into()).is_ok_and(|v| v.is_truthy()),
        (Some(u), None) => page.origin().is_ok_and(|o| o == u.origin()),
    };
    let Some(url) = url.filter(|_| tracked) else {
        return call_fetch(&original, &window, &input, &init);
    };

    // The request's headers: the init's, else the Request's. An app-provided traceparent is kept
    // as it is, and its ids are the turn's.
    let init_headers = get(&init, "headers");
    let headers = if !init_headers.is_undefined() && !init_headers.is_null() {
        Headers::new_with_headers(init_headers.unchecked_ref())
    } else if let Some(r) = request {
        Headers::new_with_headers(&r.headers())
    } else {
        Headers::new()
    };
    let Ok(headers) = headers else { return call_fetch(&original, &window, &input, &init) };
    let existing = headers.get("traceparent").ok().flatten().and_then(|v| trace::parse_traceparent(&v));
    let (trace_id, span_id) = match existing {
        Some(ids) => ids,
        None => {
            let ids = new_ids(&window);
            let _ = headers.set("traceparent", &trace::format_traceparent(&ids.0, &ids.1));
            ids
        }
    };
    let new_init = Object::new();
    if init.is_object() {
        Object::assign(&new_init, init.unchecked_ref());
    }
    let _ = Reflect::set(&new_init, &"headers".into(), &headers);

    let method =
        get(&new_init, "method").as_string().or_else(|| request.map(Request::method)).unwrap_or_else(|| "GET".into());
    let info = RequestInfo {
        trace_id,
        span_id,
        page_path: page.pathname().unwrap_or_default(),
        method: method.to_ascii_uppercase(),
        path: url.pathname(),
    };
    let (turn, evicted) = with_probe(|p| {
        let now = p.now_ms();
        p.turns.start(info, now)
    });
    send_reports(evicted.into_iter().collect());

    let response = call_fetch(&original, &window, &input, &new_init);
    let url_href = url.href();
    future_to_promise(async move {
        match JsFuture::from(response).await {
            Ok(response) => Ok(wrap_response(response.unchecked_into(), turn, &url_href)),
            Err(error) => {
                end_turn(turn);
                Err(error)
            }
        }
    })
}

fn call_fetch(original: &Function, window: &web_sys::Window, input: &JsValue, init: &JsValue) -> Promise {
    match original.call2(window, input, init) {
        Ok(promise) => promise.unchecked_into(),
        Err(error) => Promise::reject(&error),
    }
}

/// A fresh trace id and span id from `crypto.getRandomValues`.
pub(super) fn new_ids(window: &web_sys::Window) -> (String, String) {
    let mut random = [0u8; 24];
    loop {
        if let Ok(crypto) = window.crypto() {
            let _ = crypto.get_random_values_with_u8_array(&mut random);
        }
        if let Some(ids) = trace::ids_from_random(&random) {
            return ids;
        }
        // All zeros: either astronomically unlucky or no crypto; fall back to Math.random.
        for b in random.iter_mut() {
            *b = (js_sys::Math::random() * 256.0) as u8;
        }
    }
}

pub(super) fn end_turn(turn: u32) {
    with_probe(|p| {
        let now = p.now_ms();
        if let Some(t) = p.turns.get_mut(turn) {
            t.record_end(now);
        }
    });
    schedule_settle();
}

/// Stamps the response and returns a response with the same status and headers whose body
/// stamps each chunk as the app reads it.
fn wrap_response(response: Response, turn: u32, url: &str) -> JsValue {
    with_probe(|p| {
        let now = p.now_ms();
        if let Some(t) = p.turns.get_mut(turn) {
            t.record_response(now, response.status());
            let content_type = response.headers().get("content-type").ok().flatten().unwrap_or_default();
            let content_type = content_type.trim_start().to_ascii_lowercase();
            // Audio, or raw bytes (how servers often send raw PCM): never the painted answer text.
            t.audio_response =
                content_type.starts_with("audio/") || content_type.starts_with("application/octet-stream");
            let header = |name: &str| response.headers().get(name).ok().flatten();
            t.response_path.content_encoding = ResponsePath::header(header("content-encoding"));
            t.response_path.via = ResponsePath::header(header("via"));
            t.response_path.server = ResponsePath::header(header("server"));
            if !t.audio_response {
                let data_stream = header("x-vercel-ai-data-stream").is_some();
                body_text::start(turn, format_from_headers(&content_type, data_stream));
            }
        }
    });
    let Some(body) = response.body() else {
        end_turn(turn);
        return response.into();
    };
    let reader: ReadableStreamDefaultReader = body.get_reader().unchecked_into();
    let source = Object::new();
    let pull_reader = reader.clone();
    let pull = Closure::<dyn FnMut(ReadableStreamDefaultController) -> Promise>::new(move |controller| {
        future_to_promise(pull_chunk(pull_reader.clone(), controller, turn))
    });
    let cancel = Closure::<dyn FnMut(JsValue) -> Promise>::new(move |reason: JsValue| {
        end_turn(turn);
        reader.cancel_with_reason(&reason)
    });
    let _ = Reflect::set(&source, &"pull".into(), &pull.into_js_value());
    let _ = Reflect::set(&source, &"cancel".into(), &cancel.into_js_value());
    let Ok(stream) = ReadableStream::new_with_underlying_source(&source) else { return response.into() };
    let init = ResponseInit::new();
    init.set_status(response.status());
    init.set_status_text(&response.status_text());
    init.set_headers_headers(&response.headers());
    let Ok(wrapped) = Response::new_with_opt_readable_stream_and_init(Some(&stream), &init) else {
        return response.into();
    };
    // Audio calls may name this response to say whose answer is playing.
    with_probe(|p| p.responses.set(&wrapped, &JsValue::from_f64(f64::from(turn))));
    // A constructed Response has an empty url; apps sometimes read it.
    for (key, value) in [("url", JsValue::from_str(url)), ("redirected", response.redirected().into())] {
        let descriptor = Object::new();
        let _ = Reflect::set(&descriptor, &"value".into(), &value);
        Object::define_property(&wrapped, &key.into(), &descriptor);
    }
    wrapped.into()
}

/// One pull of the app-facing stream: read the original body, stamp, enqueue the same chunk.
async fn pull_chunk(
    reader: ReadableStreamDefaultReader,
    controller: ReadableStreamDefaultController,
    turn: u32,
) -> Result<JsValue, JsValue> {
    match JsFuture::from(reader.read()).await {
        Err(error) => {
            end_turn(turn);
            controller.error_with_e(&error);
        }
        Ok(result) if get(&result, "done").is_truthy() => {
            end_turn(turn);
            let _ = controller.close();
        }
        Ok(result) => {
            let chunk = get(&result, "value");
            let len = get(&chunk, "byteLength").as_f64().unwrap_or(0.0) as u64;
            let now = now_ms();
            with_probe(|p| {
                if let Some(t) = p.turns.get_mut(turn) {
                    t.record_chunk(now, len);
                }
            });
            body_text::keep(turn, &chunk, len);
            let _ = controller.enqueue_with_chunk(&chunk);
        }
    }
    Ok(JsValue::UNDEFINED)
}
