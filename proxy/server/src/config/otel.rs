//! `[otel]`: OpenTelemetry export.
//!
//! Export is off unless an OTLP endpoint is configured, in the file or in the standard variables
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, …). The variables win over
//! the file, as `TOKENTAP_*` variables do; a signal-specific value wins over the generic one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use tokentap_telemetry::settings::{BackendProfile, LlmSpan, OtlpProtocol, OtlpSettings, OtlpTarget, SecretHeaders};

use super::bounds::{check, check_all, GIB, HOUR_MS};
use super::{invalid, ConfigError};

/// `[otel]` as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtelConfig {
    /// Base URL of the collector, e.g. "http://127.0.0.1:4318" (HTTP) or "http://127.0.0.1:4317"
    /// (gRPC). For HTTP, `/v1/traces` and `/v1/metrics` are appended. Setting it turns export on.
    pub endpoint: Option<String>,
    /// Full URL for traces (used as is), overriding `endpoint`.
    pub traces_endpoint: Option<String>,
    /// Full URL for metrics (used as is), overriding `endpoint`.
    pub metrics_endpoint: Option<String>,
    /// "http/protobuf" (the default) or "grpc".
    pub protocol: Option<String>,
    /// Export traces (when an endpoint is configured).
    pub traces: bool,
    /// Export metrics (when an endpoint is configured). Unset: on, except for a profile whose
    /// backend takes traces only (phoenix, langfuse, datadog).
    pub metrics: Option<bool>,
    /// The backend tokentap exports to straight, when no collector sits in between: "generic"
    /// (the default: a collector or any OTLP backend), "phoenix", "langfuse" or "datadog".
    pub profile: BackendProfile,
    /// The Phoenix project the spans go to (resource attribute `openinference.project.name`,
    /// added with `profile = "phoenix"`; default "tokentap").
    pub project: Option<String>,
    /// Which span backends count as the LLM call: "tokentap" (the default) or "app", for an app
    /// that records its own GenAI span for each call and sends its `traceparent`.
    pub llm_span: LlmSpan,
    /// Headers sent with every export (for example an API key of a hosted backend). Never
    /// recorded, logged or shown by the admin API.
    pub headers: BTreeMap<String, String>,
    /// `service.name` of the exported resource.
    pub service_name: String,
    /// Further resource attributes, e.g. { "deployment.environment.name" = "prod" }.
    pub resource_attributes: BTreeMap<String, String>,
    /// Longest wait for the collector's answer to one export.
    pub timeout_ms: u64,
    /// PEM file of CA certificates trusted for https:// endpoints, besides the public roots
    /// (`OTEL_EXPORTER_OTLP_CERTIFICATE`).
    pub ca_file: Option<PathBuf>,
    /// Requests whose spans wait for the export thread; when full, new ones are dropped and counted.
    pub queue_capacity: usize,
    /// Requests per trace export at most…
    pub batch_max_requests: usize,
    /// …and the longest a finished request waits for its batch.
    pub batch_delay_ms: u64,
    /// Interval of the (cumulative) metric exports.
    pub metrics_interval_ms: u64,
    /// Events per span at most (chunk events beyond it are summarised and counted). At most 128,
    /// the default limit of the OpenTelemetry SDKs, so no backend or collector drops them silently.
    pub max_events_per_span: usize,
    /// Attach the captured request and response bodies to the span. Needs
    /// `privacy.capture_content = true` as well; off by default.
    pub capture_content: bool,
    /// Size cap of the on-disk spool used while the collector is unreachable; 0 turns it off
    /// (then such telemetry is dropped and counted).
    pub spool_max_bytes: u64,
    /// Spool directory; default `DATA_DIR/otlp-spool`.
    pub spool_dir: Option<PathBuf>,
    /// First wait before trying an unreachable collector again; doubles up to `retry_max_ms`.
    pub retry_initial_ms: u64,
    pub retry_max_ms: u64,
}

impl Default for OtelConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            traces_endpoint: None,
            metrics_endpoint: None,
            protocol: None,
            traces: true,
            metrics: None,
            profile: BackendProfile::Generic,
            project: None,
            llm_span: LlmSpan::Tokentap,
            headers: BTreeMap::new(),
            service_name: "tokentap".into(),
            resource_attributes: BTreeMap::new(),
            timeout_ms: 10_000,
            ca_file: None,
            queue_capacity: 4096,
            batch_max_requests: 256,
            batch_delay_ms: 1000,
            metrics_interval_ms: 10_000,
            max_events_per_span: 64,
            capture_content: false,
            spool_max_bytes: 64 << 20,
            spool_dir: None,
            retry_initial_ms: 500,
            retry_max_ms: 30_000,
        }
    }
}

/// The `OTEL_*` environment variables that were set.
#[derive(Debug, Clone, Default)]
pub struct OtelEnv(BTreeMap<String, String>);

impl OtelEnv {
    pub fn from_process() -> Self {
        Self(std::env::vars().filter(|(k, _)| k.starts_with("OTEL_")).collect())
    }

    pub fn from_pairs(pairs: &[(&str, &str)]) -> Self {
        Self(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str).filter(|v| !v.trim().is_empty())
    }
}

/// The header that sends OTLP traces to Datadog LLM Observability, and its value.
pub(super) const DATADOG_SOURCE_HEADER: &str = "dd-otlp-source";
pub(super) const DATADOG_SOURCE_LLMOBS: &str = "llmobs";
/// The header Langfuse's OTLP endpoint reads the ingestion version from, and the version.
pub(super) const LANGFUSE_INGESTION_HEADER: &str = "x-langfuse-ingestion-version";
pub(super) const LANGFUSE_INGESTION_VERSION: &str = "4";
/// The Phoenix project when `[otel] project` is not set.
pub(super) const DEFAULT_PHOENIX_PROJECT: &str = "tokentap";
/// Phoenix's resource attribute naming the project.
pub(super) const PHOENIX_PROJECT_ATTRIBUTE: &str = "openinference.project.name";

/// The largest event budget: the SDKs' default per-span limit.
pub(super) const MAX_EVENTS_PER_SPAN: usize = 128;

fn parse_protocol(key: &str, text: &str) -> Result<OtlpProtocol, ConfigError> {
    match text.trim() {
        "grpc" => Ok(OtlpProtocol::Grpc),
        "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
        "http/json" => Err(invalid(key, "http/json is not supported; use http/protobuf or grpc")),
        other => Err(invalid(key, format!("{other:?} is not grpc or http/protobuf"))),
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && bytes[i + 1].is_ascii_hexdigit()
            && bytes[i + 2].is_ascii_hexdigit()
        {
            let hex = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
            out.push(hex(bytes[i + 1]) * 16 + hex(bytes[i + 2]));
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `key1=value1,key2=value2` (the format of `OTEL_EXPORTER_OTLP_HEADERS` and
/// `OTEL_RESOURCE_ATTRIBUTES`), values percent-decoded.
fn parse_pairs(key: &str, text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((k, v)) = item.split_once('=') else {
            // The value may hold secrets: name the variable, not the text.
            return Err(invalid(key, "expected comma-separated key=value pairs"));
        };
        out.push((percent_decode(k.trim()), percent_decode(v.trim())));
    }
    Ok(out)
}

fn check_header(key: &str, name: &str, value: &str) -> Result<(), ConfigError> {
    if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(invalid(key, format!("{name:?} is not a header name")));
    }
    if http::HeaderValue::from_str(value).is_err() {
        return Err(invalid(key, format!("the value of {name:?} is not a valid header value")));
    }
    Ok(())
}

fn check_url(key: &str, url: &str) -> Result<(), ConfigError> {
    let shown = super::routes::display_url(url);
    let Some(rest) = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")) else {
        return Err(invalid(key, format!("{shown:?} must start with http:// or https://")));
    };
    let uri: http::Uri = url.parse().map_err(|e| invalid(key, format!("{shown:?} is not a URL ({e})")))?;
    if rest.is_empty() || uri.host().is_none_or(str::is_empty) {
        return Err(invalid(key, format!("{shown:?} has no host")));
    }
    Ok(())
}

/// `base` + `/v1/{signal}`, for the generic endpoint over HTTP.
fn with_signal_path(base: &str, signal: &str) -> String {
    format!("{}/v1/{signal}", base.trim_end_matches('/'))
}

struct Choice<'a> {
    value: &'a str,
    key: String,
}

impl OtelConfig {
    /// The file's values, whether export is on or not: every bound of a field in one place.
    fn check_bounds(&self) -> Result<(), ConfigError> {
        check_all(&[
            ("otel.timeout_ms", self.timeout_ms, 1..=600_000),
            ("otel.queue_capacity", self.queue_capacity as u64, 1..=1_000_000),
            ("otel.batch_max_requests", self.batch_max_requests as u64, 1..=100_000),
            ("otel.batch_delay_ms", self.batch_delay_ms, 1..=HOUR_MS),
            ("otel.metrics_interval_ms", self.metrics_interval_ms, 1..=HOUR_MS),
            ("otel.max_events_per_span", self.max_events_per_span as u64, 0..=MAX_EVENTS_PER_SPAN as u64),
            ("otel.spool_max_bytes", self.spool_max_bytes, 0..=64 * GIB),
            ("otel.retry_initial_ms", self.retry_initial_ms, 1..=HOUR_MS),
            ("otel.retry_max_ms", self.retry_max_ms, 1..=HOUR_MS),
        ])?;
        if self.retry_max_ms < self.retry_initial_ms {
            return Err(invalid("otel.retry_max_ms", "must be at least otel.retry_initial_ms"));
        }
        Ok(())
    }

    /// Checks `[otel]` and the `OTEL_*` variables; `None` when export is off.
    pub(super) fn validate(&self, env: &OtelEnv, data_dir: &Path) -> Result<Option<OtlpSettings>, ConfigError> {
        self.check_bounds()?;
        validate_otel(self, env, data_dir)
    }
}

fn validate_otel(file: &OtelConfig, env: &OtelEnv, data_dir: &Path) -> Result<Option<OtlpSettings>, ConfigError> {
    if env.get("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let exporter_on = |var: &str, file_on: bool| -> Result<bool, ConfigError> {
        match env.get(var).map(str::trim) {
            None => Ok(file_on),
            Some("otlp") => Ok(true),
            Some("none") => Ok(false),
            Some(other) => Err(invalid(var, format!("{other:?}: tokentap exports with otlp or none"))),
        }
    };
    let traces_on = exporter_on("OTEL_TRACES_EXPORTER", file.traces)?;
    let metrics_on = exporter_on("OTEL_METRICS_EXPORTER", file.metrics.unwrap_or(file.profile.takes_metrics()))?;

    let generic_protocol = match env.get("OTEL_EXPORTER_OTLP_PROTOCOL") {
        Some(p) => Some(parse_protocol("OTEL_EXPORTER_OTLP_PROTOCOL", p)?),
        None => file.protocol.as_deref().map(|p| parse_protocol("otel.protocol", p)).transpose()?,
    };
    let mut generic_headers: Vec<(String, String)> = file.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    for (name, value) in &generic_headers {
        check_header("otel.headers", name, value)?;
    }
    if let Some(text) = env.get("OTEL_EXPORTER_OTLP_HEADERS") {
        for (name, value) in parse_pairs("OTEL_EXPORTER_OTLP_HEADERS", text)? {
            check_header("OTEL_EXPORTER_OTLP_HEADERS", &name, &value)?;
            generic_headers.retain(|(k, _)| !k.eq_ignore_ascii_case(&name));
            generic_headers.push((name, value));
        }
    }
    // Datadog's LLM Observability intake takes OTLP traces that name it in this header (its docs:
    // `dd-otlp-source=llmobs`, next to the `dd-api-key` header the user configures).
    if file.profile == BackendProfile::Datadog
        && !generic_headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(DATADOG_SOURCE_HEADER))
    {
        generic_headers.push((DATADOG_SOURCE_HEADER.into(), DATADOG_SOURCE_LLMOBS.into()));
    }
    // Langfuse asks direct OTLP exporters to name its current ingestion version in this header.
    if file.profile == BackendProfile::Langfuse
        && !generic_headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(LANGFUSE_INGESTION_HEADER))
    {
        generic_headers.push((LANGFUSE_INGESTION_HEADER.into(), LANGFUSE_INGESTION_VERSION.into()));
    }
    let generic_timeout = match env.get("OTEL_EXPORTER_OTLP_TIMEOUT") {
        Some(t) => {
            t.trim().parse::<u64>().map_err(|_| invalid("OTEL_EXPORTER_OTLP_TIMEOUT", "must be milliseconds"))?
        }
        None => file.timeout_ms,
    };

    let target = |signal: &str, on: bool, file_specific: &Option<String>| -> Result<Option<OtlpTarget>, ConfigError> {
        if !on {
            return Ok(None);
        }
        let upper = signal.to_ascii_uppercase();
        let specific_var = format!("OTEL_EXPORTER_OTLP_{upper}_ENDPOINT");
        let protocol_var = format!("OTEL_EXPORTER_OTLP_{upper}_PROTOCOL");
        let protocol = match env.get(&protocol_var) {
            Some(p) => parse_protocol(&protocol_var, p)?,
            None => generic_protocol.unwrap_or(OtlpProtocol::HttpProtobuf),
        };
        // Signal-specific URLs are used as they are; the generic one gets `/v1/{signal}` over HTTP.
        let specific = env
            .get(&specific_var)
            .map(|v| Choice { value: v, key: specific_var.clone() })
            .or_else(|| file_specific.as_deref().map(|v| Choice { value: v, key: format!("otel.{signal}_endpoint") }));
        let generic = env
            .get("OTEL_EXPORTER_OTLP_ENDPOINT")
            .map(|v| Choice { value: v, key: "OTEL_EXPORTER_OTLP_ENDPOINT".into() })
            .or_else(|| file.endpoint.as_deref().map(|v| Choice { value: v, key: "otel.endpoint".into() }));
        let endpoint = match (specific, generic) {
            (Some(s), _) => {
                check_url(&s.key, s.value.trim())?;
                s.value.trim().to_string()
            }
            (None, Some(g)) => {
                check_url(&g.key, g.value.trim())?;
                match protocol {
                    OtlpProtocol::HttpProtobuf => with_signal_path(g.value.trim(), signal),
                    OtlpProtocol::Grpc => g.value.trim().to_string(),
                }
            }
            (None, None) => return Ok(None),
        };
        let mut headers = generic_headers.clone();
        let headers_var = format!("OTEL_EXPORTER_OTLP_{upper}_HEADERS");
        if let Some(text) = env.get(&headers_var) {
            for (name, value) in parse_pairs(&headers_var, text)? {
                check_header(&headers_var, &name, &value)?;
                headers.retain(|(k, _)| !k.eq_ignore_ascii_case(&name));
                headers.push((name, value));
            }
        }
        let timeout_var = format!("OTEL_EXPORTER_OTLP_{upper}_TIMEOUT");
        let timeout_ms = match env.get(&timeout_var) {
            Some(t) => t.trim().parse::<u64>().map_err(|_| invalid(&timeout_var, "must be milliseconds"))?,
            None => generic_timeout,
        };
        if timeout_ms == 0 {
            return Err(invalid(timeout_var, "must be greater than 0"));
        }
        let certificate_var = format!("OTEL_EXPORTER_OTLP_{upper}_CERTIFICATE");
        let ca_file = match (env.get(&certificate_var), env.get("OTEL_EXPORTER_OTLP_CERTIFICATE"), &file.ca_file) {
            (Some(path), _, _) => Some((certificate_var, PathBuf::from(path.trim()))),
            (None, Some(path), _) => Some(("OTEL_EXPORTER_OTLP_CERTIFICATE".to_string(), PathBuf::from(path.trim()))),
            (None, None, Some(path)) => Some(("otel.ca_file".to_string(), path.clone())),
            (None, None, None) => None,
        };
        if let Some((key, path)) = &ca_file {
            if !path.is_file() {
                return Err(invalid(key, format!("{} is not a readable file", path.display())));
            }
        }
        Ok(Some(OtlpTarget {
            protocol,
            endpoint,
            headers: SecretHeaders::new(headers),
            timeout: Duration::from_millis(timeout_ms),
            ca_file: ca_file.map(|(_, path)| path),
        }))
    };
    let traces = target("traces", traces_on, &file.traces_endpoint)?;
    let metrics = target("metrics", metrics_on, &file.metrics_endpoint)?;
    if traces.is_none() && metrics.is_none() {
        return Ok(None);
    }

    let service_name =
        env.get("OTEL_SERVICE_NAME").map(|s| s.trim().to_string()).unwrap_or_else(|| file.service_name.clone());
    if service_name.is_empty() {
        return Err(invalid("otel.service_name", "must not be empty"));
    }
    let mut resource_attributes: Vec<(String, String)> = file.resource_attributes.clone().into_iter().collect();
    if let Some(text) = env.get("OTEL_RESOURCE_ATTRIBUTES") {
        for (k, v) in parse_pairs("OTEL_RESOURCE_ATTRIBUTES", text)? {
            resource_attributes.retain(|(existing, _)| *existing != k);
            resource_attributes.push((k, v));
        }
    }
    if let Some(project) = &file.project {
        if file.profile != BackendProfile::Phoenix {
            return Err(invalid("otel.project", "names a Phoenix project: set profile = \"phoenix\" too"));
        }
        if project.trim().is_empty() {
            return Err(invalid("otel.project", "must not be empty"));
        }
    }
    if file.profile == BackendProfile::Phoenix
        && !resource_attributes.iter().any(|(k, _)| k == PHOENIX_PROJECT_ATTRIBUTE)
    {
        let project = file.project.as_deref().map_or(DEFAULT_PHOENIX_PROJECT, str::trim);
        resource_attributes.push((PHOENIX_PROJECT_ATTRIBUTE.into(), project.to_string()));
    }
    // The variables win over the file's values (checked with the file's bounds, under their own name).
    let ms_var = |var: &str, file_value: u64| -> Result<u64, ConfigError> {
        let Some(text) = env.get(var) else { return Ok(file_value) };
        let ms = text.trim().parse().map_err(|_| invalid(var, "must be milliseconds"))?;
        check(var, ms, 1..=HOUR_MS)?;
        Ok(ms)
    };
    let batch_delay_ms = ms_var("OTEL_BSP_SCHEDULE_DELAY", file.batch_delay_ms)?;
    let metrics_interval_ms = ms_var("OTEL_METRIC_EXPORT_INTERVAL", file.metrics_interval_ms)?;
    Ok(Some(OtlpSettings {
        traces,
        metrics,
        service_name,
        resource_attributes,
        queue_capacity: file.queue_capacity,
        batch_max_records: file.batch_max_requests,
        batch_delay: Duration::from_millis(batch_delay_ms),
        metrics_interval: Duration::from_millis(metrics_interval_ms),
        max_events_per_span: file.max_events_per_span,
        capture_content: file.capture_content,
        spool_dir: file.spool_dir.clone().unwrap_or_else(|| data_dir.join("otlp-spool")),
        spool_max_bytes: file.spool_max_bytes,
        retry_initial: Duration::from_millis(file.retry_initial_ms),
        retry_max: Duration::from_millis(file.retry_max_ms),
        profile: file.profile,
        llm_span: file.llm_span,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> OtelConfig {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Wrapper {
            #[serde(default)]
            otel: OtelConfig,
        }
        toml::from_str::<Wrapper>(text).map(|w| w.otel).unwrap()
    }

    fn settings(text: &str, env: &[(&str, &str)]) -> Result<Option<OtlpSettings>, ConfigError> {
        file(text).validate(&OtelEnv::from_pairs(env), Path::new("/data"))
    }

    #[test]
    fn off_unless_an_endpoint_is_configured() {
        assert!(settings("", &[]).unwrap().is_none());
        assert!(settings("[otel]\nprotocol = \"grpc\"\n", &[("OTEL_SERVICE_NAME", "x")]).unwrap().is_none());
        let on = settings("[otel]\nendpoint = \"http://127.0.0.1:4318\"\n", &[]).unwrap().unwrap();
        assert_eq!(on.spool_dir, Path::new("/data/otlp-spool"));
        assert!(settings("[otel]\nendpoint = \"http://c:4318\"\n", &[("OTEL_SDK_DISABLED", "true")])
            .unwrap()
            .is_none());
    }

    #[test]
    fn generic_http_endpoint_gets_signal_paths() {
        let s = settings("[otel]\nendpoint = \"http://collector:4318/\"\n", &[]).unwrap().unwrap();
        let traces = s.traces.unwrap();
        assert_eq!(traces.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(traces.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(s.metrics.unwrap().endpoint, "http://collector:4318/v1/metrics");
    }

    #[test]
    fn environment_wins_and_specific_beats_generic() {
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://metrics:4318/custom"),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s%3Dcret,x-team=a"),
            ("OTEL_SERVICE_NAME", "gateway"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=prod"),
        ];
        let s = settings("[otel]\nendpoint = \"http://file:4318\"\nservice_name = \"file\"\n", &env).unwrap().unwrap();
        let traces = s.traces.unwrap();
        assert_eq!((traces.protocol, traces.endpoint.as_str()), (OtlpProtocol::Grpc, "http://env:4317"));
        let metrics = s.metrics.unwrap();
        assert_eq!(
            (metrics.protocol, metrics.endpoint.as_str()),
            (OtlpProtocol::HttpProtobuf, "http://metrics:4318/custom")
        );
        let headers: Vec<_> = traces.headers.iter().cloned().collect();
        assert!(headers.contains(&("x-api-key".into(), "s=cret".into())), "{headers:?}");
        assert!(!format!("{:?}", traces.headers).contains("s=cret"), "headers must not show in Debug");
        assert_eq!(s.service_name, "gateway");
        assert_eq!(s.resource_attributes, vec![("deployment.environment.name".into(), "prod".into())]);
    }

    #[test]
    fn https_endpoints_take_a_ca_file() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "pem").unwrap();
        let text = format!("[otel]\nendpoint = \"https://collector:4318\"\nca_file = {:?}\n", ca.display().to_string());
        let s = settings(&text, &[]).unwrap().unwrap();
        let traces = s.traces.unwrap();
        assert_eq!(traces.endpoint, "https://collector:4318/v1/traces");
        assert_eq!(traces.ca_file.as_deref(), Some(ca.as_path()));
        // The variable wins over the file; without either there is no CA file (public roots only).
        let other = dir.path().join("other.pem");
        std::fs::write(&other, "pem").unwrap();
        let s = settings(&text, &[("OTEL_EXPORTER_OTLP_CERTIFICATE", other.to_str().unwrap())]).unwrap().unwrap();
        assert_eq!(s.metrics.unwrap().ca_file.as_deref(), Some(other.as_path()));
        let s = settings("[otel]\nendpoint = \"https://c:4317\"\nprotocol = \"grpc\"\n", &[]).unwrap().unwrap();
        assert_eq!(s.traces.unwrap().ca_file, None);
    }

    #[test]
    fn a_signal_can_be_switched_off() {
        let s =
            settings("[otel]\nendpoint = \"http://c:4318\"\n", &[("OTEL_METRICS_EXPORTER", "none")]).unwrap().unwrap();
        assert!(s.traces.is_some() && s.metrics.is_none());
        let s = settings("[otel]\nendpoint = \"http://c:4318\"\ntraces = false\n", &[]).unwrap().unwrap();
        assert!(s.traces.is_none() && s.metrics.is_some());
    }

    #[test]
    fn bad_values_are_named() {
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
        let cases: &[Case] = &[
            ("[otel]\nendpoint = \"ftp://x\"\n", &[], "otel.endpoint"),
            ("[otel]\nendpoint = \"https://x\"\nca_file = \"/no/such/ca.pem\"\n", &[], "otel.ca_file"),
            (
                "",
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://x"), ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/no/such/ca.pem")],
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
            ),
            ("[otel]\nendpoint = \"http://x\"\nprotocol = \"http/json\"\n", &[], "otel.protocol"),
            ("", &[("OTEL_EXPORTER_OTLP_ENDPOINT", "nonsense")], "OTEL_EXPORTER_OTLP_ENDPOINT"),
            (
                "",
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x"), ("OTEL_EXPORTER_OTLP_HEADERS", "novalue")],
                "OTEL_EXPORTER_OTLP_HEADERS",
            ),
            (
                "",
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x"), ("OTEL_TRACES_EXPORTER", "zipkin")],
                "OTEL_TRACES_EXPORTER",
            ),
            ("[otel]\nendpoint = \"http://x\"\nmax_events_per_span = 500\n", &[], "otel.max_events_per_span"),
            ("[otel]\nendpoint = \"http://x\"\nbatch_delay_ms = 0\n", &[], "otel.batch_delay_ms"),
            ("[otel]\nendpoint = \"http://x\"\nretry_initial_ms = 10\nretry_max_ms = 5\n", &[], "otel.retry_max_ms"),
            ("[otel]\nendpoint = \"http://x\"\n[otel.headers]\n\"bad header\" = \"v\"\n", &[], "otel.headers"),
            ("[otel]\nendpoint = \"http://x\"\nproject = \"p\"\n", &[], "otel.project"),
            ("[otel]\nendpoint = \"http://x\"\nprofile = \"phoenix\"\nproject = \" \"\n", &[], "otel.project"),
        ];
        for (text, env, key) in cases {
            let err = settings(text, env).unwrap_err().to_string();
            assert!(err.contains(key), "{text} {env:?}: {err}");
        }
        // Header values never appear in errors.
        let err =
            settings("", &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x"), ("OTEL_EXPORTER_OTLP_HEADERS", "secretvalue")])
                .unwrap_err()
                .to_string();
        assert!(!err.contains("secretvalue"), "{err}");
    }

    #[test]
    fn a_profile_adds_what_its_backend_needs() {
        // Phoenix: its project attribute, and no metrics (it answers 405 on /v1/metrics).
        let s =
            settings("[otel]\nendpoint = \"http://127.0.0.1:6006\"\nprofile = \"phoenix\"\n", &[]).unwrap().unwrap();
        assert_eq!(s.profile, BackendProfile::Phoenix);
        assert_eq!(s.traces.as_ref().unwrap().endpoint, "http://127.0.0.1:6006/v1/traces");
        assert!(s.metrics.is_none(), "Phoenix takes traces only");
        assert!(s.resource_attributes.contains(&(PHOENIX_PROJECT_ATTRIBUTE.into(), "tokentap".into())));
        let s = settings(
            "[otel]\nendpoint = \"http://p:6006\"\nprofile = \"phoenix\"\nproject = \"agents\"\nmetrics = true\n",
            &[],
        )
        .unwrap()
        .unwrap();
        assert!(s.metrics.is_some(), "an explicit metrics = true wins");
        assert!(s.resource_attributes.contains(&(PHOENIX_PROJECT_ATTRIBUTE.into(), "agents".into())));
        // Datadog: the LLM Observability header, unless configured otherwise.
        let s = settings("[otel]\nendpoint = \"https://dd\"\nprofile = \"datadog\"\n", &[]).unwrap().unwrap();
        let headers: Vec<_> = s.traces.unwrap().headers.iter().cloned().collect();
        assert!(headers.contains(&("dd-otlp-source".into(), "llmobs".into())), "{headers:?}");
        assert!(s.metrics.is_none());
        // Langfuse: traces only; the generic profile changes nothing.
        let s = settings("[otel]\nendpoint = \"https://lf\"\nprofile = \"langfuse\"\n", &[]).unwrap().unwrap();
        assert!(s.metrics.is_none());
        let headers: Vec<_> = s.traces.unwrap().headers.iter().cloned().collect();
        assert!(headers.contains(&("x-langfuse-ingestion-version".into(), "4".into())), "{headers:?}");
        let s = settings("[otel]\nendpoint = \"http://c:4318\"\n", &[]).unwrap().unwrap();
        assert_eq!((s.profile, s.llm_span), (BackendProfile::Generic, LlmSpan::Tokentap));
        assert!(s.metrics.is_some() && s.resource_attributes.is_empty());
        let s = settings("[otel]\nendpoint = \"http://c:4318\"\nllm_span = \"app\"\n", &[]).unwrap().unwrap();
        assert_eq!(s.llm_span, LlmSpan::App);
    }

    #[test]
    fn unknown_profiles_are_refused() {
        let err = crate::config::parse_str("[otel]\nprofile = \"honeycomb\"\n").unwrap_err();
        assert!(err.contains("honeycomb") && err.contains("phoenix"), "{err}");
        let err = crate::config::parse_str("[otel]\nllm_span = \"both\"\n").unwrap_err();
        assert!(err.contains("both"), "{err}");
    }

    #[test]
    fn misspelt_keys_are_named() {
        let err = crate::config::parse_str("[otel]\nendpont = \"x\"\n").unwrap_err();
        assert!(err.contains("endpont"), "{err}");
        let err = crate::config::parse_str("[metrics]\nprometheus_port = 1\n").unwrap_err();
        assert!(err.contains("prometheus_port"), "{err}");
    }
}
