//! `[probe]`: reports from the browser probe.

use serde::Deserialize;

use super::bounds::{check_all, check_list, check_rate, DAY_S, MIB};
use super::{invalid, ConfigError};

/// `[probe]`: reports from the browser probe (`POST /_tokentap/v1/probe` on the proxy listener).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    /// Accept probe reports and serve the probe at `/_tokentap/probe/`.
    pub enabled: bool,
    /// Origins (besides the proxy's own) whose pages may send reports, e.g. "https://app.example".
    pub allowed_origins: Vec<String>,
    /// Largest report body accepted.
    pub max_report_bytes: usize,
    /// Reports per second per client address (token bucket rate)…
    pub reports_per_second: f64,
    /// …and the bucket's size.
    pub burst: u32,
    /// How long after a request its trace id may still be reported on.
    pub trace_ttl_s: u64,
    /// Trace ids remembered for that purpose.
    pub max_recent_traces: usize,
    /// Reports accepted per proxied request of a trace; later ones get a 429 (each accepted report
    /// rewrites the whole record).
    pub max_reports_per_request: u32,
    /// Reports per second from all clients together (token bucket rate)…
    pub total_reports_per_second: f64,
    /// …and the bucket's size.
    pub total_burst: u32,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            allowed_origins: Vec::new(),
            max_report_bytes: 256 << 10,
            reports_per_second: 20.0,
            burst: 100,
            trace_ttl_s: 600,
            max_recent_traces: 50_000,
            max_reports_per_request: 2,
            total_reports_per_second: 50.0,
            total_burst: 200,
        }
    }
}

/// The highest report rate, per address or in total.
const MAX_REPORTS_PER_SECOND: f64 = 100_000.0;

impl ProbeConfig {
    pub(super) fn validate(self) -> Result<Self, ConfigError> {
        check_all(&[
            ("probe.max_report_bytes", self.max_report_bytes as u64, 1024..=16 * MIB),
            ("probe.burst", u64::from(self.burst), 1..=100_000),
            ("probe.total_burst", u64::from(self.total_burst), 1..=100_000),
            ("probe.trace_ttl_s", self.trace_ttl_s, 0..=DAY_S),
            ("probe.max_recent_traces", self.max_recent_traces as u64, 1..=1_000_000),
            ("probe.max_reports_per_request", u64::from(self.max_reports_per_request), 1..=100),
        ])?;
        check_rate("probe.reports_per_second", self.reports_per_second, MAX_REPORTS_PER_SECOND)?;
        check_rate("probe.total_reports_per_second", self.total_reports_per_second, MAX_REPORTS_PER_SECOND)?;
        check_list("probe.allowed_origins", &self.allowed_origins)?;
        for origin in &self.allowed_origins {
            if origin != "*" && !(origin.starts_with("http://") || origin.starts_with("https://")) {
                return Err(invalid(
                    "probe.allowed_origins",
                    format!("{origin:?} is not an origin like https://app.example"),
                ));
            }
        }
        Ok(self)
    }
}
