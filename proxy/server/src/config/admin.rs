//! The admin API's settings: `admin_token`, `admin_allowed_hosts` and the `admin_max_*` limits.

use std::net::SocketAddr;

use serde::Deserialize;

use super::bounds::{check, check_list};
use super::{invalid, ConfigError};

/// The admin API's bearer token. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct AdminToken(pub(super) String);

impl AdminToken {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken([redacted])")
    }
}

/// Who the admin API answers: a token (when set) and the Host names it accepts.
#[derive(Debug, Clone, Default)]
pub struct AdminAccess {
    pub token: Option<AdminToken>,
    /// Lower case; IP addresses and `localhost` are always accepted.
    pub allowed_hosts: Vec<String>,
}

/// Live feed subscribers by default, and at most.
pub const DEFAULT_FEED_SUBSCRIBERS: usize = 16;
pub const MAX_FEED_SUBSCRIBERS: usize = 1024;
/// `admin_max_connections` when not set, and its upper bound.
pub const DEFAULT_ADMIN_MAX_CONNECTIONS: usize = 256;
const MAX_ADMIN_CONNECTIONS: usize = 65_536;
/// `admin_head_timeout_s` when not set (hyper's own default).
pub const DEFAULT_ADMIN_HEAD_TIMEOUT_S: u64 = 30;
const MAX_ADMIN_HEAD_TIMEOUT_S: u64 = 3600;

/// Shortest admin token accepted.
pub const MIN_ADMIN_TOKEN_LEN: usize = 16;

/// The admin listener's limits, defaults applied.
pub(super) struct AdminLimits {
    pub(super) max_feed_subscribers: usize,
    pub(super) max_connections: usize,
    pub(super) head_timeout_s: u64,
}

impl AdminLimits {
    pub(super) fn validate(
        max_feed_subscribers: Option<usize>,
        max_connections: Option<usize>,
        head_timeout_s: Option<u64>,
    ) -> Result<Self, ConfigError> {
        let limits = Self {
            max_feed_subscribers: max_feed_subscribers.unwrap_or(DEFAULT_FEED_SUBSCRIBERS),
            max_connections: max_connections.unwrap_or(DEFAULT_ADMIN_MAX_CONNECTIONS),
            head_timeout_s: head_timeout_s.unwrap_or(DEFAULT_ADMIN_HEAD_TIMEOUT_S),
        };
        check("admin_max_feed_subscribers", limits.max_feed_subscribers as u64, 1..=MAX_FEED_SUBSCRIBERS as u64)?;
        check("admin_max_connections", limits.max_connections as u64, 1..=MAX_ADMIN_CONNECTIONS as u64)?;
        check("admin_head_timeout_s", limits.head_timeout_s, 1..=MAX_ADMIN_HEAD_TIMEOUT_S)?;
        Ok(limits)
    }
}

impl AdminAccess {
    /// The token's form, the rule that an admin API off loopback needs one, and the host names.
    pub(super) fn validate(
        admin_listen: Option<SocketAddr>,
        token: Option<AdminToken>,
        allowed_hosts: &[String],
    ) -> Result<Self, ConfigError> {
        if let Some(AdminToken(t)) = &token {
            if t.len() < MIN_ADMIN_TOKEN_LEN || !t.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(invalid(
                    "admin_token",
                    format!("must be at least {MIN_ADMIN_TOKEN_LEN} printable ASCII characters without spaces"),
                ));
            }
        }
        if let Some(addr) = admin_listen {
            if !addr.ip().is_loopback() && token.is_none() {
                return Err(invalid(
                    "admin_listen",
                    format!(
                        "{addr} is not a loopback address: set admin_token (or TOKENTAP_ADMIN_TOKEN) so that only \
                         holders of the token can read records, or listen on 127.0.0.1"
                    ),
                ));
            }
        }
        check_list("admin_allowed_hosts", allowed_hosts)?;
        let mut hosts = Vec::with_capacity(allowed_hosts.len());
        for host in allowed_hosts {
            let ok = !host.is_empty()
                && host.len() <= 253
                && host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
            if !ok {
                return Err(invalid(
                    "admin_allowed_hosts",
                    format!("{host:?} is not a host name (no port, no scheme)"),
                ));
            }
            hosts.push(host.to_ascii_lowercase());
        }
        Ok(Self { token, allowed_hosts: hosts })
    }
}
