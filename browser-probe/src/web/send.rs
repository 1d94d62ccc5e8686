//! Sending a report: `sendBeacon` (survives the page going away), else `fetch`.

use js_sys::{Array, Function, Object, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{Blob, BlobPropertyBag};

use super::with_probe;

/// Browsers refuse keepalive bodies beyond 64 KiB in flight; bigger reports go as plain fetches.
const KEEPALIVE_LIMIT: usize = 64 * 1024;

pub(super) fn send_report(endpoint: &str, json: &str, fetch: &Function) {
    let window = with_probe(|p| p.window.clone());
    // text/plain keeps the request CORS-simple: no preflight, and sendBeacon accepts it.
    let options = BlobPropertyBag::new();
    options.set_type("text/plain");
    let parts = Array::of1(&JsValue::from_str(json));
    if let Ok(blob) = Blob::new_with_str_sequence_and_options(&parts, &options) {
        if window.navigator().send_beacon_with_opt_blob(endpoint, Some(&blob)).unwrap_or(false) {
            return;
        }
    }
    let init = Object::new();
    let headers = Object::new();
    let _ = Reflect::set(&headers, &"content-type".into(), &"text/plain".into());
    let _ = Reflect::set(&init, &"method".into(), &"POST".into());
    let _ = Reflect::set(&init, &"body".into(), &json.into());
    let _ = Reflect::set(&init, &"headers".into(), &headers);
    let _ = Reflect::set(&init, &"keepalive".into(), &(json.len() <= KEEPALIVE_LIMIT).into());
    if let Ok(promise) = fetch.call2(&window, &endpoint.into(), &init) {
        // A failed report is dropped quietly; an unhandled rejection would be noise in the app.
        let promise: js_sys::Promise = promise.unchecked_into();
        wasm_bindgen_futures::spawn_local(async move {
            let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
        });
    }
}
