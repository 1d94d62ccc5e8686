//! The connections to the collector: the HTTP client the SDK's OTLP exporter posts through
//! (hyper on the export thread's runtime, plain TCP or TLS), the gRPC channel it and spool replay
//! share, and the decision whether a failed export goes to the spool.
//!
//! The client records the outcome of every request it made together with the exact bytes the
//! SDK handed it, so the export thread can spool those bytes when the collector was unreachable
//! and replay them later with the same client.

use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls;

use crate::settings::{OtlpTarget, SecretHeaders};
use crate::spool::Signal;

/// Why a connection to the collector could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TransportError {
    #[error("CA file {path}: {source}")]
    CaFile { path: String, source: std::io::Error },
    #[error("CA file {path}: {reason}")]
    CaCertificate { path: String, reason: String },
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("gRPC endpoint {endpoint}: {source}")]
    Grpc { endpoint: String, source: tonic::transport::Error },
}

/// Why one request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SendError {
    /// Worth trying again later (unreachable, overloaded, timed out): spool it.
    #[error("{0}")]
    Retryable(String),
    /// The collector refused the data itself: trying again would fail the same way.
    #[error("{0}")]
    Permanent(String),
    /// The endpoint does not take this signal at all (HTTP 404, 405 or 415; gRPC Unimplemented):
    /// a backend that takes traces only, or a wrong path. A configuration matter, not a failure
    /// of this one request.
    #[error("{0}")]
    Refused(String),
}

/// What became of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// Accepted; carries how many items the collector rejected in a partial success.
    Delivered {
        rejected: u64,
    },
    Failed(SendError),
}

/// Items the collector reported as rejected in a partial success (protobuf answer body).
fn rejected_in(signal: Signal, body: &[u8]) -> u64 {
    match signal {
        Signal::Traces => ExportTraceServiceResponse::decode(body)
            .ok()
            .and_then(|r| r.partial_success)
            .map_or(0, |p| p.rejected_spans.max(0) as u64),
        Signal::Metrics => ExportMetricsServiceResponse::decode(body)
            .ok()
            .and_then(|r| r.partial_success)
            .map_or(0, |p| p.rejected_data_points.max(0) as u64),
    }
}

/// The OTLP/HTTP retry rules: 2xx delivered, 429/502/503/504 and transport failures retryable,
/// every other answer a rejection.
pub(crate) fn classify_http(signal: Signal, result: &Result<Response<Bytes>, SendError>) -> Delivery {
    match result {
        Err(e) => Delivery::Failed(e.clone()),
        Ok(response) => {
            let status = response.status();
            match status.as_u16() {
                200..=299 => Delivery::Delivered { rejected: rejected_in(signal, response.body()) },
                429 | 502 | 503 | 504 => Delivery::Failed(SendError::Retryable(format!("collector answered {status}"))),
                404 | 405 | 415 => Delivery::Failed(SendError::Refused(format!("collector answered {status}"))),
                _ => Delivery::Failed(SendError::Permanent(format!("collector answered {status}"))),
            }
        }
    }
}

/// The OTLP/gRPC retry rules, applied to the error the SDK's tonic exporter reports
/// ("… export failed with gRPC code: Unavailable: …"). Anything else it reports is final.
pub(crate) fn classify_grpc_failure(message: &str) -> SendError {
    let code = message.split_once("gRPC code: ").map(|(_, rest)| rest.split(':').next().unwrap_or("").trim());
    match code {
        Some(
            "Cancelled" | "DeadlineExceeded" | "ResourceExhausted" | "Aborted" | "OutOfRange" | "Unavailable"
            | "DataLoss",
        ) => SendError::Retryable(message.to_string()),
        Some("Unimplemented") => SendError::Refused(message.to_string()),
        _ => SendError::Permanent(message.to_string()),
    }
}

/// Same rules for a status from the generated client (spool replay).
pub(crate) fn classify_grpc_status(status: &tonic::Status) -> SendError {
    use tonic::Code;
    let text = format!("gRPC {:?}: {}", status.code(), status.message());
    match status.code() {
        Code::Cancelled
        | Code::DeadlineExceeded
        | Code::ResourceExhausted
        | Code::Aborted
        | Code::OutOfRange
        | Code::Unavailable
        | Code::DataLoss => SendError::Retryable(text),
        // The generated client reports a channel that could not connect this way.
        Code::Unknown if status.message().starts_with("Service was not ready") => SendError::Retryable(text),
        Code::Unimplemented => SendError::Refused(text),
        _ => SendError::Permanent(text),
    }
}

fn read_ca_file(path: &Path) -> Result<Vec<u8>, TransportError> {
    std::fs::read(path).map_err(|source| TransportError::CaFile { path: path.display().to_string(), source })
}

fn is_https(endpoint: &str) -> bool {
    endpoint.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://"))
}

/// TLS client settings: the public (webpki) roots, plus the CA file's certificates.
fn tls_config(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, TransportError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        let pem = read_ca_file(path)?;
        let bad = |reason: String| TransportError::CaCertificate { path: path.display().to_string(), reason };
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            roots.add(cert.map_err(|e| bad(e.to_string()))?).map_err(|e| bad(e.to_string()))?;
            added += 1;
        }
        if added == 0 {
            return Err(bad("no PEM certificate in it".into()));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// HTTP/1.1 POSTs to one collector endpoint, each on a fresh connection, within a deadline.
pub(crate) struct HttpTransport {
    signal: Signal,
    endpoint: String,
    headers: SecretHeaders,
    timeout: Duration,
    /// Present for https:// endpoints.
    tls: Option<tokio_rustls::TlsConnector>,
}

impl std::fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTransport")
            .field("signal", &self.signal)
            .field("endpoint", &self.endpoint)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl HttpTransport {
    pub(crate) fn new(signal: Signal, target: &OtlpTarget) -> Result<HttpTransport, TransportError> {
        let tls = if is_https(&target.endpoint) {
            Some(tokio_rustls::TlsConnector::from(tls_config(target.ca_file.as_deref())?))
        } else {
            None
        };
        Ok(HttpTransport {
            signal,
            endpoint: target.endpoint.clone(),
            headers: target.headers.clone(),
            timeout: target.timeout,
            tls,
        })
    }

    /// A request for `body` as tokentap itself sends it (spool replay, metrics).
    pub(crate) fn request(&self, body: Bytes) -> Result<Request<Bytes>, SendError> {
        let mut builder = http::Request::post(self.endpoint.as_str())
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .header(http::header::USER_AGENT, concat!("tokentap/", env!("CARGO_PKG_VERSION")));
        for (name, value) in self.headers.iter() {
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder.body(body).map_err(|e| SendError::Permanent(format!("request: {e}")))
    }

    /// Sends one request and reads the whole answer, within the configured timeout. Must run
    /// inside a Tokio runtime (the export thread's).
    pub(crate) async fn send(&self, request: Request<Bytes>) -> Result<Response<Bytes>, SendError> {
        let deadline = self.timeout;
        tokio::time::timeout(deadline, self.send_now(request))
            .await
            .unwrap_or_else(|_| Err(SendError::Retryable(format!("no answer within {deadline:?}"))))
    }

    /// `send`, classified.
    pub(crate) async fn deliver(&self, body: Bytes) -> Delivery {
        let result = match self.request(body) {
            Ok(request) => self.send(request).await,
            Err(e) => Err(e),
        };
        classify_http(self.signal, &result)
    }

    async fn send_now(&self, request: Request<Bytes>) -> Result<Response<Bytes>, SendError> {
        let (parts, body) = request.into_parts();
        let uri = parts.uri;
        let host = uri.host().unwrap_or("localhost").trim_start_matches('[').trim_end_matches(']').to_string();
        let port = uri.port_u16().unwrap_or(if self.tls.is_some() { 443 } else { 80 });
        let stream = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| SendError::Retryable(format!("connect to {host}:{port}: {e}")))?;
        let _ = stream.set_nodelay(true);
        let authority = uri.authority().map(|a| a.as_str().to_string()).unwrap_or_else(|| format!("{host}:{port}"));
        let mut builder = http::Request::post(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"))
            .header(http::header::HOST, authority);
        for (name, value) in &parts.headers {
            builder = builder.header(name, value);
        }
        let request = builder.body(Full::new(body)).map_err(|e| SendError::Permanent(format!("request: {e}")))?;
        match &self.tls {
            None => exchange(stream, request).await,
            Some(connector) => {
                let name = ServerName::try_from(host.clone())
                    .map_err(|e| SendError::Permanent(format!("TLS server name {host:?}: {e}")))?;
                let tls = connector
                    .connect(name, stream)
                    .await
                    .map_err(|e| SendError::Retryable(format!("TLS handshake with {host}:{port}: {e}")))?;
                exchange(tls, request).await
            }
        }
    }
}

/// One HTTP/1.1 exchange on a fresh connection.
async fn exchange<IO>(io: IO, request: http::Request<Full<Bytes>>) -> Result<Response<Bytes>, SendError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| SendError::Retryable(format!("HTTP handshake: {e}")))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let response = sender.send_request(request).await.map_err(|e| SendError::Retryable(format!("HTTP: {e}")))?;
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| SendError::Retryable(format!("reading the answer: {e}")))?;
    Ok(Response::from_parts(parts, body))
}

/// The last request the SDK's exporter made through a [`SpoolingClient`]: the bytes it handed
/// over and what became of them.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    pub(crate) body: Bytes,
    pub(crate) delivery: Delivery,
}

/// The `HttpClient` given to the SDK's OTLP/HTTP exporter: sends through [`HttpTransport`] and
/// keeps the outcome for the export thread, which spools `body` when it was retryable.
#[derive(Debug, Clone)]
pub(crate) struct SpoolingClient {
    transport: Arc<HttpTransport>,
    last: Arc<Mutex<Option<Attempt>>>,
}

impl SpoolingClient {
    pub(crate) fn new(transport: Arc<HttpTransport>) -> SpoolingClient {
        SpoolingClient { transport, last: Arc::default() }
    }

    /// The outcome of the request made since the last call, if any.
    pub(crate) fn take_attempt(&self) -> Option<Attempt> {
        self.last.lock().take()
    }

    fn record(&self, body: Bytes, delivery: Delivery) {
        *self.last.lock() = Some(Attempt { body, delivery });
    }
}

#[async_trait::async_trait]
impl HttpClient for SpoolingClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let body = request.body().clone();
        let result = self.transport.send(request).await;
        self.record(body, classify_http(self.transport.signal, &result));
        result.map_err(|e| Box::new(e) as HttpError)
    }
}

/// A lazily connecting gRPC channel to the collector (TLS for https://, with the public roots and
/// the CA file). Must be created inside a Tokio runtime, which must keep running it.
pub(crate) fn grpc_channel(target: &OtlpTarget) -> Result<tonic::transport::Channel, TransportError> {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
    let grpc = |source| TransportError::Grpc { endpoint: target.endpoint.clone(), source };
    let mut endpoint = Endpoint::from_shared(target.endpoint.clone())
        .map_err(grpc)?
        .connect_timeout(target.timeout)
        .timeout(target.timeout);
    if is_https(&target.endpoint) {
        let mut tls = ClientTlsConfig::new().with_webpki_roots();
        if let Some(path) = &target.ca_file {
            tls = tls.ca_certificate(Certificate::from_pem(read_ca_file(path)?));
        }
        endpoint = endpoint.tls_config(tls).map_err(grpc)?;
    }
    Ok(endpoint.connect_lazy())
}

/// The configured headers as gRPC metadata.
pub(crate) fn grpc_metadata(headers: &SecretHeaders) -> Result<tonic::metadata::MetadataMap, SendError> {
    let mut metadata = tonic::metadata::MetadataMap::new();
    for (name, value) in headers.iter() {
        let key = tonic::metadata::MetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes())
            .map_err(|e| SendError::Permanent(format!("header name: {e}")))?;
        let value = value.parse().map_err(|e| SendError::Permanent(format!("header value: {e}")))?;
        metadata.insert(key, value);
    }
    Ok(metadata)
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTracePartialSuccess;

    use super::*;

    fn answer(status: u16, body: Vec<u8>) -> Result<Response<Bytes>, SendError> {
        Ok(Response::builder().status(status).body(Bytes::from(body)).unwrap())
    }

    #[test]
    fn unreachable_and_overloaded_collectors_are_retried_refusals_are_not() {
        let retryable = |r: &Result<Response<Bytes>, SendError>| {
            matches!(classify_http(Signal::Traces, r), Delivery::Failed(SendError::Retryable(_)))
        };
        for status in [429, 502, 503, 504] {
            assert!(retryable(&answer(status, vec![])), "{status}");
        }
        assert!(retryable(&Err(SendError::Retryable("connect: refused".into()))));
        for status in [400, 401, 413, 500] {
            assert!(
                matches!(
                    classify_http(Signal::Traces, &answer(status, vec![])),
                    Delivery::Failed(SendError::Permanent(_))
                ),
                "{status}"
            );
        }
        // An endpoint that does not take the signal at all (Phoenix answers 405 on /v1/metrics).
        for status in [404, 405, 415] {
            assert!(
                matches!(
                    classify_http(Signal::Metrics, &answer(status, vec![])),
                    Delivery::Failed(SendError::Refused(_))
                ),
                "{status}"
            );
        }
        assert_eq!(classify_http(Signal::Traces, &answer(200, vec![])), Delivery::Delivered { rejected: 0 });
        let partial = ExportTraceServiceResponse {
            partial_success: Some(ExportTracePartialSuccess { rejected_spans: 3, error_message: "x".into() }),
        };
        assert_eq!(
            classify_http(Signal::Traces, &answer(200, partial.encode_to_vec())),
            Delivery::Delivered { rejected: 3 }
        );
    }

    #[test]
    fn grpc_failures_reported_by_the_sdk_are_classified_by_code() {
        let retryable = |m: &str| matches!(classify_grpc_failure(m), SendError::Retryable(_));
        assert!(retryable("TonicTracesClient export failed with gRPC code: Unavailable: transport error"));
        assert!(retryable("TonicTracesClient export failed with gRPC code: DeadlineExceeded"));
        assert!(retryable("TonicTracesClient export failed with gRPC code: ResourceExhausted"));
        assert!(!retryable("TonicTracesClient export failed with gRPC code: InvalidArgument"));
        assert!(!retryable("TonicTracesClient export failed with gRPC code: Unauthenticated"));
        assert!(!retryable("exporter already shutdown"));
        assert!(matches!(
            classify_grpc_status(&tonic::Status::unknown("Service was not ready: transport error")),
            SendError::Retryable(_)
        ));
        assert!(matches!(classify_grpc_status(&tonic::Status::invalid_argument("bad")), SendError::Permanent(_)));
        // A server without the signal's service.
        assert!(matches!(classify_grpc_status(&tonic::Status::unimplemented("no metrics")), SendError::Refused(_)));
        assert!(matches!(
            classify_grpc_failure("Metrics export failed with gRPC code: Unimplemented: unknown service"),
            SendError::Refused(_)
        ));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_client_keeps_the_exact_bytes_of_a_request_it_could_not_deliver() {
        // Port 0 cannot be connected to: the attempt fails at once, without a collector.
        let target = OtlpTarget {
            protocol: crate::settings::OtlpProtocol::HttpProtobuf,
            endpoint: "http://127.0.0.1:0/v1/traces".into(),
            headers: SecretHeaders::default(),
            timeout: Duration::from_secs(5),
            ca_file: None,
        };
        let client = SpoolingClient::new(Arc::new(HttpTransport::new(Signal::Traces, &target).unwrap()));
        let request = Request::post(target.endpoint.as_str()).body(Bytes::from_static(b"\x0a\x01x")).unwrap();
        assert!(client.send_bytes(request).await.is_err());
        let attempt = client.take_attempt().expect("the attempt is recorded");
        assert_eq!(attempt.body, Bytes::from_static(b"\x0a\x01x"));
        assert!(matches!(attempt.delivery, Delivery::Failed(SendError::Retryable(_))), "{:?}", attempt.delivery);
        assert!(client.take_attempt().is_none());
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate").unwrap();
        assert!(matches!(tls_config(Some(&path)), Err(TransportError::CaCertificate { .. })));
        assert!(matches!(tls_config(Some(&dir.path().join("missing.pem"))), Err(TransportError::CaFile { .. })));
        assert!(tls_config(None).is_ok());
    }
}
