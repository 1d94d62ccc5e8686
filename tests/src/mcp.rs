//! MCP servers for the MCP tests, on the official SDKs: the Python SDK's (`tests/sdk/mcp_server.py`)
//! and the TypeScript SDK's (`tests/mcp-ts/mcp_server.mjs`), each with the same three tools and a
//! log of its own time per JSON-RPC request; and what the tests read from tokentap's records.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::process::{sdk_python, Proc};
use crate::records::{McpOperation, McpOperationStatus, Outcome, Record};
use crate::RecordFeed;

/// A request as (method, JSON-RPC id).
pub type Key = (String, String);
/// Answered operations by key, each with its record.
pub type Operations = BTreeMap<Key, (McpOperation, Record)>;
/// The server's log lines by key.
pub type Logged = BTreeMap<Key, Value>;

pub struct McpServer {
    _proc: Proc,
    /// The URL a client connects to (`…/mcp`, or `…/sse` for HTTP+SSE).
    pub url: String,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

/// Which server, and how it speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// The Python SDK's `MCPServer`, Streamable HTTP.
    Python,
    /// The Python SDK's `MCPServer` over the older HTTP+SSE transport (`sse_app`).
    PythonSse,
    /// The TypeScript SDK's `McpServer`, Streamable HTTP, sessions, answers on SSE streams.
    TypeScript,
    /// The same with an event store: `count` closes its stream after its first progress
    /// notification, and the client resumes it with `Last-Event-ID`.
    TypeScriptResumable,
    /// The TypeScript SDK's `SSEServerTransport` (HTTP+SSE).
    TypeScriptSse,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `node` running a script of `tests/mcp-ts`, whose packages scripts/setup.sh installs.
fn node_command(script: &str) -> Command {
    let dir = repo().join("mcp-ts");
    assert!(
        dir.join("node_modules/@modelcontextprotocol/sdk").exists(),
        "tests/mcp-ts/node_modules is missing: run scripts/setup.sh test"
    );
    let mut cmd = Command::new("node");
    cmd.current_dir(&dir).arg(dir.join(script));
    cmd
}

impl McpServer {
    pub fn start(peer: Peer) -> McpServer {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.jsonl");
        let mut cmd = match peer {
            Peer::Python | Peer::PythonSse => {
                let mut cmd = Command::new(sdk_python());
                cmd.arg(repo().join("sdk").join("mcp_server.py"));
                if peer == Peer::PythonSse {
                    cmd.args(["--transport", "sse"]);
                }
                cmd
            }
            Peer::TypeScript | Peer::TypeScriptResumable | Peer::TypeScriptSse => {
                let mut cmd = node_command("mcp_server.mjs");
                match peer {
                    Peer::TypeScriptResumable => {
                        cmd.arg("--resumable");
                    }
                    Peer::TypeScriptSse => {
                        cmd.args(["--transport", "sse"]);
                    }
                    _ => {}
                }
                cmd
            }
        };
        cmd.arg("--log").arg(&log);
        let mut proc = Proc::spawn(cmd);
        let line = proc.wait_line("mcp server listening on ", Duration::from_secs(60));
        let url = line.trim_start_matches("mcp server listening on ").trim().to_string();
        McpServer { _proc: proc, url, log, _dir: dir }
    }

    /// The server's address (`http://127.0.0.1:PORT`), for a route's upstream.
    pub fn base(&self) -> &str {
        let after_scheme = self.url.find("//").map_or(0, |i| i + 2);
        let path = self.url[after_scheme..].find('/').map_or(self.url.len(), |i| i + after_scheme);
        &self.url[..path]
    }

    /// The path a client connects to (`/mcp`, `/sse`).
    pub fn path(&self) -> &str {
        &self.url[self.base().len()..]
    }

    pub fn clear_log(&self) {
        std::fs::write(&self.log, "").unwrap();
    }

    pub fn logged(&self) -> Logged {
        server_log(&self.log)
    }
}

/// A server's log lines, keyed by (method, id).
pub fn server_log(path: &Path) -> Logged {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let id = match &v["id"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            ((v["method"].as_str().unwrap().to_string(), id), v)
        })
        .collect()
}

/// Reads records from the feed until every request the server logged has an answered operation;
/// returns every record read and the answered operations by (method, id). An operation whose
/// answer came in another exchange counts in the record of that exchange.
pub fn collect(feed: &mut RecordFeed, logged: &Logged) -> (Vec<Record>, Operations) {
    let mut records = Vec::new();
    let mut ops = BTreeMap::new();
    while !logged.keys().all(|k| ops.contains_key(k)) {
        let record = feed.record();
        for op in record.mcp.iter().flat_map(|m| &m.operations) {
            if op.status != McpOperationStatus::Answered {
                continue;
            }
            let key = (op.method.clone(), op.request_id.clone());
            ops.insert(key, (op.clone(), record.clone()));
        }
        records.push(record);
    }
    (records, ops)
}

/// Every logged request: recorded, answered, its duration containing the server's own time.
/// Returns how much longer tokentap's duration is than the server's, per operation (ns): the
/// server's time up to the moment its answer was handed to the socket where it logs that
/// (`sent_ns`, the TypeScript server: Node writes a chunk later than the call), else up to the
/// write (`out_ns`).
pub fn excess_over_server(ops: &Operations, logged: &Logged) -> Vec<i64> {
    let mut excess = Vec::new();
    for (key, line) in logged {
        let (op, record) = &ops[key];
        assert_eq!(op.status, McpOperationStatus::Answered, "{key:?}: {op:?}");
        assert_eq!(record.outcome, Outcome::Ok, "{key:?}: {record:?}");
        let server_ns = line["out_ns"].as_i64().unwrap() - line["in_ns"].as_i64().unwrap();
        let end_ns = op.end_ns.and_then(|e| i64::try_from(e).ok()).unwrap_or_else(|| panic!("{key:?}: no end: {op:?}"));
        let ours = end_ns - op.start_ns;
        let diff = ours - server_ns;
        assert!(diff >= 0, "{key:?}: tokentap {ours} ns, server {server_ns} ns: {op:?}");
        assert_eq!(op.name.as_deref(), line["name"].as_str(), "{key:?}: {op:?}");
        assert_eq!(op.is_error, line["is_error"].as_bool().unwrap(), "{key:?}: {op:?}");
        let sent_ns = line["sent_ns"].as_i64().map_or(server_ns, |sent| sent - line["in_ns"].as_i64().unwrap());
        excess.push(ours - sent_ns);
    }
    excess
}

/// The median of some values.
pub fn median(values: &[i64]) -> i64 {
    let mut v = values.to_vec();
    v.sort_unstable();
    v[v.len() / 2]
}

/// One HTTP/1.1 message as a wire tap saw it: its head, its body without framing, and whether
/// the body ended by its framing.
#[derive(Debug, Clone)]
pub struct WireMessage {
    pub head: String,
    pub body: Vec<u8>,
    pub complete: bool,
}

/// The HTTP/1.1 messages of one direction of a connection, in order (`responses`: the bytes a
/// server sent; a response without length or chunking runs to the end of the connection; a
/// request without them has no body).
pub fn wire_messages(mut raw: &[u8], responses: bool) -> Vec<WireMessage> {
    let mut out = Vec::new();
    while !raw.is_empty() {
        let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
            out.push(WireMessage {
                head: String::from_utf8_lossy(raw).into_owned(),
                body: Vec::new(),
                complete: false,
            });
            break;
        };
        let head = String::from_utf8_lossy(&raw[..end]).into_owned();
        raw = &raw[end + 4..];
        let header = |name: &str| {
            head.split("\r\n").skip(1).find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_ascii_lowercase())
            })
        };
        let status = head.split(' ').nth(1).and_then(|s| s.parse::<u16>().ok()).unwrap_or(0);
        let mut body = Vec::new();
        let complete;
        if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            loop {
                let Some(line_end) = raw.windows(2).position(|w| w == b"\r\n") else {
                    complete = false;
                    raw = &[];
                    break;
                };
                let size_text = String::from_utf8_lossy(&raw[..line_end]).into_owned();
                let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16).unwrap();
                raw = &raw[line_end + 2..];
                if size == 0 {
                    // No trailers in these tests: the terminal chunk's CRLF.
                    complete = raw.len() >= 2;
                    raw = &raw[raw.len().min(2)..];
                    break;
                }
                let take = size.min(raw.len());
                body.extend_from_slice(&raw[..take]);
                if take < size || raw.len() < size + 2 {
                    complete = false;
                    raw = &[];
                    break;
                }
                raw = &raw[size + 2..];
            }
        } else if let Some(len) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
            let take = len.min(raw.len());
            body.extend_from_slice(&raw[..take]);
            complete = take == len;
            raw = &raw[take..];
        } else if responses && !(status == 204 || status == 304 || (100..200).contains(&status)) {
            body.extend_from_slice(raw);
            complete = false;
            raw = &[];
        } else {
            complete = true;
        }
        out.push(WireMessage { head, body, complete });
    }
    out
}

/// Every body of one direction over all of a tap's connections, sorted: complete ones, then the
/// ones cut short (a stream the client closed).
pub fn bodies(connections: &[Vec<u8>], responses: bool) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let (mut complete, mut cut) = (Vec::new(), Vec::new());
    for m in connections.iter().flat_map(|c| wire_messages(c, responses)) {
        if m.complete {
            complete.push(m.body);
        } else {
            cut.push(m.body);
        }
    }
    complete.sort();
    cut.sort();
    (complete, cut)
}

/// The bodies one side received are the bodies the other sent, byte for byte: each complete body
/// there is one here, and each body cut short here (a stream its client closed) is a prefix of
/// one there. Counts match. `what`: which direction, for the messages.
pub fn assert_forwarded(sent: &[Vec<u8>], received: &[Vec<u8>], received_cut: &[Vec<u8>], what: &str) {
    assert_eq!(sent.len(), received.len() + received_cut.len(), "{what}: the number of bodies differs");
    let mut left: Vec<&Vec<u8>> = sent.iter().collect();
    for body in received {
        let at = left.iter().position(|b| *b == body);
        let at = at.unwrap_or_else(|| panic!("{what}: a body arrived changed: {}", String::from_utf8_lossy(body)));
        left.remove(at);
    }
    for body in received_cut {
        let at = left.iter().position(|b| b.starts_with(body));
        let at = at.unwrap_or_else(|| panic!("{what}: a body cut short differs: {}", String::from_utf8_lossy(body)));
        left.remove(at);
    }
}
