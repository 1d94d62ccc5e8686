//! The streaming client: HTTP/1.1 over TCP (and TLS for https targets), with a pool of kept-alive
//! connections, and the measurement of each response with tokentap's [`StreamAnalyzer`].
//!
//! **Never retries.** A request that fails for any reason (connect, status, timeout, a body that
//! breaks off) is returned as a failure; a broken connection is dropped, never reused.
//!
//! Memory per request is bounded whatever the server sends: the body is fed to the analyzer chunk
//! by chunk and not kept (the analyzer bounds itself: one event, the token text), an error body is
//! read up to [`ERROR_BODY_BYTES`], and a body above `--max-response-bytes` fails the request.

use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokentap_analysis::{AnalysisLimits, RequestTiming, StreamAnalysis, StreamAnalyzer, StreamContext};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

use crate::config::{BenchConfig, Target};
use crate::record::{stream_failure, truncate, Failure, FailureKind};

/// A kept-alive connection idle longer than this is closed rather than reused. Servers close idle
/// connections on their own clock (cpp-httplib, which llama.cpp uses, after 5 s; many proxies after
/// 5–60 s), and a request written into a connection the server is closing fails although the
/// server never saw it: since nothing is retried, the bench avoids the race instead.
const IDLE_REUSE_LIMIT: Duration = Duration::from_secs(2);

/// The most of a non-2xx body read for the failure's detail.
const ERROR_BODY_BYTES: usize = 16 * 1024;

/// What one exchange produced.
#[derive(Debug)]
pub(crate) struct Exchange {
    pub(crate) status: Option<u16>,
    pub(crate) analysis: Option<StreamAnalysis>,
    pub(crate) failure: Option<Failure>,
    pub(crate) tokentap_request_id: Option<String>,
    /// The `server` response header (at most 64 characters), for the report's environment.
    pub(crate) server_header: Option<String>,
}

/// Connections to one target, and the fixed parts of every request.
pub(crate) struct Client {
    target: Target,
    path: String,
    provider_hint: &'static str,
    headers: http::HeaderMap,
    tls: Option<tokio_rustls::TlsConnector>,
    /// Kept-alive connections and since when they are idle.
    idle: Mutex<Vec<(SendRequest<Full<Bytes>>, Instant)>>,
    timeout: Duration,
    max_response_bytes: u64,
    fresh_connections: bool,
}

impl Client {
    pub(crate) fn new(config: &BenchConfig, target: Target) -> Result<Arc<Client>, ClientError> {
        let mut headers = http::HeaderMap::new();
        let authority = if (target.https && target.port == 443) || (!target.https && target.port == 80) {
            target.host.clone()
        } else {
            format!("{}:{}", target.host, target.port)
        };
        headers.insert(http::header::HOST, value(&authority)?);
        headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
        headers.insert(http::header::ACCEPT, http::HeaderValue::from_static("text/event-stream"));
        headers.insert(http::header::USER_AGENT, value(&format!("tokentap-bench/{}", env!("CARGO_PKG_VERSION")))?);
        match config.api {
            crate::config::Api::Openai => {
                if let Some(key) = &config.api_key {
                    let mut v = value(&format!("Bearer {}", key.expose()))?;
                    v.set_sensitive(true);
                    headers.insert(http::header::AUTHORIZATION, v);
                }
            }
            crate::config::Api::Anthropic => {
                headers.insert("anthropic-version", http::HeaderValue::from_static("2023-06-01"));
                if let Some(key) = &config.api_key {
                    let mut v = value(key.expose())?;
                    v.set_sensitive(true);
                    headers.insert("x-api-key", v);
                }
            }
        }
        for (name, v) in &config.headers {
            headers.append(name.clone(), v.clone());
        }
        let tls = if target.https { Some(tls_connector()?) } else { None };
        Ok(Arc::new(Client {
            path: target.request_path(config.api),
            provider_hint: crate::api::provider_hint(config.api),
            target,
            headers,
            tls,
            idle: Mutex::new(Vec::new()),
            timeout: config.timeout,
            max_response_bytes: config.max_response_bytes,
            fresh_connections: config.fresh_connections,
        }))
    }

    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// Sends one request whose t0 is `t0` and measures its response. Never retries.
    pub(crate) async fn exchange(&self, body: Bytes, t0: Instant) -> Exchange {
        let deadline = tokio::time::Instant::from_std(t0 + self.timeout);
        let mut out =
            Exchange { status: None, analysis: None, failure: None, tokentap_request_id: None, server_header: None };
        let fail = |out: &mut Exchange, kind, detail: String| {
            out.failure = Some(Failure { kind, detail: truncate(&detail, 300) });
        };
        let (mut sender, reused) = match tokio::time::timeout_at(deadline, self.connection()).await {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => {
                fail(&mut out, FailureKind::Connect, e.to_string());
                return out;
            }
            Err(_) => {
                fail(&mut out, FailureKind::Timeout, "no connection before the timeout".into());
                return out;
            }
        };
        let mut request = http::Request::new(Full::new(body));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = match self.path.parse() {
            Ok(uri) => uri,
            Err(e) => {
                fail(&mut out, FailureKind::Transport, format!("bad path: {e}"));
                return out;
            }
        };
        *request.headers_mut() = self.headers.clone();
        let response = match tokio::time::timeout_at(deadline, sender.send_request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => {
                // A kept-alive connection the server closed as the request went out: the server
                // did not answer it. Counted as its own kind (never retried); `--fresh-connections`
                // avoids it with servers that close connections after a streamed response.
                let kind = if reused { FailureKind::StaleConnection } else { FailureKind::Transport };
                fail(&mut out, kind, e.to_string());
                return out;
            }
            Err(_) => {
                fail(&mut out, FailureKind::Timeout, "no response head before the timeout".into());
                return out;
            }
        };
        let t_headers = ns_since(t0);
        let status = response.status().as_u16();
        out.status = Some(status);
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(|v| truncate(v, 64));
        out.tokentap_request_id = header("x-tokentap-request-id");
        out.server_header = header("server");
        let content_type = header("content-type");
        // The server's last response on this connection: do not reuse it.
        let server_closes = header("connection").is_some_and(|v| v.to_ascii_lowercase().contains("close"));
        let mut body = response.into_body();
        if !(200..300).contains(&status) {
            let mut text = Vec::new();
            while text.len() < ERROR_BODY_BYTES {
                match tokio::time::timeout_at(deadline, body.frame()).await {
                    Ok(Some(Ok(frame))) => {
                        if let Some(data) = frame.data_ref() {
                            text.extend_from_slice(&data[..data.len().min(ERROR_BODY_BYTES - text.len())]);
                        }
                    }
                    _ => break,
                }
            }
            // The embedded tokentap's own answer when it could not reach the target: a connect
            // failure, not a status the target chose.
            if let Some(message) = tokentap_connect_failure(&text) {
                fail(&mut out, FailureKind::Connect, message);
                return out;
            }
            let detail = format!("HTTP {status}: {}", String::from_utf8_lossy(&text).trim());
            fail(&mut out, FailureKind::HttpStatus, detail);
            return out;
        }
        let context = StreamContext {
            request_path: self.path.clone(),
            provider_hint: Some(self.provider_hint.to_string()),
            response_content_type: content_type,
            response_status: Some(status),
        };
        let mut analyzer = StreamAnalyzer::new(context, AnalysisLimits::default());
        let mut received: u64 = 0;
        let mut t_last_byte = None;
        let mut complete = false;
        loop {
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    let Some(data) = frame.data_ref() else { continue };
                    if data.is_empty() {
                        continue;
                    }
                    let t = ns_since(t0);
                    received += data.len() as u64;
                    if received > self.max_response_bytes {
                        fail(&mut out, FailureKind::TooLarge, format!("more than {} bytes", self.max_response_bytes));
                        break;
                    }
                    analyzer.push_chunk(data, t);
                    t_last_byte = Some(t);
                }
                Ok(Some(Err(e))) => {
                    fail(&mut out, FailureKind::Truncated, format!("the body broke off: {e}"));
                    break;
                }
                Ok(None) => {
                    complete = true;
                    break;
                }
                Err(_) => {
                    fail(&mut out, FailureKind::Timeout, "the stream had not ended before the timeout".into());
                    break;
                }
            }
        }
        let t_end = if complete { Some(t_last_byte.unwrap_or_else(|| ns_since(t0))) } else { None };
        let analysis = analyzer.finish(RequestTiming {
            t_upstream_headers_ns: Some(t_headers),
            t_end_ns: t_end,
            body_complete: complete,
        });
        if complete {
            out.failure = stream_failure(&analysis);
            if out.failure.is_none() && !server_closes {
                self.give_back(sender);
            }
        }
        out.analysis = Some(analysis);
        out
    }

    /// An idle kept-alive connection (true), else a new one (false).
    async fn connection(&self) -> Result<(SendRequest<Full<Bytes>>, bool), ClientError> {
        loop {
            let idle = self.idle.lock().pop();
            match idle {
                Some((mut sender, idle_since)) => {
                    if idle_since.elapsed() < IDLE_REUSE_LIMIT && !sender.is_closed() && sender.ready().await.is_ok() {
                        return Ok((sender, true));
                    }
                }
                None => break,
            }
        }
        let stream = TcpStream::connect((self.target.host.as_str(), self.target.port))
            .await
            .map_err(|e| ClientError::Connect(format!("{}:{}: {e}", self.target.host, self.target.port)))?;
        let _ = stream.set_nodelay(true);
        let sender = match &self.tls {
            None => handshake(stream).await?,
            Some(connector) => {
                let name = rustls::pki_types::ServerName::try_from(self.target.host.clone())
                    .map_err(|e| ClientError::Connect(format!("{}: {e}", self.target.host)))?;
                let tls = connector
                    .connect(name, stream)
                    .await
                    .map_err(|e| ClientError::Connect(format!("TLS with {}: {e}", self.target.host)))?;
                handshake(tls).await?
            }
        };
        Ok((sender, false))
    }

    fn give_back(&self, sender: SendRequest<Full<Bytes>>) {
        if self.fresh_connections {
            return;
        }
        {
            let mut idle = self.idle.lock();
            idle.push((sender, Instant::now()));
        }
    }
}

async fn handshake<T>(io: T) -> Result<SendRequest<Full<Bytes>>, ClientError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| ClientError::Connect(format!("HTTP handshake: {e}")))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

fn tls_connector() -> Result<tokio_rustls::TlsConnector, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

fn value(text: &str) -> Result<http::HeaderValue, ClientError> {
    http::HeaderValue::from_str(text).map_err(|_| ClientError::Header)
}

fn ns_since(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("TLS setup: {0}")]
    Tls(String),
    #[error("a header (host, API key or --header) is not a valid header value")]
    Header,
}

/// The message of tokentap's error answer (`{"error":{"type":"tokentap_upstream_error","kind":…}}`)
/// when its kind says the upstream could not be connected to (refused, unreachable, TLS, DNS).
fn tokentap_connect_failure(body: &[u8]) -> Option<String> {
    const CONNECT_KINDS: &[&str] = &[
        "ConnectRefused",
        "ConnectTimedout",
        "ConnectNoRoute",
        "ConnectError",
        "TLSHandshakeFailure",
        "TLSHandshakeTimedout",
        "InvalidCert",
        "HandshakeError",
        "DNSLookupFailed",
    ];
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let error = value.get("error")?;
    if error.get("type")?.as_str()? != "tokentap_upstream_error" {
        return None;
    }
    let kind = error.get("kind")?.as_str()?;
    CONNECT_KINDS.contains(&kind).then(|| error.get("message").and_then(|m| m.as_str()).unwrap_or(kind).to_string())
}

#[cfg(test)]
mod connect_failure_tests {
    use super::tokentap_connect_failure;

    #[test]
    fn tokentaps_connect_errors_are_connect_failures_and_other_answers_are_not() {
        let refused = br#"{"error":{"type":"tokentap_upstream_error","kind":"ConnectRefused","message":"tokentap: upstream: the connection was refused"}}"#;
        assert_eq!(
            tokentap_connect_failure(refused).as_deref(),
            Some("tokentap: upstream: the connection was refused")
        );
        let timeout = br#"{"error":{"type":"tokentap_upstream_error","kind":"ReadTimedout","message":"x"}}"#;
        assert_eq!(tokentap_connect_failure(timeout), None);
        assert_eq!(tokentap_connect_failure(br#"{"error":{"type":"server_error","kind":"ConnectRefused"}}"#), None);
        assert_eq!(tokentap_connect_failure(b"Bad Gateway"), None);
    }
}
