//! `[turns]`: linking the model calls of one user turn.

use serde::Deserialize;

use super::bounds::{check_all, DAY_S, GIB};
use super::{invalid, ConfigError};

/// `[turns]`: linking the model calls of one user turn (docs/metrics.md, "Turns").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TurnsConfig {
    pub enabled: bool,
    /// An open turn (its last response asked for tools) with no next step for this long closes as
    /// incomplete.
    pub idle_close_s: u64,
    /// A conversation with no new request for this long is forgotten.
    pub conversation_idle_s: u64,
    pub max_conversations: usize,
    /// Bytes of linking state (ids and hashes) kept at most; the least recently active
    /// conversations go first, counted.
    pub max_state_bytes: usize,
    /// Steps listed per turn; later ones are counted in the totals only.
    pub max_steps: usize,
    /// Request header an app may send to name the turn (same value = same turn, also across
    /// tokentap instances: the trace id is derived from it).
    pub turn_header: String,
    /// Request header an app may send to name the conversation.
    pub conversation_header: String,
    /// Remove those two headers before forwarding (default: forward them unchanged).
    pub strip_headers: bool,
    /// A secret the instances of a fleet share (`TOKENTAP_FLEET_KEY` wins), at least 16 bytes:
    /// conversation hashes are keyed by it, so every instance derives the same turn, conversation,
    /// trace and agent span ids for the same turn without shared state, and records carry the
    /// keys `tokentap report --records` needs to rebuild turns split across instances.
    pub fleet_key: Option<FleetKey>,
}

/// `[turns] fleet_key`. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct FleetKey(String);

impl FleetKey {
    /// Shortest key accepted, in bytes.
    pub const MIN_BYTES: usize = 16;

    pub fn new(key: String) -> Self {
        FleetKey(key)
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl std::fmt::Debug for FleetKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetKey([redacted])")
    }
}

impl Default for TurnsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            idle_close_s: 120,
            conversation_idle_s: 1800,
            max_conversations: 10_000,
            max_state_bytes: 32 << 20,
            max_steps: 256,
            turn_header: "x-tokentap-turn".into(),
            conversation_header: "x-tokentap-conversation".into(),
            strip_headers: false,
            fleet_key: None,
        }
    }
}

impl TurnsConfig {
    /// Checks the bounds and the two header names (trimmed and lower-cased here, once).
    pub(super) fn validate(mut self) -> Result<Self, ConfigError> {
        check_all(&[
            ("turns.idle_close_s", self.idle_close_s, 0..=DAY_S),
            ("turns.conversation_idle_s", self.conversation_idle_s, 0..=7 * DAY_S),
            ("turns.max_conversations", self.max_conversations as u64, 0..=10_000_000),
            ("turns.max_state_bytes", self.max_state_bytes as u64, 0..=16 * GIB),
            ("turns.max_steps", self.max_steps as u64, 0..=100_000),
        ])?;
        for (key, name) in
            [("turns.turn_header", &mut self.turn_header), ("turns.conversation_header", &mut self.conversation_header)]
        {
            *name = name.trim().to_ascii_lowercase();
            if name.is_empty() || http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(invalid(key, format!("{name:?} is not a header name")));
            }
        }
        if self.fleet_key.as_ref().is_some_and(|k| k.as_bytes().len() < FleetKey::MIN_BYTES) {
            return Err(invalid(
                "turns.fleet_key",
                format!(
                    "is shorter than {} bytes: use a random secret (e.g. `openssl rand -hex 32`)",
                    FleetKey::MIN_BYTES
                ),
            ));
        }
        if self.turn_header == self.conversation_header {
            return Err(invalid("turns.conversation_header", "must differ from turns.turn_header"));
        }
        Ok(self)
    }

    /// The tracker's settings.
    pub fn tracker_config(&self) -> tokentap_record::turn::TurnConfig {
        tokentap_record::turn::TurnConfig {
            idle_close_ns: self.idle_close_s.saturating_mul(1_000_000_000),
            conversation_idle_ns: self.conversation_idle_s.saturating_mul(1_000_000_000),
            max_conversations: self.max_conversations,
            max_state_bytes: self.max_state_bytes,
            max_steps: self.max_steps,
            max_tool_calls: 1024,
            headers: tokentap_record::turn::TurnHeaders {
                turn: self.turn_header.clone(),
                conversation: self.conversation_header.clone(),
            },
            fleet: self.fleet_key.is_some(),
        }
    }
}
