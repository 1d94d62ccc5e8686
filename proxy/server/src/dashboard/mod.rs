//! The built-in dashboard, served by the admin API at `/_tokentap/`.
//!
//! Hand-written files (`proxy/server/assets/dashboard/`: the page, its style and its scripts) are
//! compiled into the binary, so the page works offline and never loads anything from elsewhere.
//! Charts are SVG drawn by its scripts; the numbers come from the admin API, which aggregates on
//! the server (`report`), so the page stays fast with thousands of records:
//!
//! - `/_tokentap/api/list`: compact rows, filtered and paginated on the server;
//! - `/_tokentap/api/summary`: the same [`tokentap_report::Report`] `tokentap report --json` prints;
//! - `/_tokentap/api/requests/{id}` and `/_tokentap/api/verdict/{id}`: one record and its goodput
//!   verdict, for the request page;
//! - `/_tokentap/api/turns` and `/_tokentap/api/turns/{id}`: the turns list and a turn's page;
//! - `/_tokentap/api/stream`: the live feed that refreshes the lists.

const INDEX_HTML: &str = include_str!("../../assets/dashboard/index.html");
const APP_CSS: &str = include_str!("../../assets/dashboard/app.css");

/// The page's scripts, in the order `index.html` loads them (one global scope; the router last).
const SCRIPTS: [(&str, &str); 8] = [
    ("app.js", include_str!("../../assets/dashboard/app.js")),
    ("webrtc.js", include_str!("../../assets/dashboard/webrtc.js")),
    ("list.js", include_str!("../../assets/dashboard/list.js")),
    ("request.js", include_str!("../../assets/dashboard/request.js")),
    ("session.js", include_str!("../../assets/dashboard/session.js")),
    ("summary.js", include_str!("../../assets/dashboard/summary.js")),
    ("turns.js", include_str!("../../assets/dashboard/turns.js")),
    ("router.js", include_str!("../../assets/dashboard/router.js")),
];

/// The file served at an admin path, with its content type; `None` when the path is not the
/// dashboard's.
pub(crate) fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    match path {
        "/_tokentap"
        | "/_tokentap/"
        | "/_tokentap/dashboard"
        | "/_tokentap/dashboard/"
        | "/_tokentap/dashboard/index.html" => Some(("text/html; charset=utf-8", INDEX_HTML)),
        "/_tokentap/dashboard/app.css" => Some(("text/css; charset=utf-8", APP_CSS)),
        _ => {
            let name = path.strip_prefix("/_tokentap/dashboard/")?;
            let (_, script) = SCRIPTS.iter().find(|(n, _)| *n == name)?;
            Some(("text/javascript; charset=utf-8", script))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_are_embedded_and_self_contained() {
        let (kind, html) = asset("/_tokentap/").unwrap();
        assert!(kind.starts_with("text/html"));
        assert!(asset("/_tokentap/dashboard/app.css").is_some());
        assert!(asset("/_tokentap/dashboard/nope.js").is_none());
        // index.html loads every script, in the order of the table.
        let mut at = 0;
        for (name, _) in SCRIPTS {
            let tag = format!("<script src=\"/_tokentap/dashboard/{name}\"></script>");
            let found = html[at..].find(&tag).unwrap_or_else(|| panic!("{name} not loaded in order by index.html"));
            at += found + tag.len();
        }
        // Nothing is fetched from another origin.
        let paths = ["/_tokentap/".to_string(), "/_tokentap/dashboard/app.css".to_string()]
            .into_iter()
            .chain(SCRIPTS.iter().map(|(name, _)| format!("/_tokentap/dashboard/{name}")));
        for path in paths {
            let (_, text) = asset(&path).unwrap();
            let text = text.replace("http://www.w3.org/2000/svg", "");
            assert!(!text.contains("https://") && !text.contains("http://"), "external reference in {path}");
        }
    }
}
