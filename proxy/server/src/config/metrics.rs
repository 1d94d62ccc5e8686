//! `[metrics]`: the metric registry and the Prometheus endpoint (the section's fields are
//! `tokentap_telemetry::settings::MetricsConfig`).

use tokentap_telemetry::settings::MetricsConfig;

use super::bounds::check;
use super::ConfigError;

/// Checks `[metrics]`.
pub(super) fn validate_metrics(metrics: MetricsConfig) -> Result<MetricsConfig, ConfigError> {
    check("metrics.max_series_per_metric", metrics.max_series_per_metric as u64, 1..=100_000)?;
    Ok(metrics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_section_is_checked() {
        assert!(validate_metrics(MetricsConfig::default()).is_ok());
        for bad in [0, 100_001] {
            let bad = MetricsConfig { max_series_per_metric: bad, ..MetricsConfig::default() };
            assert!(validate_metrics(bad).unwrap_err().to_string().contains("metrics.max_series_per_metric"));
        }
    }
}
