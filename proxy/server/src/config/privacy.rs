//! `[privacy]`: captured bodies and redacted headers.

use serde::Deserialize;

use super::bounds::{check, check_list, MIB};
use super::{invalid, ConfigError};

/// `[privacy]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrivacyConfig {
    /// Store request and response bodies in records. Off by default.
    pub capture_content: bool,
    /// Bytes of each body stored when capture is on.
    pub capture_max_bytes: usize,
    /// Extra header names whose values are never recorded (added to the built-in list).
    pub redact_headers: Vec<String>,
}

impl Default for PrivacyConfig {
    fn default() -> Self {
        Self { capture_content: false, capture_max_bytes: 64 << 10, redact_headers: Vec::new() }
    }
}

impl PrivacyConfig {
    pub(super) fn validate(self) -> Result<Self, ConfigError> {
        check("privacy.capture_max_bytes", self.capture_max_bytes as u64, 0..=16 * MIB)?;
        check_list("privacy.redact_headers", &self.redact_headers)?;
        for name in &self.redact_headers {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(invalid("privacy.redact_headers", format!("{name:?} is not a header name")));
            }
        }
        Ok(self)
    }
}
