//! A test OTLP receiver: a gRPC server (tonic, the generated OTLP services) and an HTTP/protobuf
//! endpoint (`POST /v1/traces`, `POST /v1/metrics`) on free ports, decoding every export with the
//! official protobuf definitions (opentelemetry-proto) and keeping it for the test to inspect.
//!
//! Its ports can be reserved before it listens ([`ReservedReceiver`]): the sockets are bound, so no
//! one else takes the ports, but nothing accepts, so connections are refused — a collector that is
//! down — until [`ReservedReceiver::start`].
//!
//! [`ReservedReceiver::start_tls`] serves both over TLS instead (a test CA's leaf certificate), for
//! the https:// collector tests.

use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use prost::Message;

pub use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
pub use opentelemetry_proto::tonic::metrics::v1::{metric, Metric};
pub use opentelemetry_proto::tonic::trace::v1::{span, Span};

/// Which endpoint an export came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Grpc,
    Http,
}

/// Everything received so far.
#[derive(Debug, Clone, Default)]
pub struct Received {
    pub traces: Vec<(Transport, ExportTraceServiceRequest)>,
    pub metrics: Vec<(Transport, ExportMetricsServiceRequest)>,
    /// Headers of the exports (name, value), to check configured headers arrive.
    pub headers: Vec<(String, String)>,
}

impl Received {
    /// Every span received, in arrival order (duplicates included).
    pub fn spans(&self) -> Vec<&Span> {
        self.traces
            .iter()
            .flat_map(|(_, r)| r.resource_spans.iter())
            .flat_map(|rs| rs.scope_spans.iter())
            .flat_map(|ss| ss.spans.iter())
            .collect()
    }

    /// Resource attributes of the first trace export.
    pub fn trace_resource(&self) -> Vec<KeyValue> {
        self.traces
            .first()
            .and_then(|(_, r)| r.resource_spans.first())
            .and_then(|rs| rs.resource.clone())
            .map(|r| r.attributes)
            .unwrap_or_default()
    }

    /// Every metric of every export, in arrival order (cumulative exports repeat metrics).
    pub fn metrics_named(&self, name: &str) -> Vec<&Metric> {
        self.metrics
            .iter()
            .flat_map(|(_, r)| r.resource_metrics.iter())
            .flat_map(|rm| rm.scope_metrics.iter())
            .flat_map(|sm| sm.metrics.iter())
            .filter(|m| m.name == name)
            .collect()
    }

    /// The largest total `count` over the data points of one histogram export, across exports.
    /// Exports are cumulative, so this is the count at the latest export.
    pub fn histogram_count(&self, name: &str) -> u64 {
        self.metrics_named(name)
            .iter()
            .filter_map(|m| match &m.data {
                Some(metric::Data::Histogram(h)) => Some(h.data_points.iter().map(|p| p.count).sum::<u64>()),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// The largest value of a counter (summed over its data points), across exports.
    pub fn counter_value(&self, name: &str) -> i64 {
        self.metrics_named(name)
            .iter()
            .filter_map(|m| match &m.data {
                Some(metric::Data::Sum(s)) => Some(
                    s.data_points
                        .iter()
                        .map(|p| match p.value {
                            Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsInt(i)) => i,
                            Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsDouble(d)) => {
                                d as i64
                            }
                            None => 0,
                        })
                        .sum::<i64>(),
                ),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }
}

/// A span attribute's value, as a string for strings and as JSON-ish text otherwise.
pub fn attr<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()).and_then(|v| v.value.as_ref())
}

pub fn attr_str<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match attr(attributes, key) {
        Some(any_value::Value::StringValue(s)) => Some(s),
        _ => None,
    }
}

pub fn attr_f64(attributes: &[KeyValue], key: &str) -> Option<f64> {
    match attr(attributes, key) {
        Some(any_value::Value::DoubleValue(d)) => Some(*d),
        Some(any_value::Value::IntValue(i)) => Some(*i as f64),
        _ => None,
    }
}

pub fn attr_bool(attributes: &[KeyValue], key: &str) -> Option<bool> {
    match attr(attributes, key) {
        Some(any_value::Value::BoolValue(b)) => Some(*b),
        _ => None,
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Default)]
struct Shared {
    received: Mutex<Received>,
    changed: Condvar,
}

impl Shared {
    fn push(&self, f: impl FnOnce(&mut Received)) {
        f(&mut self.received.lock().unwrap());
        self.changed.notify_all();
    }
}

#[derive(Clone)]
struct Service(Arc<Shared>);

#[tonic::async_trait]
impl TraceService for Service {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let headers: Vec<(String, String)> = request
            .metadata()
            .iter()
            .filter_map(|kv| match kv {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                    Some((k.to_string(), v.to_str().unwrap_or("").to_string()))
                }
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect();
        let message = request.into_inner();
        self.0.push(|r| {
            r.headers.extend(headers);
            r.traces.push((Transport::Grpc, message));
        });
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Service {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let message = request.into_inner();
        self.0.push(|r| r.metrics.push((Transport::Grpc, message)));
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

type HttpBody = Full<Bytes>;

async fn handle_http(shared: Arc<Shared>, req: http::Request<hyper::body::Incoming>) -> http::Response<HttpBody> {
    let respond = |status: u16, body: Vec<u8>| {
        http::Response::builder()
            .status(status)
            .header("content-type", "application/x-protobuf")
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };
    let path = req.uri().path().to_string();
    let content_type_ok = req.headers().get("content-type").is_some_and(|v| v == "application/x-protobuf");
    let headers: Vec<(String, String)> =
        req.headers().iter().map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string())).collect();
    if req.method() != http::Method::POST || !content_type_ok {
        return respond(400, Vec::new());
    }
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return respond(400, Vec::new()),
    };
    match path.as_str() {
        "/v1/traces" => match ExportTraceServiceRequest::decode(body) {
            Ok(message) => {
                shared.push(|r| {
                    r.headers.extend(headers);
                    r.traces.push((Transport::Http, message));
                });
                respond(200, ExportTraceServiceResponse::default().encode_to_vec())
            }
            Err(_) => respond(400, Vec::new()),
        },
        "/v1/metrics" => match ExportMetricsServiceRequest::decode(body) {
            Ok(message) => {
                shared.push(|r| r.metrics.push((Transport::Http, message)));
                respond(200, ExportMetricsServiceResponse::default().encode_to_vec())
            }
            Err(_) => respond(400, Vec::new()),
        },
        _ => respond(404, Vec::new()),
    }
}

/// A certificate chain and its private key (PEM) the receiver serves TLS with.
#[derive(Clone)]
pub struct TlsIdentity {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

fn tls_acceptor(identity: &TlsIdentity) -> tokio_rustls::TlsAcceptor {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls;
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&identity.cert_pem).collect::<Result<_, _>>().expect("certificate PEM");
    let key = PrivateKeyDer::from_pem_slice(&identity.key_pem).expect("private key PEM");
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("TLS server config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

async fn serve_http<IO>(io: IO, state: Arc<Shared>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| {
        let state = state.clone();
        async move { Ok::<_, std::convert::Infallible>(handle_http(state, req).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), service).await;
}

/// Two bound sockets that do not accept yet (connections to them are refused).
pub struct ReservedReceiver {
    grpc: tokio::net::TcpSocket,
    http: tokio::net::TcpSocket,
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
}

impl ReservedReceiver {
    pub fn reserve() -> ReservedReceiver {
        let bind = || {
            let socket = tokio::net::TcpSocket::new_v4().expect("socket");
            socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind a free port");
            let addr = socket.local_addr().expect("local addr");
            (socket, addr)
        };
        let (grpc, grpc_addr) = bind();
        let (http, http_addr) = bind();
        ReservedReceiver { grpc, http, grpc_addr, http_addr }
    }

    pub fn grpc_endpoint(&self) -> String {
        format!("http://{}", self.grpc_addr)
    }

    pub fn http_endpoint(&self) -> String {
        format!("http://{}", self.http_addr)
    }

    /// Starts listening and serving on the reserved ports.
    pub fn start(self) -> OtlpReceiver {
        self.serve(None)
    }

    /// Starts listening and serving on the reserved ports, over TLS with `identity`.
    pub fn start_tls(self, identity: TlsIdentity) -> OtlpReceiver {
        self.serve(Some(identity))
    }

    fn serve(self, tls: Option<TlsIdentity>) -> OtlpReceiver {
        let is_tls = tls.is_some();
        let shared = Arc::new(Shared::default());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let state = shared.clone();
        let ReservedReceiver { grpc, http, grpc_addr, http_addr } = self;
        let thread = std::thread::spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
            runtime.block_on(async move {
                let grpc_listener = grpc.listen(1024).expect("listen (gRPC)");
                let http_listener = http.listen(1024).expect("listen (HTTP)");
                let service = Service(state.clone());
                let mut builder = tonic::transport::Server::builder();
                if let Some(identity) = &tls {
                    let config = tonic::transport::ServerTlsConfig::new()
                        .identity(tonic::transport::Identity::from_pem(&identity.cert_pem, &identity.key_pem));
                    builder = builder.tls_config(config).expect("gRPC TLS config");
                }
                let acceptor = tls.as_ref().map(tls_acceptor);
                let grpc_server = builder
                    .add_service(TraceServiceServer::new(service.clone()))
                    .add_service(MetricsServiceServer::new(service))
                    .serve_with_incoming(tonic::transport::server::TcpIncoming::from(grpc_listener));
                let http_state = state.clone();
                let http_server = async move {
                    loop {
                        let Ok((stream, _)) = http_listener.accept().await else { continue };
                        let state = http_state.clone();
                        let acceptor = acceptor.clone();
                        tokio::spawn(async move {
                            match acceptor {
                                None => serve_http(stream, state).await,
                                Some(acceptor) => {
                                    if let Ok(tls) = acceptor.accept(stream).await {
                                        serve_http(tls, state).await;
                                    }
                                }
                            }
                        });
                    }
                };
                let _ = ready_tx.send(());
                tokio::select! {
                    _ = grpc_server => {}
                    _ = http_server => {}
                    _ = stop_rx => {}
                }
            });
        });
        ready_rx.recv_timeout(Duration::from_secs(30)).expect("OTLP receiver did not start");
        OtlpReceiver { shared, grpc_addr, http_addr, tls: is_tls, stop: Some(stop_tx), thread: Some(thread) }
    }
}

/// A running receiver.
pub struct OtlpReceiver {
    shared: Arc<Shared>,
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// Serving TLS: the endpoints are https://.
    tls: bool,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OtlpReceiver {
    /// Reserves free ports and starts at once.
    pub fn start() -> OtlpReceiver {
        ReservedReceiver::reserve().start()
    }

    /// Reserves free ports and starts at once, over TLS.
    pub fn start_tls(identity: TlsIdentity) -> OtlpReceiver {
        ReservedReceiver::reserve().start_tls(identity)
    }

    fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }

    pub fn grpc_endpoint(&self) -> String {
        format!("{}://{}", self.scheme(), self.grpc_addr)
    }

    pub fn http_endpoint(&self) -> String {
        format!("{}://{}", self.scheme(), self.http_addr)
    }

    /// A copy of what arrived so far.
    pub fn received(&self) -> Received {
        self.shared.received.lock().unwrap().clone()
    }

    /// Waits until `condition` holds on what arrived (woken by each export), or panics after
    /// `timeout` describing what did arrive.
    pub fn wait_for(&self, timeout: Duration, what: &str, condition: impl Fn(&Received) -> bool) -> Received {
        let deadline = Instant::now() + timeout;
        let mut guard = self.shared.received.lock().unwrap();
        loop {
            if condition(&guard) {
                return guard.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "OTLP receiver: {what} did not happen within {timeout:?}; received {} trace exports ({} spans), {} metric exports",
                guard.traces.len(),
                guard.spans().len(),
                guard.metrics.len()
            );
            guard = self.shared.changed.wait_timeout(guard, left).unwrap().0;
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
