//! `[shutdown]`: what SIGTERM and SIGINT do.

use serde::Deserialize;

use super::bounds::check;
use super::ConfigError;

/// `[shutdown]`: what SIGTERM and SIGINT (Ctrl-C) do. tokentap stops accepting connections, lets
/// in-flight requests and streams finish for up to `grace_period_s`, writes their records and
/// exits; streams still open then are cut. A second SIGTERM or SIGINT ends at once.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownConfig {
    pub grace_period_s: u64,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        // Long enough for typical chat streams and most reasoning answers.
        Self { grace_period_s: 120 }
    }
}

impl ShutdownConfig {
    /// The grace period is at most an hour (0: cut at once).
    pub(super) fn validate(self) -> Result<Self, ConfigError> {
        check("shutdown.grace_period_s", self.grace_period_s, 0..=3600)?;
        Ok(self)
    }
}
