//! `[store]`: the local record store.

use serde::Deserialize;

use super::bounds::{check_all, GIB, MIB};
use super::ConfigError;

/// `[store]`: the local record store.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Rotate `records.jsonl` when it grows past this many bytes.
    pub max_file_bytes: u64,
    /// Rotated files kept (records.1.jsonl … records.N.jsonl).
    pub max_files: u32,
    /// Recent records kept in memory for the admin API.
    pub ring_size: usize,
    /// Bytes the in-memory ring may hold (estimated as twice each record's JSON line: the line
    /// and the parsed record); the oldest records leave first when either bound is reached.
    pub ring_max_bytes: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self { max_file_bytes: 64 << 20, max_files: 4, ring_size: 5_000, ring_max_bytes: 64 << 20 }
    }
}

impl StoreConfig {
    pub(super) fn validate(self) -> Result<Self, ConfigError> {
        check_all(&[
            ("store.max_file_bytes", self.max_file_bytes, 4096..=16 * GIB),
            ("store.max_files", u64::from(self.max_files), 0..=1000),
            ("store.ring_size", self.ring_size as u64, 1..=100_000),
            ("store.ring_max_bytes", self.ring_max_bytes as u64, MIB..=16 * GIB),
        ])?;
        Ok(self)
    }
}
