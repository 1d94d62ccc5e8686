//! Who held the text between tokentap's handoff and the browser, from what the page's response
//! said (its `Content-Encoding` and `Via`) and how the text came out (the release pattern).
//!
//! With the page reading tokentap's own response, the stretch is the network and any proxy in
//! front of tokentap: `between_proxy_and_browser`. With an app server between the page and
//! tokentap (the page's request was not the record's), the stretch starts at the app server's
//! socket: compression of the page's response names the app server's (or its proxy's)
//! compressor, a `Via` header or a `Server` that names a reverse proxy ([`PROXY_SERVERS`]: nginx
//! replaces the app's `Server` with its own) names a reverse proxy, and otherwise the app server
//! buffers.
//!
//! Each is named only with its own evidence: held text at the browser arrival (or, when the
//! page's text could not be aligned, the page's bytes arriving in one burst at the end) and the
//! header. When the text was held before the paint but the page's arrivals are not known, the
//! place is unobserved: the browser is never blamed for text it may not have had.

use crate::browser::timeline::Transport;
use crate::browser::{BrowserTimeline, ByteArrival};
use crate::hops::{format_ms, Evidence, Hop, HopDelay, ReleasePattern, VerdictKind, AT_END_FRACTION, HOLD_MS};

/// The verdict for text held at the browser arrival (not explained by long frames).
pub(super) fn after_handoff(
    hop: &HopDelay,
    browser: Option<&BrowserTimeline>,
    held: &str,
) -> (VerdictKind, String, Evidence) {
    let pattern = match (hop.pattern, hop.burst_interval_ms) {
        (Some(ReleasePattern::AtEnd), _) => "; released at the end of the stream".to_string(),
        (Some(ReleasePattern::Periodic), Some(every)) => format!("; released every ~{}", format_ms(every)),
        (Some(ReleasePattern::WhenFull), _) => "; released in bursts at no steady interval (a buffer filling)".into(),
        _ => String::new(),
    };
    name_holder(browser, held, &pattern, hop.pattern, false)
}

/// The verdict for text held before the paint when the page's arrivals could not be aligned with
/// the answer (`browser_arrival` unobserved). `text_started_ms`: the answer's first text at
/// tokentap (ms since t0).
pub(super) fn arrival_unobserved(
    browser: Option<&BrowserTimeline>,
    held: &str,
    text_started_ms: f64,
) -> (VerdictKind, Option<Hop>, String, Option<Evidence>) {
    let uncertainty = browser.and_then(|b| b.clock.as_ref()).map_or(0.0, |c| c.uncertainty_ms);
    let bytes = browser.and_then(|b| b.byte_arrival.as_ref());
    if let Some(b) = bytes.filter(|b| b.held_to_end(AT_END_FRACTION, text_started_ms, HOLD_MS + uncertainty)) {
        let burst = one_burst(b, text_started_ms);
        let (kind, text, evidence) = name_holder(browser, held, &burst, Some(ReleasePattern::AtEnd), true);
        return (kind, Some(Hop::BrowserArrival), text, Some(evidence));
    }
    let alignment = browser.map_or("none", |b| alignment_name(b.alignment));
    (
        VerdictKind::Unobserved,
        None,
        format!(
            "held before the paint, where unobserved: {held}; the page's text could not be aligned with the answer \
             (alignment {alignment}) and its bytes did not arrive in one burst at the end"
        ),
        None,
    )
}

fn alignment_name(a: crate::browser::timeline::ArrivalAlignment) -> &'static str {
    use crate::browser::timeline::ArrivalAlignment::*;
    match a {
        Bytes => "bytes",
        AnswerChars => "answer_chars",
        Inferred => "inferred",
        None => "none",
    }
}

/// "the whole response arrived in one burst at the end (…)".
fn one_burst(b: &ByteArrival, text_started_ms: f64) -> String {
    format!(
        "; the page's whole response arrived in one burst at the end ({:.0}% of {} bytes in its last {} read{}, \
         {} after the answer's text began at tokentap)",
        b.last_burst_fraction() * 100.0,
        b.bytes,
        b.last_burst_reads,
        if b.last_burst_reads == 1 { "" } else { "s" },
        format_ms(b.last_burst_start_ms - text_started_ms)
    )
}

/// Names what held the text after tokentap's handoff from the page's response headers.
fn name_holder(
    browser: Option<&BrowserTimeline>,
    held: &str,
    pattern_text: &str,
    pattern: Option<ReleasePattern>,
    arrived_in_one_burst: bool,
) -> (VerdictKind, String, Evidence) {
    let app_server = browser.is_some_and(|b| b.app_server);
    let content_encoding = browser
        .and_then(|b| b.content_encoding.clone())
        .filter(|e| !e.trim().is_empty() && !e.trim().eq_ignore_ascii_case("identity"));
    let via = browser.and_then(|b| b.via.clone());
    let server = browser.and_then(|b| b.server.clone()).filter(|s| names_proxy(s));
    // An EventSource never shows the page its response headers: no header is evidence either way.
    let headers_unseen = browser.is_some_and(|b| b.transport == Some(Transport::EventSource));
    let evidence = Evidence {
        app_server,
        content_encoding: content_encoding.clone(),
        via: via.clone(),
        server: server.clone(),
        pattern,
        arrived_in_one_burst,
    };
    if !app_server {
        let because = match &content_encoding {
            Some(e) => format!("compression (content-encoding: {e} on the page's response) or a buffering proxy"),
            None => "typical of a buffering proxy or compression".into(),
        };
        return (
            VerdictKind::BetweenProxyAndBrowser,
            format!("between tokentap and the browser: {held} — {because}{pattern_text}"),
            evidence,
        );
    }
    let proxy = via.as_ref().map(|v| format!("via: {v}")).or_else(|| server.map(|s| format!("server: {s}")));
    let (kind, text) = match (&content_encoding, &proxy) {
        (Some(e), _) => (
            VerdictKind::AppServerCompression,
            format!(
                "in the app server's response (between tokentap's handoff to the app server and the browser): {held} — \
                 compressed (content-encoding: {e}) without a flush per event{pattern_text}"
            ),
        ),
        (None, Some(v)) => (
            VerdictKind::ReverseProxyBuffering,
            format!(
                "between the app server and the browser: {held} — a reverse proxy ({v}) buffers the stream{pattern_text}"
            ),
        ),
        (None, None) if headers_unseen => (
            VerdictKind::AppServerBuffering,
            format!(
                "between tokentap's handoff to the app server and the browser: {held} — the page read it through an \
                 EventSource, which shows no response headers, so compression or a reverse proxy there is \
                 unobserved{pattern_text}"
            ),
        ),
        (None, None) => (
            VerdictKind::AppServerBuffering,
            format!(
                "in the app server (between tokentap's handoff to the app server and the browser): {held} — \
                 the app server (or an unannounced proxy in front of it) buffers the stream{pattern_text}"
            ),
        ),
    };
    (kind, text, evidence)
}

/// `Server` values (their product name, before any `/version`) of reverse proxies and CDNs.
pub(crate) const PROXY_SERVERS: [&str; 10] =
    ["nginx", "openresty", "envoy", "caddy", "haproxy", "traefik", "apache", "cloudflare", "varnish", "squid"];

/// The page's `Server` names a reverse proxy.
fn names_proxy(server: &str) -> bool {
    let product = server.split(['/', ' ']).next().unwrap_or("");
    PROXY_SERVERS.iter().any(|p| product.eq_ignore_ascii_case(p))
}
