//! The built-in dashboard, served by the admin API at `/_tokentap/`.
//!
//! Four hand-written files (`proxy/server/assets/dashboard/`) are compiled into the binary, so the page
//! works offline and never loads anything from elsewhere. Charts are SVG drawn by `app.js`; the
//! numbers come from the admin API, which aggregates on the server (`report`), so the page stays
//! fast with thousands of records:
//!
//! - `/_tokentap/api/list`: compact rows, filtered and paginated on the server;
//! - `/_tokentap/api/summary`: the same [`tokentap_report::Report`] `tokentap report --json` prints;
//! - `/_tokentap/api/requests/{id}` and `/_tokentap/api/verdict/{id}`: one record and its goodput
//!   verdict, for the request page;
//! - `/_tokentap/api/turns` and `/_tokentap/api/turns/{id}`: the turns list and a turn's page;
//! - `/_tokentap/api/stream`: the live feed that refreshes the lists.

const INDEX_HTML: &str = include_str!("../../assets/dashboard/index.html");
const APP_JS: &str = include_str!("../../assets/dashboard/app.js");
const WEBRTC_JS: &str = include_str!("../../assets/dashboard/webrtc.js");
const APP_CSS: &str = include_str!("../../assets/dashboard/app.css");

/// The file served at an admin path, with its content type; `None` when the path is not the
/// dashboard's.
pub(crate) fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    match path {
        "/_tokentap"
        | "/_tokentap/"
        | "/_tokentap/dashboard"
        | "/_tokentap/dashboard/"
        | "/_tokentap/dashboard/index.html" => Some(("text/html; charset=utf-8", INDEX_HTML)),
        "/_tokentap/dashboard/app.js" => Some(("text/javascript; charset=utf-8", APP_JS)),
        "/_tokentap/dashboard/webrtc.js" => Some(("text/javascript; charset=utf-8", WEBRTC_JS)),
        "/_tokentap/dashboard/app.css" => Some(("text/css; charset=utf-8", APP_CSS)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_are_embedded_and_self_contained() {
        let (kind, html) = asset("/_tokentap/").unwrap();
        assert!(kind.starts_with("text/html"));
        assert!(html.contains("/_tokentap/dashboard/app.js"));
        assert!(asset("/_tokentap/dashboard/app.css").is_some());
        assert!(asset("/_tokentap/dashboard/nope.js").is_none());
        // Nothing is fetched from another origin.
        for (_, text) in [
            "/_tokentap/",
            "/_tokentap/dashboard/app.js",
            "/_tokentap/dashboard/webrtc.js",
            "/_tokentap/dashboard/app.css",
        ]
        .map(|p| asset(p).unwrap())
        {
            let text = text.replace("http://www.w3.org/2000/svg", "");
            assert!(!text.contains("https://") && !text.contains("http://"), "external reference in a dashboard file");
        }
    }
}
