//! The HTTP side: accept loop (plain HTTP/1.1 + h2c prior knowledge, or TLS with ALPN), routing,
//! and the provider request path: read body → record → plan → wait for headers → stream.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::audio;
use crate::body::MockBody;
use crate::completion::Completion;
use crate::config::MockConfig;
use crate::control;
use crate::endpoint::Route;
use crate::formats::{self, openai_error_body, WireFormat};
use crate::request::ProviderRequest;
use crate::scenario::{EarlyEnd, ResponsePlan};
use crate::shared::{json_response, mock_status_response, Shared};
use crate::stats::{RequestOutcome, StatsHub};
use crate::timeline::{self, Step};

/// A bound mock provider. `run` serves until the process ends.
pub struct MockServer {
    listener: TcpListener,
    local_addr: SocketAddr,
    tls: Option<TlsAcceptor>,
    shared: Arc<Shared>,
}

impl MockServer {
    /// Binds `addr` (port 0 picks a free port) and loads the TLS files if configured.
    pub async fn bind(addr: SocketAddr, config: MockConfig) -> io::Result<MockServer> {
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(crate::tls::acceptor(cert, key).map_err(io::Error::other)?),
            (None, None) => None,
            _ => return Err(io::Error::new(io::ErrorKind::InvalidInput, "--tls-cert and --tls-key go together")),
        };
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let shared = Arc::new(Shared { config, stats: StatsHub::new(), last_request: Mutex::new(None) });
        Ok(MockServer { listener, local_addr, tls, shared })
    }

    /// The bound address (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `http://ADDR` or `https://ADDR`.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.local_addr)
    }

    /// Accepts connections forever; each is served on its own task.
    pub async fn run(self) -> io::Result<()> {
        loop {
            let (stream, _) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors and similar: keep serving the connections we have.
                    eprintln!("tokentap-mock: accept failed: {error}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let shared = Arc::clone(&self.shared);
            let tls = self.tls.clone();
            tokio::spawn(async move {
                match tls {
                    None => serve_connection(stream, shared).await,
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            serve_connection(stream, shared).await;
                        }
                    }
                }
            });
        }
    }
}

/// Starts the mock on its own thread with its own tokio runtime; returns the bound address (port 0 allowed).
pub fn spawn_background(addr: SocketAddr, config: MockConfig) -> io::Result<SocketAddr> {
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new().name("tokentap-mock".to_owned()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
            Ok(runtime) => runtime,
            Err(error) => {
                let _ = bound_tx.send(Err(error));
                return;
            }
        };
        runtime.block_on(async move {
            match MockServer::bind(addr, config).await {
                Ok(server) => {
                    let _ = bound_tx.send(Ok(server.local_addr()));
                    let _ = server.run().await;
                }
                Err(error) => {
                    let _ = bound_tx.send(Err(error));
                }
            }
        });
    })?;
    bound_rx.recv().map_err(|_| io::Error::other("tokentap-mock thread ended before binding"))?
}

async fn serve_connection<IO>(io: IO, shared: Arc<Shared>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request| {
        let shared = Arc::clone(&shared);
        async move { Ok::<_, Infallible>(handle(shared, request).await) }
    });
    // HTTP/1.1 and HTTP/2 (h2c prior knowledge, or h2 after ALPN) on the same port.
    // With upgrades: `/v1/realtime` turns its connection into a WebSocket.
    let _ = auto::Builder::new(TokioExecutor::new()).serve_connection_with_upgrades(TokioIo::new(io), service).await;
}

async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Response<MockBody> {
    if let Some(name) = request.uri().path().strip_prefix("/_mock/") {
        let name = name.to_owned();
        return control::handle(&shared, &name, request.uri().query().unwrap_or_default()).await;
    }
    if request.uri().path() == "/v1/realtime" && crate::realtime::is_upgrade(&request) {
        return crate::realtime::respond(request);
    }
    let outcome = shared.stats.begin();
    let (parts, body) = request.into_parts();
    let body = match read_body(&parts.headers, body).await {
        Ok(body) => body,
        Err(BodyError::TooLarge) => {
            let message = format!("The request body is larger than the limit of {MAX_REQUEST_BODY_BYTES} bytes.");
            let status = StatusCode::PAYLOAD_TOO_LARGE;
            return json_response(status, &openai_error_body(status, &message), Some(outcome));
        }
        // The client went away mid-upload: dropping `outcome` counts it as cancelled.
        Err(BodyError::Incomplete) => {
            return json_response(StatusCode::BAD_REQUEST, &json!({"error": "request body"}), None)
        }
    };
    // The schedule's origin: the whole request is in, as when a provider starts generating.
    let arrival = Instant::now();
    record_last_request(&shared, &parts, &body);

    let path = parts.uri.path();
    let endpoint = match Route::of(&parts.method, path) {
        Some(Route::Provider(endpoint)) => endpoint,
        Some(Route::Audio(endpoint)) => {
            return audio::respond(endpoint, &shared.config, &parts, body, arrival, outcome).await;
        }
        None => {
            let message = format!("Unknown request URL: {} {}", parts.method, path);
            let status = StatusCode::NOT_FOUND;
            return json_response(status, &openai_error_body(status, &message), Some(outcome));
        }
    };
    let format = formats::for_endpoint(&endpoint);
    let bad_request = |message: String, outcome: RequestOutcome| {
        let body = format.error_body(StatusCode::BAD_REQUEST, &message);
        json_response(StatusCode::BAD_REQUEST, &body, Some(outcome))
    };
    let provider_request = match ProviderRequest::parse(&endpoint, path, &body) {
        Ok(parsed) => parsed,
        Err(error) => return bad_request(format!("request body is not valid JSON: {error}"), outcome),
    };
    let plan = match ResponsePlan::resolve(&shared.config, &parts.headers, provider_request.wishes) {
        Ok(plan) => plan,
        Err(error) => return bad_request(error.to_string(), outcome),
    };
    let completion = Completion::build(&provider_request, &plan);
    respond(format, &provider_request, &completion, &plan, arrival, outcome).await
}

async fn respond(
    format: &'static dyn WireFormat,
    request: &ProviderRequest,
    completion: &Completion,
    plan: &ResponsePlan,
    arrival: Instant,
    outcome: RequestOutcome,
) -> Response<MockBody> {
    let request_id = (format.request_id_header(), completion.ids.id("req_", "request"));
    tokio::time::sleep_until(arrival + plan.timing.headers_delay).await;

    if let Some(status) = plan.status {
        let mut response = mock_status_response(status, |status, message| format.error_body(status, message), outcome);
        insert_request_id(&mut response, request_id);
        return response;
    }

    let mut response = if request.stream {
        let timeline = timeline::stream_timeline(format, completion, plan);
        let mut response = Response::new(MockBody::scheduled(arrival, timeline, outcome));
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(format.stream_content_type(completion)));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        response
    } else {
        // A non-streaming answer arrives whole when the stream would have finished.
        tokio::time::sleep_until(arrival + timeline::finish_offset(format, completion, plan)).await;
        match plan.early_end {
            None => json_response(StatusCode::OK, &format.full_body(completion), Some(outcome)),
            Some(EarlyEnd::ErrorEvent { .. }) => {
                let status = StatusCode::INTERNAL_SERVER_ERROR;
                json_response(status, &format.error_body(status, "Mock error mid-generation."), Some(outcome))
            }
            Some(EarlyEnd::Reset { .. }) => {
                let reset = vec![(std::time::Duration::ZERO, Step::Reset)];
                let mut response = Response::new(MockBody::scheduled(Instant::now(), reset, outcome));
                response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                response
            }
        }
    };
    insert_request_id(&mut response, request_id);
    for (name, value) in &plan.response_headers {
        response.headers_mut().append(name.clone(), value.clone());
    }
    response
}

/// The most request body the mock reads (OpenAI takes audio uploads up to 25 MB); a longer body is
/// answered with 413 before the rest of it is read.
const MAX_REQUEST_BODY_BYTES: usize = 32 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("the request body is larger than {MAX_REQUEST_BODY_BYTES} bytes")]
    TooLarge,
    #[error("the request body ended early")]
    Incomplete,
}

/// The whole request body, up to [`MAX_REQUEST_BODY_BYTES`]: a declared `content-length` above it
/// is refused unread, a chunked body as soon as it passes it.
async fn read_body(headers: &http::HeaderMap, body: Incoming) -> Result<Bytes, BodyError> {
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_REQUEST_BODY_BYTES as u64) {
        return Err(BodyError::TooLarge);
    }
    match Limited::new(body, MAX_REQUEST_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => Err(BodyError::TooLarge),
        Err(_) => Err(BodyError::Incomplete),
    }
}

fn insert_request_id(response: &mut Response<MockBody>, (name, id): (&'static str, String)) {
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(name, value);
    }
}

fn record_last_request(shared: &Shared, parts: &http::request::Parts, body: &Bytes) {
    let headers: Vec<[String; 2]> = parts
        .headers
        .iter()
        .map(|(name, value)| [name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()])
        .collect();
    let sha: String = Sha256::digest(body).iter().map(|b| format!("{b:02x}")).collect();
    let record = json!({
        "method": parts.method.as_str(),
        "path_and_query": parts.uri.path_and_query().map_or("/", |p| p.as_str()),
        "version": format!("{:?}", parts.version),
        "headers": headers,
        "body_sha256": sha,
        "body_len": body.len(),
    });
    if let Ok(mut last) = shared.last_request.lock() {
        *last = Some(record);
    }
}
