//! The example app servers of `examples/` (a page on the app's own origin, the app between the
//! page and tokentap), started as child processes for the app topology tests.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::browser::repo_root;
use crate::process::Proc;

/// Which example app server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppKind {
    /// `examples/app-fastapi`: FastAPI, the official `openai` SDK, OpenTelemetry.
    FastApi,
    /// `examples/app-express`: Express and the Vercel AI SDK's UI message stream.
    Express,
    /// The same Express server serving `examples/app-react`'s page (React, the AI SDK's
    /// `useChat`, the probe from its npm package), built by Vite for this run.
    ExpressReact,
}

/// The classic buffering mistake the example can turn on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Off,
    /// Starlette's `GZipMiddleware` / Express's `compression()`.
    On,
}

/// A running example app server.
pub struct AppServer {
    pub proc: Proc,
    /// The page's origin, e.g. `http://127.0.0.1:43121`.
    pub origin: String,
    /// The React page's build folder, removed with the server.
    _page_build: Option<tempfile::TempDir>,
}

/// A port that was free a moment ago (bound on port 0 and released), for a server whose origin
/// must be configured in tokentap before the server starts. Another process can take it before
/// the server binds it: [`AppServer::start_on_free_port`] starts again on another port then.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port()
}

/// The Python of the examples' virtualenv that `scripts/setup.sh test` creates
/// (`TOKENTAP_EXAMPLES_PYTHON` overrides).
pub fn examples_python() -> PathBuf {
    let path = std::env::var_os("TOKENTAP_EXAMPLES_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".cache/venv-examples/bin/python"));
    assert!(path.exists(), "{} not found: run scripts/setup.sh test, which creates it", path.display());
    path
}

impl AppServer {
    /// Starts `kind` on a free port, with more environment variables for the app (e.g.
    /// `APP_STREAM`). `tokentap_for(origin)` starts what the app calls, knowing the app's origin
    /// in advance, and returns it with its URL. When the port is taken between picking it and the
    /// app's bind, both start again on another port.
    pub fn start_on_free_port<T>(
        kind: AppKind,
        compression: Compression,
        env: &[(&str, &str)],
        mut tokentap_for: impl FnMut(&str) -> (T, String),
    ) -> (AppServer, T) {
        let page_build = (kind == AppKind::ExpressReact).then(build_react_page);
        let mut env: Vec<(&str, &str)> = env.to_vec();
        let dist = page_build.as_ref().map(|d| d.path().to_str().expect("utf-8 temp path").to_string());
        if let Some(dist) = &dist {
            env.extend([("APP_PAGE", "react"), ("APP_REACT_DIST", dist.as_str())]);
        }
        let mut page_build = page_build;
        for _ in 0..5 {
            let port = free_port();
            let (tokentap, url) = tokentap_for(&format!("http://127.0.0.1:{port}"));
            if let Some(mut app) = Self::try_start(kind, port, &url, compression, &env) {
                app._page_build = page_build.take();
                return (app, tokentap);
            }
        }
        panic!("five free ports in a row were taken before the app server could bind them");
    }

    /// Starts `kind` on `port`, calling the model through tokentap at `tokentap_url`; `None` when
    /// the port was taken (the app said so and exited). Any other failure panics with the app's
    /// output.
    fn try_start(
        kind: AppKind,
        port: u16,
        tokentap_url: &str,
        compression: Compression,
        env: &[(&str, &str)],
    ) -> Option<AppServer> {
        let root = repo_root();
        let on = if compression == Compression::On { "1" } else { "0" };
        let mut cmd = match kind {
            AppKind::FastApi => {
                let mut cmd = Command::new(examples_python());
                cmd.arg(root.join("examples/app-fastapi/app.py")).env("APP_GZIP", on);
                cmd
            }
            AppKind::Express | AppKind::ExpressReact => {
                let dir = root.join("examples/app-express");
                assert!(
                    dir.join("node_modules/ai").exists(),
                    "examples/app-express/node_modules is missing: run scripts/setup.sh test"
                );
                let mut cmd = Command::new("node");
                cmd.arg(dir.join("server.mjs")).current_dir(&dir).env("APP_COMPRESSION", on);
                cmd
            }
        };
        // The example's own placeholder key, which the test checks never reaches a record.
        cmd.env_remove("OPENAI_API_KEY");
        cmd.arg("--port").arg(port.to_string()).env("TOKENTAP_URL", tokentap_url).envs(env.iter().copied());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("OTEL_") {
                cmd.env_remove(key);
            }
        }
        let mut proc = Proc::spawn(cmd);
        let Some(line) = proc.wait_line_or_exit("app listening on ", Duration::from_secs(60)) else {
            let stderr = proc.stderr();
            assert!(
                stderr.to_ascii_lowercase().contains("address already in use"),
                "the app server exited before listening; stdout:\n{}\nstderr:\n{stderr}",
                proc.stdout()
            );
            return None;
        };
        let origin = line.trim_start_matches("app listening on ").split(' ').next().unwrap_or("").to_string();
        assert_eq!(origin, format!("http://127.0.0.1:{port}"), "{line}");
        Some(AppServer { proc, origin, _page_build: None })
    }
}

/// Builds `examples/app-react` with its own Vite into a fresh folder (offline: `scripts/setup.sh
/// test` installed its packages, and the probe's package from `browser-probe/npm/`), after
/// checking that the package holds the probe tokentap embeds.
fn build_react_page() -> tempfile::TempDir {
    let root = repo_root();
    let dir = root.join("examples/app-react");
    let vite = dir.join("node_modules/.bin/vite");
    assert!(vite.exists(), "examples/app-react/node_modules is missing: run scripts/setup.sh test");
    for name in ["probe.js", "tokentap_probe.js", "tokentap_probe_bg.wasm"] {
        let packaged = std::fs::read(root.join("browser-probe/npm").join(name)).unwrap_or_default();
        let embedded =
            std::fs::read(root.join("proxy/server/assets/probe").join(name)).expect("the committed probe build");
        assert!(
            packaged == embedded,
            "browser-probe/npm/{name} is not tokentap's build: run scripts/build-probe.sh --package-only"
        );
    }
    let out = tempfile::tempdir().expect("temp dir");
    let status = Command::new(&vite)
        .args(["build", "--logLevel", "warn", "--outDir"])
        .arg(out.path())
        .current_dir(&dir)
        .status()
        .expect("run vite");
    assert!(status.success(), "vite build of examples/app-react failed: {status}");
    out
}
