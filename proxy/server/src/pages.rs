//! Pages tokentap serves itself on the proxy listener, under `/_tokentap/`.
//!
//! They live on the proxy's origin so that a page can call the proxied API and, later, report
//! browser timings without cross-origin requests.

use bytes::Bytes;

/// One response served by tokentap itself.
pub struct Page {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Bytes,
}

const DEMO_HTML: &[u8] = include_bytes!("../assets/demo.html");
const VOICE_HTML: &[u8] = include_bytes!("../assets/voice.html");

/// The browser probe, built by scripts/build-probe.sh (tests fail when these are stale).
const PROBE_FILES: &[(&str, &str, &[u8])] = &[
    ("/_tokentap/probe/probe.js", "text/javascript; charset=utf-8", include_bytes!("../assets/probe/probe.js")),
    (
        "/_tokentap/probe/tokentap_probe.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/probe/tokentap_probe.js"),
    ),
    (
        "/_tokentap/probe/tokentap_probe_bg.wasm",
        "application/wasm",
        include_bytes!("../assets/probe/tokentap_probe_bg.wasm"),
    ),
];

/// The pages enabled for this run.
#[derive(Debug, Default, Clone)]
pub struct Pages {
    /// Serve the demo chat page at `/_tokentap/demo/` and the voice page at `/_tokentap/demo/voice/`,
    /// with the admin API at this base URL.
    pub demo_admin_url: Option<String>,
    pub demo_enabled: bool,
    /// The model the demo page asks for when tokentap is in front of a real server; absent for the
    /// built-in mock, whose scenarios the page then offers.
    pub demo_model: Option<String>,
    /// `tokentap demo` says whether it routes the offer path to a WebRTC voice peer
    /// (`--webrtc-peer`); the voice page tells how to start one when not. None: not known (`serve`).
    pub demo_webrtc: Option<bool>,
    /// Serve the browser probe at `/_tokentap/probe/`.
    pub probe_enabled: bool,
}

impl Pages {
    pub fn serve(&self, method: &str, path_and_query: &str) -> Page {
        let path = path_and_query.split('?').next().unwrap_or("");
        if method != "GET" && method != "HEAD" {
            return not_found();
        }
        match path {
            "/_tokentap/demo/" | "/_tokentap/demo" | "/_tokentap/demo/index.html" if self.demo_enabled => {
                Page { status: 200, content_type: "text/html; charset=utf-8", body: Bytes::from_static(DEMO_HTML) }
            }
            "/_tokentap/demo/voice/" | "/_tokentap/demo/voice" if self.demo_enabled => {
                Page { status: 200, content_type: "text/html; charset=utf-8", body: Bytes::from_static(VOICE_HTML) }
            }
            "/_tokentap/demo/config.json" if self.demo_enabled => Page {
                status: 200,
                content_type: "application/json",
                body: Bytes::from(
                    serde_json::json!({
                        "admin_url": self.demo_admin_url,
                        "model": self.demo_model,
                        "webrtc_peer": self.demo_webrtc,
                    })
                    .to_string(),
                ),
            },
            _ => match PROBE_FILES.iter().find(|(p, _, _)| *p == path) {
                Some((_, content_type, body)) if self.probe_enabled && !body.is_empty() => {
                    Page { status: 200, content_type, body: Bytes::from_static(body) }
                }
                _ => not_found(),
            },
        }
    }
}

fn not_found() -> Page {
    Page {
        status: 404,
        content_type: "application/json",
        body: Bytes::from_static(
            b"{\"error\":{\"type\":\"tokentap_not_found\",\"message\":\"no such tokentap page\"}}",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every HTML page served on the proxy listener names its icon (`<link rel="icon">`):
    /// otherwise the browser asks the proxy for `/favicon.ico`, which goes upstream and is recorded
    /// as if the user had sent it.
    #[test]
    fn every_page_names_its_icon_so_the_browser_asks_the_proxy_for_none() {
        let pages = Pages { demo_enabled: true, probe_enabled: true, ..Pages::default() };
        let html_paths = ["/_tokentap/demo/", "/_tokentap/demo/voice/"];
        for path in html_paths {
            let page = pages.serve("GET", path);
            assert_eq!(page.status, 200, "{path}");
            assert!(page.content_type.starts_with("text/html"), "{path}");
            let html = String::from_utf8_lossy(&page.body);
            let head = &html[..html.find("</head>").unwrap_or(html.len())];
            assert!(head.contains(r#"<link rel="icon""#), "{path} names no icon in its <head>");
        }
    }
}
