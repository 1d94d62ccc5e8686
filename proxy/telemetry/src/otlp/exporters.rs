//! The exporters and their connections: one signal's link to its collector endpoint (metrics and
//! spool replay go through it), the SDK's OTLP span and metric exporters built on it, and one SDK
//! export run with its outcome.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use opentelemetry_otlp::{Protocol, RetryPolicy, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::trace::SpanExporter as _;
use prost::Message;

use crate::settings::{OtlpProtocol, OtlpTarget};
use crate::spool::Signal;
use crate::transport::{
    self, classify_grpc_failure, classify_grpc_status, Attempt, Delivery, HttpTransport, SendError, SpoolingClient,
};

/// One signal's connection to its collector endpoint: used for metrics and to replay the spool.
pub(super) enum Link {
    Http(Arc<HttpTransport>),
    Grpc { channel: tonic::transport::Channel, metadata: tonic::metadata::MetadataMap },
}

impl Link {
    /// Created inside the export runtime (a gRPC channel needs one).
    fn new(signal: Signal, target: &OtlpTarget) -> Result<Link, String> {
        Ok(match target.protocol {
            OtlpProtocol::HttpProtobuf => {
                Link::Http(Arc::new(HttpTransport::new(signal, target).map_err(|e| e.to_string())?))
            }
            OtlpProtocol::Grpc => Link::Grpc {
                channel: transport::grpc_channel(target).map_err(|e| e.to_string())?,
                metadata: transport::grpc_metadata(&target.headers).map_err(|e| e.to_string())?,
            },
        })
    }

    /// Sends one encoded request of `signal`.
    pub(super) async fn deliver(&self, signal: Signal, body: Bytes) -> Delivery {
        match self {
            Link::Http(http) => http.deliver(body).await,
            Link::Grpc { channel, metadata } => {
                let failed = |e: SendError| Delivery::Failed(e);
                let spooled = |e: prost::DecodeError| SendError::Permanent(format!("spooled request: {e}"));
                match signal {
                    Signal::Traces => {
                        let message = match ExportTraceServiceRequest::decode(body.as_ref()) {
                            Ok(m) => m,
                            Err(e) => return failed(spooled(e)),
                        };
                        match TraceServiceClient::new(channel.clone()).export(grpc_request(metadata, message)).await {
                            Ok(r) => Delivery::Delivered {
                                rejected: r.into_inner().partial_success.map_or(0, |p| p.rejected_spans.max(0) as u64),
                            },
                            Err(status) => failed(classify_grpc_status(&status)),
                        }
                    }
                    Signal::Metrics => {
                        let message = match ExportMetricsServiceRequest::decode(body.as_ref()) {
                            Ok(m) => m,
                            Err(e) => return failed(spooled(e)),
                        };
                        match MetricsServiceClient::new(channel.clone()).export(grpc_request(metadata, message)).await {
                            Ok(r) => Delivery::Delivered {
                                rejected: r
                                    .into_inner()
                                    .partial_success
                                    .map_or(0, |p| p.rejected_data_points.max(0) as u64),
                            },
                            Err(status) => failed(classify_grpc_status(&status)),
                        }
                    }
                }
            }
        }
    }
}

fn grpc_request<T>(metadata: &tonic::metadata::MetadataMap, message: T) -> tonic::Request<T> {
    tonic::Request::from_parts(metadata.clone(), tonic::Extensions::default(), message)
}

/// The options both signals' HTTP exporters take: protobuf to the target's URL through our
/// client, with the target's timeout and headers and the SDK's retries off.
fn http_options<B: WithExportConfig + WithHttpConfig>(builder: B, target: &OtlpTarget, client: &SpoolingClient) -> B {
    let headers: HashMap<String, String> = target.headers.iter().cloned().collect();
    builder
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(target.endpoint.clone())
        .with_timeout(target.timeout)
        .with_headers(headers)
        .with_http_client(client.clone())
        .with_retry_policy(RetryPolicy::disabled())
}

/// The options both signals' gRPC exporters take: our channel and metadata, the target's
/// timeout, the SDK's retries off.
fn grpc_options<B: WithExportConfig + WithTonicConfig>(
    builder: B,
    target: &OtlpTarget,
    channel: &tonic::transport::Channel,
    metadata: &tonic::metadata::MetadataMap,
) -> B {
    builder
        .with_channel(channel.clone())
        .with_metadata(metadata.clone())
        .with_timeout(target.timeout)
        .with_retry_policy(RetryPolicy::disabled())
}

/// The trace export: the SDK's OTLP exporter, and the connection spooled batches are replayed on.
pub(super) struct Traces {
    pub(super) exporter: opentelemetry_otlp::SpanExporter,
    /// HTTP: the client the exporter posts through, which reports each attempt.
    pub(super) client: Option<SpoolingClient>,
    pub(super) link: Link,
}

impl Traces {
    /// Builds the exporter; inside the export runtime (the tonic channel is spawned on it).
    pub(super) fn new(target: &OtlpTarget, resource: &opentelemetry_sdk::Resource) -> Result<Traces, String> {
        let link = Link::new(Signal::Traces, target)?;
        let (mut exporter, client) = match &link {
            Link::Http(http) => {
                let client = SpoolingClient::new(http.clone());
                let exporter = http_options(opentelemetry_otlp::SpanExporter::builder().with_http(), target, &client)
                    .build()
                    .map_err(|e| e.to_string())?;
                (exporter, Some(client))
            }
            Link::Grpc { channel, metadata } => {
                let builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
                let exporter = grpc_options(builder, target, channel, metadata).build().map_err(|e| e.to_string())?;
                (exporter, None)
            }
        };
        exporter.set_resource(resource);
        Ok(Traces { exporter, client, link })
    }
}

/// The metrics export: the SDK's OTLP exporter (cumulative), and the connection for replay.
pub(super) struct MetricsExport {
    pub(super) exporter: opentelemetry_otlp::MetricExporter,
    pub(super) client: Option<SpoolingClient>,
    pub(super) link: Link,
}

impl MetricsExport {
    /// Builds the exporter; inside the export runtime.
    pub(super) fn new(target: &OtlpTarget) -> Result<MetricsExport, String> {
        let link = Link::new(Signal::Metrics, target)?;
        let (exporter, client) = match &link {
            Link::Http(http) => {
                let client = SpoolingClient::new(http.clone());
                let builder = opentelemetry_otlp::MetricExporter::builder().with_http();
                let exporter = http_options(builder, target, &client)
                    .with_temporality(Temporality::Cumulative)
                    .build()
                    .map_err(|e| e.to_string())?;
                (exporter, Some(client))
            }
            Link::Grpc { channel, metadata } => {
                let builder = opentelemetry_otlp::MetricExporter::builder().with_tonic();
                let exporter = grpc_options(builder, target, channel, metadata)
                    .with_temporality(Temporality::Cumulative)
                    .build()
                    .map_err(|e| e.to_string())?;
                (exporter, None)
            }
        };
        Ok(MetricsExport { exporter, client, link })
    }
}

/// What became of one SDK export, and the encoded request to spool if it is worth another try.
pub(super) struct Outcome {
    pub(super) delivery: Delivery,
    pub(super) body: Option<Bytes>,
}

/// Runs one SDK export. Over HTTP our client reports what happened and hands back the exact bytes
/// the SDK sent; over gRPC the SDK's error is classified and a request worth retrying is encoded
/// here (`encode`, the same transform the exporter uses).
pub(super) async fn through_sdk(
    client: Option<&SpoolingClient>,
    export: impl Future<Output = OTelSdkResult>,
    encode: impl FnOnce() -> Bytes,
) -> Outcome {
    match client {
        Some(client) => {
            let _ = client.take_attempt();
            let result = export.await;
            match client.take_attempt() {
                Some(Attempt { body, delivery }) => Outcome { delivery, body: Some(body) },
                // The exporter gave up before sending (for example a request over its size cap).
                None => Outcome {
                    delivery: Delivery::Failed(SendError::Permanent(match result {
                        Ok(()) => "the exporter sent nothing".into(),
                        Err(e) => e.to_string(),
                    })),
                    body: None,
                },
            }
        }
        // The SDK does not report a gRPC partial success (it logs it).
        None => match export.await {
            Ok(()) => Outcome { delivery: Delivery::Delivered { rejected: 0 }, body: None },
            Err(e) => {
                let failure = classify_grpc_failure(&e.to_string());
                let body = matches!(failure, SendError::Retryable(_)).then(encode);
                Outcome { delivery: Delivery::Failed(failure), body }
            }
        },
    }
}
