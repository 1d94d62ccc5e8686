//! Who held the text between tokentap's handoff and the browser, from what the page's response
//! said (its `Content-Encoding` and `Via`) and how the text came out (the release pattern).
//!
//! With the page reading tokentap's own response, the stretch is the network and any proxy in
//! front of tokentap: `between_proxy_and_browser`. With an app server between the page and
//! tokentap (the page's request was not the record's), the stretch starts at the app server's
//! socket: compression of the page's response names the app server's (or its proxy's)
//! compressor, a `Via` header names a reverse proxy, and otherwise the app server buffers.

use crate::browser::BrowserTimeline;
use crate::hops::{format_ms, Evidence, HopDelay, ReleasePattern, VerdictKind};

/// The verdict for text held at the browser arrival (not explained by long frames).
pub(super) fn after_handoff(
    hop: &HopDelay,
    browser: Option<&BrowserTimeline>,
    held: &str,
) -> (VerdictKind, String, Evidence) {
    let app_server = browser.is_some_and(|b| b.app_server);
    let content_encoding = browser
        .and_then(|b| b.content_encoding.clone())
        .filter(|e| !e.trim().is_empty() && !e.trim().eq_ignore_ascii_case("identity"));
    let via = browser.and_then(|b| b.via.clone());
    let evidence =
        Evidence { app_server, content_encoding: content_encoding.clone(), via: via.clone(), pattern: hop.pattern };
    let pattern = match (hop.pattern, hop.burst_interval_ms) {
        (Some(ReleasePattern::AtEnd), _) => "; released at the end of the stream".to_string(),
        (Some(ReleasePattern::Periodic), Some(every)) => format!("; released every ~{}", format_ms(every)),
        (Some(ReleasePattern::WhenFull), _) => "; released in bursts at no steady interval (a buffer filling)".into(),
        _ => String::new(),
    };
    if !app_server {
        let because = match &content_encoding {
            Some(e) => format!("compression (content-encoding: {e} on the page's response) or a buffering proxy"),
            None => "typical of a buffering proxy or compression".into(),
        };
        return (
            VerdictKind::BetweenProxyAndBrowser,
            format!("between tokentap and the browser: {held} — {because}{pattern}"),
            evidence,
        );
    }
    let (kind, text) = match (&content_encoding, &via) {
        (Some(e), _) => (
            VerdictKind::AppServerCompression,
            format!(
                "in the app server's response (between tokentap's handoff to the app server and the browser): {held} — \
                 compressed (content-encoding: {e}) without a flush per event{pattern}"
            ),
        ),
        (None, Some(v)) => (
            VerdictKind::ReverseProxyBuffering,
            format!(
                "between the app server and the browser: {held} — a reverse proxy (via: {v}) buffers the stream{pattern}"
            ),
        ),
        (None, None) => (
            VerdictKind::AppServerBuffering,
            format!(
                "in the app server (between tokentap's handoff to the app server and the browser): {held} — \
                 the app server (or an unannounced proxy in front of it) buffers the stream{pattern}"
            ),
        ),
    };
    (kind, text, evidence)
}
