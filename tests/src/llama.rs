//! A real inference server: llama.cpp's own HTTP server (the `xllamacpp` wheel) with
//! SmolLM2-135M-Instruct, started by `tests/llm/llama_server.py` on a free port, one CPU thread.
//! `scripts/setup.sh test` installs both wheels into `.cache/venv-llm`.
//!
//! With `temperature: 0` its answers are the same on every run; its times are real prefill and
//! decode on this machine's CPU.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::process::Proc;

/// The model name the server answers to.
pub const MODEL: &str = "smollm2-135m";

/// The Python of the llama.cpp virtualenv (`TOKENTAP_LLM_PYTHON` overrides).
pub fn llm_python() -> PathBuf {
    let path = std::env::var_os("TOKENTAP_LLM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/venv-llm/bin/python"));
    assert!(
        path.exists(),
        "{} not found: run scripts/test.sh (or scripts/setup.sh test), which installs llama.cpp's server",
        path.display()
    );
    path
}

/// A running llama.cpp server; dropping it ends the process.
pub struct LlamaServer {
    pub proc: Proc,
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT`
    pub url: String,
}

impl LlamaServer {
    /// One slot (requests queue behind each other), one thread.
    pub fn start() -> LlamaServer {
        Self::start_with(&[])
    }

    /// With extra launcher arguments (`--slots N`, `--threads N`).
    pub fn start_with(args: &[&str]) -> LlamaServer {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("llm/llama_server.py");
        let mut cmd = Command::new(llm_python());
        cmd.arg(script).args(args);
        let mut proc = Proc::spawn(cmd);
        // The launcher prints this line once the server accepts connections (model load ≈ 0.5 s).
        let line = proc.wait_line("llama-server listening on ", Duration::from_secs(60));
        let url = line
            .trim_start_matches("llama-server listening on ")
            .split_whitespace()
            .next()
            .expect("url in the banner")
            .to_string();
        let addr = url.trim_start_matches("http://").parse().unwrap_or_else(|e| panic!("bad address in {line:?}: {e}"));
        LlamaServer { proc, addr, url }
    }

    /// The server's Prometheus counters and gauges (`llamacpp:*`), by name.
    pub fn metrics(&self) -> HashMap<String, f64> {
        let resp = crate::http1::get(self.addr, "/metrics", &[]);
        assert_eq!(resp.status, 200, "llama.cpp /metrics: {}", String::from_utf8_lossy(&resp.body));
        String::from_utf8_lossy(&resp.body)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (name, value) = l.split_once(' ')?;
                Some((name.to_string(), value.trim().parse().ok()?))
            })
            .collect()
    }
}

/// A streaming chat request body: greedy (`temperature: 0`), so the answer is the same on every run,
/// with usage (and llama.cpp's `timings`) on the last event. `extra` fields are merged in.
pub fn chat_body(prompt: &str, max_tokens: u32, extra: serde_json::Value) -> Vec<u8> {
    let mut body = serde_json::json!({
        "model": MODEL,
        "stream": true,
        "stream_options": {"include_usage": true},
        "temperature": 0,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    });
    if let (Some(map), serde_json::Value::Object(extra)) = (body.as_object_mut(), extra) {
        map.extend(extra);
    }
    serde_json::to_vec(&body).expect("json")
}

/// The JSON payloads of an SSE body's `data:` lines, `[DONE]` left out.
pub fn sse_events(body: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("bad event {d:?}: {e}")))
        .collect()
}

/// llama.cpp's own `timings` (prompt_n, prompt_ms, predicted_n, predicted_ms, cache_n), from the
/// last event that carries them.
pub fn server_timings(body: &[u8]) -> serde_json::Value {
    sse_events(body)
        .into_iter()
        .rev()
        .find_map(|e| e.get("timings").cloned())
        .unwrap_or_else(|| panic!("no timings in the stream:\n{}", String::from_utf8_lossy(body)))
}

/// The answer text of a streamed chat completion.
pub fn answer_text(body: &[u8]) -> String {
    sse_events(body).iter().filter_map(|e| e["choices"][0]["delta"]["content"].as_str().map(str::to_owned)).collect()
}
