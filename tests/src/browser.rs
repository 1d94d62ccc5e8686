//! Headless Chromium for the browser probe tests.
//!
//! [`run_page`] runs `tests/browser/run-page.mjs` (playwright-core driving the system Chromium,
//! installed by `scripts/setup.sh test`) against a running tokentap and returns what it printed:
//!
//! - `result`: what the page's `window.__done` promise resolved to (what the app itself saw);
//! - `reports`: the probe reports the page sent, parsed;
//! - `report_answers`: tokentap's answers to them (`{status, body}`), in `Observe` mode;
//! - `probe_source`: `"tokentap"`, or `"disk"` when tokentap did not serve the probe and the
//!   driver served `proxy/server/assets/probe/` instead (only with [`PageRun::probe_fallback`]);
//! - `console`, `page_errors`, `failed_requests`, and `error` when the run failed.
//!
//! Nothing here waits on a timer: the driver resolves when the page's promise and the reports
//! are in, and its overall deadline only turns a hang into a failure with the page's console.

use std::path::PathBuf;
use std::process::Command;

/// Where reports go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reports {
    /// To tokentap's ingest, as in production; the driver records the bodies and the answers.
    Observe,
    /// Answered by the driver with 204; tokentap never sees them.
    Intercept,
}

/// One page load.
#[derive(Debug, Clone)]
pub struct PageRun {
    /// tokentap's proxy origin, e.g. `http://127.0.0.1:4242`.
    pub origin: String,
    /// Path and query of the page on that origin.
    pub path: String,
    /// Serve this file (under `tests/browser/pages/`) at `path` instead of asking tokentap.
    pub page_file: Option<String>,
    /// Serve `proxy/server/assets/probe/` when tokentap answers 404 for the probe.
    pub probe_fallback: bool,
    /// Probe reports to wait for.
    pub reports: usize,
    pub report_mode: Reports,
    pub timeout_ms: u64,
    /// JS expression awaited in the page after load (default `window.__done`).
    pub result_expr: Option<String>,
    /// More Chromium flags (e.g. a WAV file as the microphone).
    pub chromium_args: Vec<String>,
}

impl PageRun {
    /// A test page from `tests/browser/pages/`, served on tokentap's origin at `/_test/<file>`.
    pub fn test_page(origin: &str, file: &str, query: &str) -> PageRun {
        PageRun {
            origin: origin.trim_end_matches('/').to_string(),
            path: format!("/_test/{file}{query}"),
            page_file: Some(file.to_string()),
            probe_fallback: false,
            reports: 1,
            report_mode: Reports::Observe,
            timeout_ms: 60_000,
            result_expr: None,
            chromium_args: Vec::new(),
        }
    }
}

/// The repository's root folder.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// Runs one page and returns the driver's JSON. Panics with the driver's output when it could not
/// run at all; a page-level failure is in the JSON's `error` field.
/// Runs the demo page (`/_tokentap/demo/` on `origin`) with `send_and_wait` (a script that sends
/// from the page and resolves once the page shows its breakdown), checks that the page raised no
/// error and showed the breakdown, and returns the whole run (its `result` is the script's).
pub fn run_demo_page(origin: &str, send_and_wait: &str, timeout_ms: u64) -> serde_json::Value {
    let run = PageRun {
        origin: origin.to_owned(),
        path: "/_tokentap/demo/".into(),
        page_file: None,
        probe_fallback: false,
        reports: 1,
        report_mode: Reports::Observe,
        timeout_ms,
        result_expr: Some(send_and_wait.into()),
        chromium_args: Vec::new(),
    };
    let out = run_page(&run);
    assert!(out["error"].is_null(), "{out:#}");
    assert_eq!(out["page_errors"], serde_json::json!([]), "{out:#}");
    assert_eq!(out["result"]["shown"], true, "the page never showed the breakdown: {out:#}");
    out
}

pub fn run_page(run: &PageRun) -> serde_json::Value {
    let root = repo_root();
    let browser_dir = root.join("tests/browser");
    assert!(
        browser_dir.join("node_modules/playwright-core").exists(),
        "playwright-core is not installed: run scripts/setup.sh test"
    );
    let mut options = serde_json::json!({
        "origin": run.origin,
        "path": run.path,
        "reports": run.reports,
        "report_mode": match run.report_mode { Reports::Observe => "observe", Reports::Intercept => "intercept" },
        "timeout_ms": run.timeout_ms,
    });
    if let Some(file) = &run.page_file {
        options["page_file"] = browser_dir.join("pages").join(file).display().to_string().into();
    }
    if let Some(expr) = &run.result_expr {
        options["result_expr"] = expr.clone().into();
    }
    if !run.chromium_args.is_empty() {
        options["chromium_args"] = run.chromium_args.clone().into();
    }
    if run.probe_fallback {
        options["probe_dir"] = root.join("proxy/server/assets/probe").display().to_string().into();
    }
    let output = Command::new("node")
        .arg(browser_dir.join("run-page.mjs"))
        .arg(options.to_string())
        .current_dir(&browser_dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run node (scripts/setup.sh test installs it): {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).unwrap_or_else(|| {
        panic!(
            "the browser driver printed no JSON; status {:?}\nstdout:\n{stdout}\nstderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    });
    serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON from the browser driver ({e}): {line}"))
}

/// Runs tests/browser/dashboard.mjs (the dashboard in headless Chromium) and returns its JSON.
pub fn run_dashboard(options: &serde_json::Value) -> serde_json::Value {
    let dir = repo_root().join("tests/browser");
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "playwright-core is not installed: run scripts/setup.sh test"
    );
    let output = Command::new("node")
        .arg(dir.join("dashboard.mjs"))
        .arg(options.to_string())
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run node (scripts/setup.sh test installs it): {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).unwrap_or_else(|| {
        panic!(
            "the dashboard driver printed no JSON; stdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    serde_json::from_str(line).unwrap()
}

/// The query of tests/browser/pages/stream.html for a mock schedule (x-mock-* request headers),
/// plus `extra` (e.g. "&block_every=20").
pub fn page_query(mock_headers: &[(&str, &str)], extra: &str) -> String {
    let mock: serde_json::Map<String, serde_json::Value> =
        mock_headers.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect();
    let encoded: String = serde_json::Value::Object(mock)
        .to_string()
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    format!("?mock={encoded}{extra}")
}
